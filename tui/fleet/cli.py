"""`specdeck fleet [HOST ...] [--json]`: every host in one line (GPUs, jobs, servers, training
runs, alerts), each asked on a thread of its own, so the command takes about as long as the
slowest host, not the sum of them; a host that gives no answer within its connect timeout is a
row that says why, and the others are still shown."""

import threading
import time

from ..cli.common import EXIT_USAGE, CommandError, connect, emit
from . import model

DEFAULT_TIMEOUT_S = 10.0  # OpenSSH's ConnectTimeout is unset by default; ours is tui/transport/ssh_transport.py's


def add_commands(commands):
    p = commands.add_parser("fleet", help="every host in one line: GPUs, jobs, servers, training runs, alerts")
    p.set_defaults(func=cmd_fleet)
    p.add_argument("hosts", nargs="*", metavar="HOST", help="ssh destinations (default: the hosts `[fleet] hosts` of the config file lists)")
    p.add_argument("--timeout", type=positive_seconds, metavar="SECONDS",
                   help="give up on a host that has not answered after this long (default: its ssh ConnectTimeout, else 10)")


def positive_seconds(text):
    """A --timeout: seconds, more than 0 (argparse turns the ValueError into a usage line)."""
    value = float(text)
    if not value > 0:
        raise ValueError(text)
    return value


def host_timeout_s(host, given=None):
    """How long `host` gets to answer: --timeout, else the ConnectTimeout ~/.ssh/config gives it,
    else DEFAULT_TIMEOUT_S. A destination that cannot be read gets the default (connecting says why)."""
    if given:
        return given
    if host in (None, "", "local"):
        return DEFAULT_TIMEOUT_S
    from ..transport.client import ConnectError
    from ..transport.openssh import resolve

    try:
        return resolve(host).connect_timeout_s
    except ConnectError:
        return DEFAULT_TIMEOUT_S


class HostAsk:
    """One host's question on a thread of its own: connect, one ping for the round trip, one
    `fleet.summary`. `row` is None until it is done."""

    def __init__(self, args, host, timeout_s):
        self.args, self.host, self.timeout_s = args, host, timeout_s
        self.row = None
        self.began = time.monotonic()
        self.thread = threading.Thread(target=self._run, name="specdeck-fleet-%s" % host, daemon=True)

    def _run(self):
        client = None
        try:
            client = connect(self.args, self.host)
            began = time.monotonic()
            client.call("ping", timeout=self.timeout_s)
            rtt_s = time.monotonic() - began
            summary = client.call("fleet.summary", timeout=self.timeout_s)
            self.row = model.row(self.host, model.UP, None, rtt_s, summary)
        except Exception as exc:  # each host's failure is its row: a refusal, a host key, an older agent
            from remote.core.protocol import RemoteError

            if isinstance(exc, RemoteError) and exc.type == "UnknownMethod":
                state, reason = "old agent", "its agent has no fleet.summary (an older specdeck): %s" % exc.message
            else:
                state, reason = model.failure_state(exc)
            self.row = model.row(self.host, state, reason)
        finally:
            if client is not None:
                client.close()

    def result(self):
        """The host's row once its thread is done or its time is up (then a `timed out` row)."""
        self.thread.join(max(0.0, self.began + self.timeout_s - time.monotonic()))
        return self.row or model.row(self.host, *model.timed_out(self.timeout_s))


def ask_hosts(args, hosts, timeout_s=None):
    """The rows of `hosts`, in their order, all asked at once: as long as the slowest, at most
    the longest timeout."""
    asks = [HostAsk(args, host, host_timeout_s(host, timeout_s)) for host in hosts]
    for ask in asks:
        ask.thread.start()
    return [ask.result() for ask in asks]


def cmd_fleet(args):
    from .. import config

    hosts = list(dict.fromkeys(args.hosts)) or config.fleet_hosts()
    if not hosts:
        raise CommandError("no hosts: name them (specdeck fleet HOST ...) or list them in %s as [fleet] hosts = [\"gpu01\", ...]"
                           % config.config_path(), EXIT_USAGE)
    rows = ask_hosts(args, hosts, args.timeout)
    emit(args, {"hosts": rows}, lambda: "\n".join(model.table(rows)))
    return 0 if all(r["state"] == model.UP for r in rows) else EXIT_USAGE
