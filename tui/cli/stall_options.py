"""`--stall-after`, the same on every command that starts a job that can stall (run, train,
serve): how long its progress may stand still before the host's `stalled` alert, else what
`specdeck config HOST --stall-after` remembers for the host, else the host's default for the
job's kind (remote/notify/stalls.py)."""

from .. import config
from .common import CommandError

HELP = ("alert (category stalled) when its progress stands still this long: 30s, 10m, 2h (as gpus --since), "
        "or off; default: config HOST --stall-after, else ten times its median step interval (at least 2 min) "
        "for a run, 2 min for a server with requests waiting, none for a plain command")


def add_stall_option(parser):
    parser.add_argument("--stall-after", metavar="DURATION", help=HELP)


def stall_params(args):
    """{} for the host's default; else `{stall_after_s}` (0: never)."""
    text, where = args.stall_after, "--stall-after"
    if text is None:
        text, where = config.remembered(args.host, "stall_after"), "config %s --stall-after" % config.host_key(args.host)
    if text is None:
        return {}
    try:
        return {"stall_after_s": config.stall_after_s(text)}
    except ValueError as exc:
        raise CommandError("%s: %s" % (where, exc))
