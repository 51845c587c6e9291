"""What every command shares: the one-line error, connecting, --json output, HOST:PATH."""

import json
import os
import re

EXIT_FAILED = 1
EXIT_USAGE = 2


class CommandError(Exception):
    """One line for the user, and the exit code."""

    def __init__(self, message, code=EXIT_USAGE):
        super().__init__(message)
        self.code = code


def connection_options(parser):
    parser.add_argument("--python", default="python3", metavar="PATH", help="interpreter that runs the agent on the host (default python3)")
    parser.add_argument("--accept-new", action="store_true", help="accept and remember an unknown host key (check its fingerprint first)")


def split_host_path(text):
    """`host:path` like scp; a bare path is on this machine."""
    match = re.match(r"^([^/:]+):(.*)$", text)
    if match and not os.path.exists(text):
        host, path = match.groups()
        return (None if host == "local" else host), path or "."
    return None, text


def accept_new_policy(args):
    return (lambda host_key: True) if args.accept_new else (lambda host_key: False)


def connect(args, host, reconnect=False):
    from ..connection import open_client

    return open_client(host, python=args.python, accept_new=accept_new_policy(args), reconnect=reconnect)


def emit(args, value, human):
    if args.json:
        print(json.dumps(value, indent=None if isinstance(value, dict) and len(value) < 3 else 2))
    else:
        print(human() if callable(human) else human)
