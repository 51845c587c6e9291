"""`specdeck disconnect [HOST]`: end the SSH link the link keeper (tui/transport/keeper.py) holds warm to
HOST now, rather than when `[links] keep` runs out; with no HOST, end the keeper and every link
it holds. Nothing open is not an error: it says so and exits 0. A command running over the
link at that moment sees it drop, as if the network had.
"""

from .common import emit


def add_commands(commands):
    p = commands.add_parser("disconnect", help="end the SSH link kept warm to HOST (no HOST: every link, and the keeper)")
    p.set_defaults(func=cmd_disconnect, host_options=False)  # talks to the keeper on this machine only
    p.add_argument("host", nargs="?", help="an ssh destination as commands name it (user@host, an alias)")


def cmd_disconnect(args):
    from ..transport import links

    host = args.host if args.host not in (None, "", "local") else None
    if args.host == "local":
        emit(args, {"host": "local", "closed": [], "keeper_running": None}, "local needs no SSH link: nothing to close")
        return 0
    reply = links.request({"op": "disconnect", "host": host})
    if reply is None:
        emit(args, {"host": host, "closed": [], "keeper_running": False}, "no link is kept warm%s: nothing to close" % (
            " to %s" % host if host else ""))
        return 0
    if not reply.get("ok"):
        raise links.error_from(reply.get("error") or {})
    closed = reply.get("closed") or []
    names = ", ".join(c["dest"] if c["host"] == c["dest"] else "%s (%s)" % (c["host"], c["dest"]) for c in closed)
    if host:
        human = "closed the link to %s" % names if closed else "no link to %s was kept warm: nothing to close" % host
    else:
        human = "ended the link keeper (pid %s)%s" % (reply.get("pid"), ", closing the links to %s" % names if closed else "; it held no link")
    emit(args, {"host": host, "closed": closed, "keeper_running": not reply.get("keeper_ended"), "keeper_pid": reply.get("pid")}, human)
    return 0
