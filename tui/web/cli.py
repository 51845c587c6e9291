"""`specdeck web [HOST ...] [--bind 127.0.0.1] [--port 8080] [--token-file F]`: the console
served to a browser, each tab a console of its own (the state is the hosts': a new tab or a
reload shows the same jobs, figures and alerts), behind a key printed in the URL once the port
is bound.

Reaching it from elsewhere: `ssh -L 8080:127.0.0.1:8080 MACHINE` and open the URL on this side,
or a reverse proxy with TLS in front of the loopback port (README).
"""

import ipaddress
import os
import sys

from ..cli.common import CommandError, EXIT_FAILED, EXIT_USAGE, emit

LOOPBACK_NAMES = ("localhost", "ip6-localhost")


def add_commands(commands):
    p = commands.add_parser("web", help="the console in a browser, behind a secret (default: 127.0.0.1:8080)")
    p.set_defaults(func=cmd_web)
    p.add_argument("hosts", nargs="*", metavar="HOST",
                   help="as for the console: several open the Fleet pane (default: the config's [fleet] hosts, else local)")
    p.add_argument("--bind", default="127.0.0.1", metavar="ADDRESS",
                   help="the address to listen on (default: 127.0.0.1, this machine only)")
    p.add_argument("--port", type=port_number, default=8080, help="the port to listen on (default: 8080)")
    p.add_argument("--token-file", metavar="FILE",
                   help="the secret, from this file's first line (mode 600; default: a new one at each start)")


def port_number(text):
    value = int(text)
    if not 0 < value < 65536:
        raise ValueError(text)
    return value


def is_loopback(address):
    if address.lower() in LOOPBACK_NAMES:
        return True
    try:
        return ipaddress.ip_address(address.strip("[]")).is_loopback
    except ValueError:
        return False


def console_argv(args):
    """The console each tab runs: this interpreter, the same hosts and connection options."""
    argv = [sys.executable, "-m", "tui.cli", *args.hosts]
    if args.python:
        argv += ["--python", args.python]
    if args.accept_new:
        argv.append("--accept-new")
    return argv


def cmd_web(args):
    try:
        from .server import TokenFileError, WebConsole, new_token, read_token_file
    except ImportError as exc:  # textual-serve is a dependency; a trimmed install may lack it
        raise CommandError("specdeck web needs textual-serve (pip install textual-serve): %s" % exc, EXIT_USAGE)
    try:
        token = read_token_file(args.token_file) if args.token_file else new_token()
    except TokenFileError as exc:
        raise CommandError(str(exc), EXIT_USAGE)
    if any(h.startswith("-") for h in args.hosts):
        raise CommandError("a host cannot begin with '-': %s" % next(h for h in args.hosts if h.startswith("-")), EXIT_USAGE)
    server = WebConsole(console_argv(args), token, host=args.bind, port=args.port)
    if not is_loopback(args.bind):
        print("specdeck web: listening on %s exposes the console (which starts and stops jobs) to everyone who reaches "
              "port %d of this machine, guarded by the key alone and over plain HTTP; the default 127.0.0.1 with "
              "`ssh -L %d:127.0.0.1:%d` or a TLS proxy keeps it private" % (args.bind, args.port, args.port, args.port),
              file=sys.stderr)
    def listening():
        # Only now: a URL printed before the bind would hand the key (a lasting one with
        # --token-file) to whoever holds the port.
        emit(args, {"url": server.url(), "bind": args.bind, "port": args.port},
             "the console is at %s (Ctrl+C ends it; the jobs run on)" % server.url())
        sys.stdout.flush()

    try:
        server.serve(listening)
    except OSError as exc:
        reason = os.strerror(exc.errno).lower() if exc.errno else str(exc)
        raise CommandError("cannot listen on %s port %d: %s" % (args.bind, args.port, reason), EXIT_FAILED)
    return 0
