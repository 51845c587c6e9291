"""`specdeck notify HOST`: the host's notification channels, where its daemon sends alerts while
no console is open (a phone through ntfy, a team's Slack, Mattermost or Discord, a JSON webhook,
a command such as mail).

  specdeck notify HOST                                  list the channels and how each is doing
  specdeck notify HOST --add URL [--format F] [--on KINDS] [--quiet 22:00-07:00]
  specdeck notify HOST --command [--on KINDS] -- ARGV   the alert as JSON on ARGV's stdin
  specdeck notify HOST --change ID [--on KINDS] [--quiet HH:MM-HH:MM|off]
  specdeck notify HOST --heartbeat URL [--every 5m]   ping URL (a GET) every period: healthchecks.io,
                                                      Uptime Kuma push or Better Stack see a host gone silent
  specdeck notify HOST --remove ID                      a channel (c1) or a heartbeat (h1)
  specdeck notify HOST --test [ID]                      send a test alert now: delivered or why not
  specdeck notify HOST --retry [ID]                     try what waits now, not at the next backoff
  specdeck notify HOST --send MESSAGE [--urgent]        an alert of your own, through the channels
  specdeck notify HOST --digest 08:00                   the morning report (specdeck report) each day at 08:00
                                                      (the host's clock) through the channels; --digest off ends it
"""

from ..cli.common import EXIT_FAILED, CommandError, connect, emit
from ..cli.common import parse_duration
from ..report.digest_text import digest_line
from .model import channel_line, format_channels, format_heartbeats, heartbeat_line

FORMATS = ("ntfy", "slack", "discord", "json")


def add_commands(commands):
    p = commands.add_parser("notify", help="where the host sends alerts while no console is open: ntfy, Slack, Discord, a webhook, a command",
                            description=__doc__.split("\n\n", 1)[1], formatter_class=__import__("argparse").RawDescriptionHelpFormatter)
    p.set_defaults(func=cmd_notify)
    p.add_argument("host")
    p.add_argument("argv", nargs="*", metavar="-- ARGV", help="with --command: the command, after --")
    action = p.add_mutually_exclusive_group()
    action.add_argument("--add", metavar="URL", help="add a channel: an ntfy topic URL or a Slack, Mattermost, Discord or JSON webhook")
    action.add_argument("--command", action="store_true", help="add a channel that runs ARGV (after --) with the alert as JSON on stdin")
    action.add_argument("--list", action="store_true", help="list the channels (the default)")
    action.add_argument("--remove", metavar="ID", help="remove a channel (c1) or end a heartbeat (h1)")
    action.add_argument("--heartbeat", metavar="URL", help="the host's daemon pings URL every --every (a GET; URL/fail on a "
                        "Healthchecks URL while a failure or stall is open), so that service tells when the host goes silent")
    action.add_argument("--change", metavar="ID", help="change a channel's --on or --quiet")
    action.add_argument("--test", metavar="ID", nargs="?", const="", help="send a test alert now (to ID, default every channel)")
    action.add_argument("--retry", metavar="ID", nargs="?", const="", help="try the alerts waiting for ID (default all) now")
    action.add_argument("--send", metavar="MESSAGE", help="send an alert of your own through the channels")
    action.add_argument("--digest", metavar="HH:MM", help="send the morning report each day at HH:MM (the host's clock; off: no more)")
    p.add_argument("--format", choices=FORMATS, help="what the URL speaks (default: guessed from it; json when unsure)")
    p.add_argument("--on", metavar="KINDS", help="which alerts: failed,gpu,speculation,training,downloads,stalled,slowdown,disks or all (default all)")
    p.add_argument("--quiet", metavar="HH:MM-HH:MM", help="quiet hours, the host's local time: only failures are sent then (off: none)")
    p.add_argument("--every", metavar="DURATION", help="with --heartbeat: the period, 5s or more, e.g. 30s, 5m (default 5m)")
    p.add_argument("--urgent", action="store_true", help="with --send: send it in quiet hours too")


