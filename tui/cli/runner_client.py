"""A headless command's side of the warm runner (tui/cli/runner.py): the command line, the
environment, the working directory and this process's stdin, stdout and stderr handed to the
runner, which runs the command in a child of its own, already imported; this process then only
waits for the child's exit code and passes signals on to it.

This module is what a warm command imports, and nothing heavy: _socket and _signal (socket.py's
and signal.py's imports make enums of the platform's constants, ~5 ms together) and marshal (a
builtin; both ends are the same interpreter, which the runner checks) rather than socket, signal
and json. Anything unusual (no runner,
one that does not answer at once, another interpreter or locale, a closed stdin) answers None:
the command then runs in this process, as it always could.

The conversation, on the runner's socket: the request (marshal, one message, the three
descriptors beside it); the runner answers `pid` or `no WHY`; this side says `go`, and the child
runs the command and sends `exit CODE`. A command cut off before `go` never runs.
"""

import marshal
import os
import sys

import _signal
import _socket

ANSWER_TIMEOUT_S = 1.0  # a runner that listens answers within milliseconds: one that does not is stopped or busy
MAX_ANSWER_BYTES = 4096
# What decides how this interpreter reads and writes text: a child of a runner started under other
# values would not behave as this process would, so it says no.
LOCALE_VARIABLES = ("LANG", "LC_ALL", "LC_CTYPE", "PYTHONIOENCODING", "PYTHONUTF8", "TZ")
FORWARDED_SIGNALS = ("SIGINT", "SIGTERM", "SIGHUP", "SIGQUIT")


def runner_path():
    """The runner's socket beside this user's link keeper's (tui/transport/keeper_socket.py), or None."""
    from ..transport.keeper_socket import socket_path

    path = socket_path()
    return path + ".run" if path else None


def request(argv):
    """What the runner is told: everything of this process that the command's outcome depends on."""
    streams = [(stream.encoding, stream.errors, stream.line_buffering) if stream is not None else None
               for stream in (sys.stdin, sys.stdout, sys.stderr)]
    return {"argv": list(argv), "env": dict(os.environ), "cwd": os.getcwd(), "executable": sys.executable, "prefix": sys.prefix,
            "streams": streams, "locale": {name: os.environ.get(name) for name in LOCALE_VARIABLES}}


def run(argv):
    """The exit code of `specdeck ARGV` run by the warm runner, or None where it does not run it."""
    if os.environ.get("SPECDECK_WARM_RUNNER") == "0":
        return None
    path = runner_path()
    if path is None or not os.path.exists(path):
        return None
    sock = _socket.socket(_socket.AF_UNIX, _socket.SOCK_STREAM)
    try:
        sock.settimeout(ANSWER_TIMEOUT_S)
        sock.connect(path)
        message = marshal.dumps(request(argv))
        sock.sendmsg([len(message).to_bytes(4, "big") + message],
                       [(_socket.SOL_SOCKET, _socket.SCM_RIGHTS, b"".join(fd.to_bytes(4, sys.byteorder, signed=True) for fd in (0, 1, 2)))])
        answer = _line(sock)
    except (OSError, ValueError):  # none listens, a stale socket, a closed stdin, no answer in time
        sock.close()
        return None
    if not answer.startswith(b"pid "):
        sock.close()
        return None  # `no WHY`: another interpreter or locale, or it is ending
    return _wait(sock, int(answer[4:]))


def _wait(sock, child):
    """The child's exit code, signals sent on to it meanwhile."""
    def forward(number, _frame):
        try:
            os.kill(child, number)
        except OSError:
            pass

    for name in FORWARDED_SIGNALS:
        _signal.signal(getattr(_signal, name), forward)
    sock.settimeout(None)
    try:
        sock.sendall(b"go\n")
        answer = _line(sock)
    except OSError:
        answer = b""
    finally:
        sock.close()
    if not answer.startswith(b"exit "):
        sys.stderr.write("specdeck: the command ended without saying how (its process was killed?)\n")
        return 1
    return int(answer[5:])


def _line(sock):
    """One line from the runner (without its newline); ValueError when it is not one."""
    data = b""
    while not data.endswith(b"\n"):
        chunk = sock.recv(MAX_ANSWER_BYTES)
        if not chunk:
            break
        data += chunk
        if len(data) > MAX_ANSWER_BYTES:
            raise ValueError("the runner's answer is too long")
    return data[:-1] if data.endswith(b"\n") else data
