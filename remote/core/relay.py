"""What SSH runs on the host: a thin pipe between the session's stdin/stdout and the daemon.

It starts the daemon when none listens, and replaces a daemon of another build (an older
agent) so that a console always talks to the code it shipped. Jobs survive the swap: they
are not the daemon's children.

It holds at most one chunk in each direction: a console that reads slowly blocks the relay's
write, so the relay stops reading the daemon, whose writes then wait (and give up on a client
that reads nothing for a long time). When the console closes its input, the relay passes the
half-close on and keeps copying until the daemon has answered everything and closed.

`relay --if-running` neither starts nor replaces a daemon: it is the spare a laptop's link
keeper (tui/transport/keeper.py) holds open for the next command, and a spare must not bring back a
daemon that `specdeck daemon stop` just stopped. With no daemon of its build listening it
exits at once (status 1); the keeper then opens a plain relay when a command asks.
"""

import os
import socket
import subprocess
import sys
import threading
import time

from . import buildinfo, paths, peer
from .protocol import decode, encode

CONNECT_TRIES_S = 15.0


def _connect():
    """A socket to the daemon's path, its peer checked to be this user; None when none listens.
    A socket held by anyone else is an error: nothing is sent to it, and no daemon is started
    in its place."""
    try:
        return peer.connect_own(paths.socket_path())
    except peer.NotOurs as exc:
        raise ConnectionError(str(exc))
    except OSError:
        return None


def _read_line(sock, deadline):
    """The first line from the socket and whatever came after it, by `deadline` (socket.timeout
    after it; a daemon that accepts and says nothing must not hold the relay)."""
    buffer = b""
    while b"\n" not in buffer:
        sock.settimeout(max(0.01, deadline - time.monotonic()))
        chunk = sock.recv(65536)
        if not chunk:
            raise ConnectionError("daemon closed the connection before its hello")
        buffer += chunk
    sock.settimeout(None)
    line, _, rest = buffer.partition(b"\n")
    return line, rest


def _start_daemon():
    subprocess.run(
        paths.agent_argv() + ["daemon"], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, env=paths.agent_env(), timeout=30
    )


def connect_daemon(start=True):
    """A socket to a daemon of our own build, its hello line and any bytes read past it.

    `start=False`: only a daemon already running, of this build (ConnectionError otherwise)."""
    own_build = buildinfo.build_id()
    deadline = time.monotonic() + CONNECT_TRIES_S
    asked_to_stop = False
    while True:
        sock = _connect()
        if sock is None and not start:
            raise ConnectionError("no specdeck daemon is running")
        if sock is None:
            _start_daemon()
            sock = _connect()
        if sock is not None:
            try:
                line, rest = _read_line(sock, deadline)
                hello = decode(line)
                build = hello.get("build") if isinstance(hello, dict) else None
                if build == own_build:
                    return sock, line, rest
                if start and not asked_to_stop:
                    sock.sendall(encode({"id": 0, "method": "daemon.shutdown", "params": {"reason": "replaced by build " + own_build}}))
                    asked_to_stop = True
            except (OSError, ValueError) as exc:
                # Closed or reset before its hello: a daemon ending (replaced, or stopped) as we
                # connected, or the loser of two started at once. The one that stays answers the
                # next try.
                sock.close()
                if not start:
                    raise ConnectionError("the daemon closed the connection before its hello (%s)" % exc)
            sock.close()
            if not start:
                raise ConnectionError("the daemon running is of another build")
        if time.monotonic() > deadline:
            raise ConnectionError("could not reach a specdeck daemon of build %s at %s" % (own_build, paths.socket_path()))
        time.sleep(0.1)


def pump(read, write, chunk_bytes=262144):
    """Copy until end of stream or an error on either side."""
    try:
        while True:
            chunk = read(chunk_bytes)
            if not chunk:
                return
            write(chunk)
    except OSError:
        return


def write_all(raw_file):
    """A write function that writes all of a chunk: an unbuffered file's write may take only part."""

    def write(data):
        view = memoryview(data)
        while view:
            written = raw_file.write(view)
            view = view[written or 0 :]

    return write


def run_relay(start_daemon=True):
    protocol_out = os.fdopen(os.dup(1), "wb", buffering=0)
    # Anything else written to stdout would corrupt the protocol: send it to a log instead.
    try:
        log_fd = os.open(os.path.join(paths.state_dir(), "relay.log"), os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    except OSError as exc:  # an unusable state directory (UnsafeDirectory says which and why)
        sys.stderr.write("specdeck relay: %s\n" % exc)
        return 1
    os.dup2(log_fd, 1)
    try:
        sock, hello_line, rest = connect_daemon(start=start_daemon)
    except (ConnectionError, OSError, ValueError) as exc:
        sys.stderr.write("specdeck relay: %s\n" % exc)
        return 1
    write_out = write_all(protocol_out)
    try:
        write_out(hello_line + b"\n" + rest)
    except OSError:
        return 1

    def daemon_to_stdout():
        pump(sock.recv, write_out)
        os._exit(0)  # the daemon went away (or answered everything after our input ended): so do we

    threading.Thread(target=daemon_to_stdout, daemon=True).start()
    stdin = sys.stdin.buffer.raw if hasattr(sys.stdin.buffer, "raw") else sys.stdin.buffer
    pump(stdin.read, sock.sendall)  # until SSH closes our stdin
    try:
        # Done sending, not done reading: the daemon answers what it has, ends the streams, closes.
        sock.shutdown(socket.SHUT_WR)
    except OSError:
        os._exit(0)
    threading.Event().wait()  # daemon_to_stdout ends the process
