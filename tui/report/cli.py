"""`specdeck report HOST [--since 12h] [--json]`: the night on a host in one screen (jobs
started and ended, training runs, servers' accept length against break-even, downloads, alerts
and where they were delivered, disks' lowest free space, the daemon's restarts), read from the
host's own records (report.get)."""

from remote.report.text import render

from ..cli.common import connect, emit
from ..telemetry.cli import parse_duration

DEFAULT_SINCE = "12h"


def add_commands(commands):
    p = commands.add_parser("report", help="the night on a host in one screen: jobs, training, servers, downloads, alerts, disks")
    p.set_defaults(func=cmd_report)
    p.add_argument("host")
    p.add_argument("--since", metavar="DURATION", default=DEFAULT_SINCE,
                   help="the window: the last DURATION (30m, 12h, 2d, 1w; default %s)" % DEFAULT_SINCE)


def fetch(client, since_s):
    return client.call("report.get", {"since_s": since_s}, timeout=60)


def cmd_report(args):
    since_s = parse_duration(args.since)
    report = fetch(connect(args, args.host), since_s)
    emit(args, report, lambda: render(report))
    return 0
