"""Acceptance baselines and pre-serve checks from the command line:

  specdeck baseline HOST                          the baselines kept on the host
  specdeck baseline HOST SERVER --save [--margin 10%] [--for 10m] [--window 5m]
  specdeck baseline HOST SERVER                   the server's accept length against its baseline
  specdeck baseline HOST SERVER --remove          (or --target T --drafter D, or --url URL)
  specdeck doctor HOST TARGET --drafter D [--max-model-len N] [--method M] [--temperature T] [-- ENGINE_ARGS]
"""

import sys

from remote.core.protocol import RemoteError

from ..cli.common import EXIT_FAILED, CommandError, connect, emit
from ..display import safe_text
from .baseline_text import against_text, rule_text

SEVERITY_WORDS = {"error": "ERROR", "warning": "warning", "ok": "ok"}


def parse_margin(text):
    """`10%` or `0.1` -> 0.1."""
    try:
        value = float(text[:-1]) / 100.0 if text.endswith("%") else float(text)
    except ValueError:
        raise CommandError("--margin takes a share: 10%% or 0.1, not %r" % text)
    if not 0 <= value < 1:
        raise CommandError("--margin is from 0%% to under 100%%, not %r" % text)
    return value


def add_commands(commands):
    p = commands.add_parser("baseline", help="keep a server's accept length as its (target, drafter)'s baseline; alert on a regression",
                            usage="specdeck baseline HOST [SERVER] [--save [--margin 10%%] [--for 10m] | --remove]")
    p.set_defaults(func=cmd_baseline)
    p.add_argument("host")
    p.add_argument("server", nargs="?", help="a server job (or an attached server uN)")
    p.add_argument("--save", action="store_true", help="keep the server's figures (over --window) as its pair's baseline")
    p.add_argument("--margin", default="10%", metavar="SHARE", help="how far under the baseline counts (default 10%%)")
    p.add_argument("--for", dest="for_", default="10m", metavar="DURATION", help="how long it must stay under before the alert (default 10m)")
    p.add_argument("--window", metavar="DURATION", help="with --save: the figures of the last 30s, 5m, ... (default: the server's whole life)")
    p.add_argument("--remove", action="store_true", help="remove the server's pair's baseline (or --target/--drafter's, or --url's)")
    p.add_argument("--target", help="with --remove and no SERVER: the pair's target")
    p.add_argument("--drafter", help="with --remove and no SERVER: the pair's drafter")
    p.add_argument("--url", help="with --remove and no SERVER: an attached server's URL")

    p = commands.add_parser("doctor", help="check how a drafter would be served: method, context, sampling, loading",
                            usage="specdeck doctor HOST TARGET --drafter PATH [--max-model-len N] [options] [-- ENGINE_ARGS...]")
    p.set_defaults(func=cmd_doctor)
    p.add_argument("host")
    p.add_argument("target", help="the target model (a directory on the host, or a hub id)")
    p.add_argument("--drafter", required=True, metavar="PATH")
    p.add_argument("--engine", choices=("vllm", "sglang"), default="vllm")
    p.add_argument("--k", type=int, default=3, metavar="N", help="tokens drafted per cycle (default 3)")
    p.add_argument("--max-model-len", type=int, metavar="N", help="the context the server will serve")
    p.add_argument("--method", metavar="M", help="the speculative method the engine will be told (default: eagle3, as serve tells it)")
    p.add_argument("--temperature", type=float, metavar="T", help="the temperature the requests will send")


def _duration(text):
    from ..cli.common import parse_duration

    return parse_duration(text)