def cmd_notify(args):
    args.argv = list(args.argv) + list(getattr(args, "after_dashes", None) or [])  # main() splits at --
    if args.argv and not args.command:
        raise CommandError("a command after -- goes with --command")
    if args.every is not None and not args.heartbeat:
        raise CommandError("--every goes with --heartbeat URL")
    every = parse_duration(args.every) if args.every is not None else None
    client = connect(args, args.host)
    if args.heartbeat:
        params = {"url": args.heartbeat}
        if every is not None:
            params["every"] = every
        added = client.call("notify.heartbeat", params)["heartbeat"]
        emit(args, added, lambda: "added %s" % heartbeat_line(added))
        return 0
    if args.add or args.command:
        if args.command and not args.argv:
            raise CommandError("--command needs the command after --, e.g. specdeck notify HOST --command -- mail -s specdeck me@example.org")
        params = {"on": args.on, "quiet": args.quiet}
        params.update({"url": args.add, "format": args.format} if args.add else {"argv": args.argv})
        channel = client.call("notify.add", {k: v for k, v in params.items() if v is not None})["channel"]
        emit(args, channel, lambda: "added %s" % channel_line(channel))
        return 0
    if args.change:
        if args.on is None and args.quiet is None:
            raise CommandError("--change needs --on or --quiet")
        quiet = "" if (args.quiet or "").lower() in ("off", "none") else args.quiet
        channel = client.call("notify.update", {k: v for k, v in {"id": args.change, "on": args.on, "quiet": quiet}.items() if v is not None})
        emit(args, channel["channel"], lambda: channel_line(channel["channel"]))
        return 0
    if args.remove:
        method = "notify.heartbeat_remove" if args.remove.startswith("h") else "notify.remove"
        reply = client.call(method, {"id": args.remove})
        emit(args, reply, "removed %s" % reply["removed"])
        return 0
    if args.test is not None:
        ids = [args.test] if args.test else [c["id"] for c in client.call("notify.list")["channels"]]
        if not ids:
            raise CommandError("no channels on %s yet: add one with --add URL or --command" % args.host, EXIT_FAILED, "NotFound")
        results = [client.call("notify.test", {"id": channel_id}, timeout=60) for channel_id in ids]
        emit(args, {"results": results}, lambda: "\n".join(
            "%s delivered" % r["id"] if r["delivered"] else "%s not delivered: %s" % (r["id"], r["error"]) for r in results))
        return 0 if all(r["delivered"] for r in results) else EXIT_FAILED
    if args.retry is not None:
        reply = client.call("notify.retry", {"id": args.retry} if args.retry else {})
        emit(args, reply, lambda: format_channels(reply["channels"]))
        return 0
    if args.send:
        reply = client.call("notify.send", {"message": args.send, "urgent": args.urgent})
        emit(args, reply, "queued %s" % reply["alert"]["id"] if reply["queued"] else "already sent: %s" % reply["alert"]["id"])
        return 0
    if args.digest:
        reply = client.call("notify.digest", {"at": args.digest})
        emit(args, reply, lambda: digest_line(reply["digest"]) if reply["digest"] else "no daily digest any more")
        return 0
    reply = client.call("notify.list")
    reply["digest"] = client.call("notify.digest_get")["digest"]
    emit(args, reply, lambda: _listing(args.host, reply))
    return 0


def _listing(host, reply):
    text = format_channels(reply["channels"]) if reply["channels"] else (
        "no channels on %s: alerts reach a console only (add one: specdeck notify %s --add URL)" % (host, host))
    heartbeats = reply.get("heartbeats") or []
    text += "\n" + format_heartbeats(heartbeats) if heartbeats else ""
    return text + ("\n" + digest_line(reply["digest"]) if reply.get("digest") else "")
