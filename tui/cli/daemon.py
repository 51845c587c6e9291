"""`specdeck daemon stop HOST`: stop the host's daemon (its jobs keep running), saying whether
one of this version was running.

Connecting starts a daemon when none listens (the relay does), so "was one running" is read from
the daemon's age on the host's clock against how long this connection took on ours: a daemon
younger than the connection was started by it. Both spans are measured on one clock each, so
the laptop's and the host's clocks need not agree.
"""

import time

from .. import display
from .common import connect, emit

STOP_WAIT_S = 10.0


def add_commands(commands):
    p = commands.add_parser("daemon", help="the host's daemon: stop it (jobs keep running)")
    p.set_defaults(func=cmd_daemon)
    p.add_argument("action", choices=("stop",), help="stop: ask the daemon to exit (a later command starts a new one)")
    p.add_argument("host")


def cmd_daemon(args):
    began = time.monotonic()
    client = connect(args, args.host)
    try:
        connect_s = time.monotonic() - began
        hello = client.hello or {}
        host_now = client.call("ping", timeout=30)["time"]
        started_at = hello.get("daemon_started_at")
        age_s = host_now - started_at if started_at else None
        was_running = age_s is None or age_s > connect_s
        client.call("daemon.shutdown", {"reason": "specdeck daemon stop"}, timeout=30)
        _wait_until_gone(client)
    finally:
        client.close()
    host = args.host
    result = {"host": host, "was_running": was_running, "daemon_pid": hello.get("daemon_pid"), "uptime_s": age_s}
    if was_running:
        human = "stopped the daemon on %s (pid %s, up %s); its jobs keep running" % (
            host, hello.get("daemon_pid"), display.format_duration(age_s))
    else:
        # The relay also replaces a daemon of another build (an older specdeck) by a new one: that
        # reads the same from here, hence "of this version".
        human = "no daemon of this version was running on %s (connecting started one; it is stopped again)" % host
    emit(args, result, human)
    return 0


def _wait_until_gone(client):
    """Until the daemon closed the link (it answers, then ends its connections), at most STOP_WAIT_S."""
    deadline = time.monotonic() + STOP_WAIT_S
    while client.state == "connected" and time.monotonic() < deadline:
        time.sleep(0.05)
