"""`train --slowdown`: when a run's pace is told as slowed down (the host's `slowdown` alert,
remote/notify/pace.py), else what `specdeck config HOST --slowdown` remembers for the host,
else the host's default (under 0.5 of its hour's median for 10 min)."""

from .. import config
from .stall_options import given_or_remembered

HELP = ("alert (category slowdown) when its steps/s stay under FRACTION of its median over SPAN for DURATION: "
        "FRACTION/DURATION/SPAN, e.g. 0.5/10m/1h (the default; a part may be left out: 0.3, 0.5/20m), or off; "
        "default: config HOST --slowdown")


def add_slowdown_option(parser):
    parser.add_argument("--slowdown", metavar="FRACTION/DURATION/SPAN", help=HELP)


def slowdown_params(args):
    """{} for the host's default; else `{slowdown: {fraction, for_s?, median_s?}}` (fraction 0: never)."""
    value = given_or_remembered(args, "slowdown", config.slowdown_limits)
    return {} if value is None else {"slowdown": value}
