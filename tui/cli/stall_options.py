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


def given_or_remembered(args, name, parse):
    """`parse` of the option `name` as given, else as `config HOST --NAME` remembers it, else None
    (the host's default); a bad value is one line naming where it came from."""
    flag = "--" + name.replace("_", "-")
    text, where = getattr(args, name), flag
    if text is None:
        text, where = config.remembered(args.host, name), "config %s %s" % (config.host_key(args.host), flag)
    if text is None:
        return None
    try:
        return parse(text)
    except ValueError as exc:
        raise CommandError("%s: %s" % (where, exc))


def stall_params(args):
    """{} for the host's default; else `{stall_after_s}` (0: never)."""
    value = given_or_remembered(args, "stall_after", config.stall_after_s)
    return {} if value is None else {"stall_after_s": value}