def cmd_baseline(args):
    if args.save and args.remove:
        raise CommandError("--save or --remove, not both")
    if args.save and not args.server:
        raise CommandError("--save needs the server: specdeck baseline %s SERVER --save" % args.host)
    if (args.target or args.drafter or args.url) and (args.server or not args.remove):
        raise CommandError("--target, --drafter and --url name a baseline to --remove without SERVER")
    params = {}
    if args.save:
        params = {"id": args.server, "margin": parse_margin(args.margin), "for_s": _duration(args.for_)}
        if args.window:
            params["window_s"] = _duration(args.window)
    client = connect(args, args.host)
    try:
        if args.save:
            reply = client.call("serving.save_baseline", params, timeout=30)
            baseline = reply["baseline"]
            emit(args, _masked(reply), lambda: "baseline of %s: accept length %.2f%s\n%s\nkept on the host for %s" % (
                args.server, baseline["accept_length"], _positions(baseline), rule_text(baseline), _pair(reply)))
        elif args.remove:
            if not args.server and not args.url and not (args.target and args.drafter):
                raise CommandError("--remove needs SERVER, --target and --drafter, or --url")
            reply = client.call("serving.remove_baseline", {"id": args.server, "target": args.target, "drafter": args.drafter,
                                                             "url": args.url}, timeout=30)
            emit(args, reply, "baseline removed")
        elif args.server:
            figures = client.call("serving.stats", {"id": args.server}, timeout=30)
            reply = {"id": args.server, "accept_length": figures.get("accept_length"), "baseline": figures.get("baseline")}
            emit(args, reply, lambda: "%s: %s" % (args.server, against_text(reply["accept_length"], reply["baseline"]) + "\n" + rule_text(reply["baseline"])
                                                  if reply["baseline"] else "no baseline kept for its pair (save one: --save)"))
        else:
            reply = client.call("serving.baselines", {}, timeout=30)
            emit(args, _masked(reply), lambda: _list_text(reply["baselines"]))
    except RemoteError as exc:
        raise CommandError(exc.message, EXIT_FAILED)
    return 0


def pair_baseline(client, target, drafter):
    """The baseline kept for (target, drafter) as `--json` gives it, or None (an older agent too)."""
    try:
        entries = client.call("serving.baselines", {}, timeout=30)["baselines"]
    except RemoteError:
        return None
    pair = (target.rstrip("/"), drafter.rstrip("/"))
    entry = next((e for e in entries if (e.get("target"), e.get("drafter")) == pair), None)
    return dict((key, entry[key]) for key in ("accept_length", "per_position", "saved_at", "margin", "for_s")) if entry else None


def _positions(baseline):
    rates = baseline.get("per_position") or []
    return "   per position %s" % " ".join("%.2f" % rate for rate in rates) if rates else ""


def _pair(entry):
    return safe_text(shown_url(entry["url"]) if entry.get("url") else "%s + %s" % (entry.get("target"), entry.get("drafter")))


def shown_url(url):
    """An attached server's URL as printed: any `user:password@` in it as `…@` (a secret)."""
    from urllib.parse import urlsplit, urlunsplit

    try:
        parts = urlsplit(url)
    except ValueError:
        return "…"
    if "@" not in parts.netloc:
        return url
    return urlunsplit((parts.scheme, "…@" + parts.netloc.rpartition("@")[2], parts.path, parts.query, parts.fragment))


def _masked(reply):
    """A reply (or its `baselines`) with each attached server's URL masked, for --json."""
    if isinstance(reply.get("baselines"), list):
        return dict(reply, baselines=[_masked(entry) for entry in reply["baselines"]])
    return dict(reply, url=shown_url(reply["url"])) if reply.get("url") else reply


def _list_text(entries):
    if not entries:
        return "no baselines kept on the host (save one: specdeck baseline HOST SERVER --save)"
    lines = []
    for entry in entries:
        lines.append("%s\n  accept length %.2f%s   from %s\n  %s" % (_pair(entry), entry["accept_length"], _positions(entry),
                                                                  safe_text(entry.get("from") or "?"), rule_text(entry)))
    return "\n".join(lines)


def findings_lines(findings, shown=("error", "warning", "ok")):
    return ["%-7s %-24s %s" % (SEVERITY_WORDS.get(f["severity"], f["severity"]), safe_text(f["check"]), safe_text(f["message"]))
            for f in findings if f["severity"] in shown]


def cmd_doctor(args):
    params = {"target": args.target, "drafter": args.drafter, "engine": args.engine, "k": args.k, "max_model_len": args.max_model_len,
              "method": args.method, "temperature": args.temperature, "engine_args": getattr(args, "after_dashes", [])}
    try:
        result = connect(args, args.host).call("serving.doctor", params, timeout=120)
    except RemoteError as exc:
        raise CommandError(exc.message, EXIT_FAILED)
    emit(args, result, lambda: "\n".join(["doctor: %s" % result["status"]] + findings_lines(result["findings"])))
    return EXIT_FAILED if result["status"] == "error" else 0


def print_warnings(job):
    """`serve`'s word on what the doctor found and let pass: its warnings, on stderr."""
    for line in findings_lines(((job or {}).get("doctor") or {}).get("findings") or [], ("error", "warning")):
        sys.stderr.write("specdeck: %s\n" % line)
    sys.stderr.flush()

