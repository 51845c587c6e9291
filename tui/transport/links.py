"""A command's side of the link keeper (tui/transport/keeper.py): how a command takes a link
from it, starts it when none answers, and asks it to end links.

Nothing here imports paramiko or cryptography: a warm command costs a Unix socket, one JSON
line each way, and then its own requests. Where the keeper listens is
tui/transport/keeper_socket.py.

The keeper greets each connection with one line, `{"keeper": "hello", "pid"}`, before it reads
the request (which a command sends at once, without waiting for the greeting): a keeper that does not greet within GREETING_TIMEOUT_S (stopped with SIGSTOP,
hung) is left alone and the command connects itself; only a keeper that greeted is waited for
through a cold connection (REPLY_TIMEOUT_S). No second keeper is started beside a hung one: its
lock and socket are still held, and two keepers for one socket would take it from each other.

What a command says to the keeper, one JSON line: `{"op": "link", "host", "python",
"accept_new", "accept_fingerprint", "agent_socket", "warm_only", "environment"}`; it answers one JSON line,
`{"ok": true}` followed by the agent's own bytes (its hello first), or `{"ok": false, "error":
{"type", "message", "permanent", ...}}` (the ConnectError the command would have raised itself),
or `{"ok": false, "cold": true}` when `warm_only` found no live link. `{"op": "disconnect",
"host"}` and `{"op": "status"}` answer one line.
"""

import json
import os
import socket
import sys
import time

from .. import logs
from .client import ConnectError
from .keeper_socket import socket_path

log = logs.get("tui.links")

KEEPER_START_S = 10.0  # a keeper just started has this long to listen, and then to greet
# A keeper that runs greets at once (a thread's start and one line): one that does not within
# this is stopped or hung, and the command connects itself.
GREETING_TIMEOUT_S = 2.0
# The keeper answers a link request once it has connected (cold: SSH's own timeouts apply,
# twice over with a jump host) and started the agent (the client's hello timeout).
REPLY_TIMEOUT_S = 90.0
MAX_LINE_BYTES = 1 << 16


class KeeperGone(Exception):
    """The keeper went away before it answered (killed, or ending just then)."""


class KeeperStuck(Exception):
    """A keeper listens but does not greet in time (stopped, hung): the command connects itself."""


def _connect(path, timeout_s=GREETING_TIMEOUT_S):
    """A socket connected to the keeper at `path`, its peer this user, or None when none listens
    there; KeeperStuck when its socket takes no connection in time (a stopped keeper's backlog
    is full) or is held by someone else (nothing sent)."""
    from remote.core.peer import NotOurs, connect_own

    try:
        return connect_own(path, timeout_s)
    except NotOurs as exc:  # nothing was sent to it; the command connects itself
        raise KeeperStuck(str(exc))
    except (BlockingIOError, socket.timeout):
        raise KeeperStuck("the link keeper at %s takes no connection" % path)
    except OSError:  # no socket, a stale one (a killed keeper), a keeper ending
        return None


def start_keeper(path):
    """Start a keeper for `path` and return a socket connected to it, or None if none listens in time.

    The keeper is a fresh interpreter (`python -I`, this package first on sys.path, never the
    current directory) that forks once more and leaves the session, with stdin, stdout and
    stderr on /dev/null: `$(specdeck jobs HOST)` never waits on it. A fresh interpreter rather
    than a fork of this command: nothing of the command (threads, open files, the terminal)
    leaks into a process that lives on. From spawn to listening took 45 ms on a 2-core test
    machine, against ~250 ms for what any cold command pays anyway (paramiko's import and the
    SSH handshake): a fork would save at most those 45 ms.
    """
    import subprocess

    parent = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    code = "import sys; sys.path[:0] = [%r]; from tui.transport.keeper import main; sys.exit(main(sys.argv[1:]))" % parent
    try:
        starter = subprocess.Popen(
            [sys.executable, "-I", "-c", code, path],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            start_new_session=True, close_fds=True,
        )
    except OSError as exc:
        log.warning("could not start the link keeper: %s", exc)
        return None
    deadline = time.monotonic() + KEEPER_START_S
    while time.monotonic() < deadline:
        try:
            sock = _connect(path)
        except KeeperStuck:
            sock = None
        if sock is not None:
            starter.wait()  # it forked and left at once: reaped here, not a zombie
            return sock
        if starter.poll() not in (None, 0):
            break
        time.sleep(0.005)
    log.warning("the link keeper did not start listening at %s (see this log for its own lines)", path)
    if starter.poll() is None:
        starter.kill()
        starter.wait()
    return None


def _read_line(sock, timeout_s, buffer=b""):
    """The keeper's next line, as JSON; (reply, bytes that came after it). `buffer`: bytes
    already read past the line before. KeeperStuck when none comes within `timeout_s`."""
    sock.settimeout(timeout_s)
    try:
        while b"\n" not in buffer:
            chunk = sock.recv(65536)
            if not chunk:
                raise KeeperGone("the link keeper closed the connection before answering")
            buffer += chunk
            if len(buffer) > MAX_LINE_BYTES:
                raise KeeperGone("the link keeper's answer is not a line")
    except socket.timeout:
        raise KeeperStuck("the link keeper did not answer within %.0f s" % timeout_s)
    except OSError as exc:
        raise KeeperGone("the link keeper went away: %s" % (exc.strerror or exc))
    line, _, rest = buffer.partition(b"\n")
    try:
        reply = json.loads(line)
    except ValueError:
        raise KeeperGone("the link keeper's answer is not JSON")
    if not isinstance(reply, dict):
        raise KeeperGone("the link keeper's answer is not an object")
    return reply, rest


def _greeted(sock, timeout_s=GREETING_TIMEOUT_S):
    """Wait (briefly) for the keeper's greeting; a keeper that refuses us says so instead.
    Returns what came after the greeting (the answer to a request sent before it came).

    A keeper that has not greeted in `timeout_s` is left alone when it is stopped (SIGSTOP, a
    debugger) or this system cannot tell; one that is running, only slow (a laptop whose cores
    are busy), is given KEEPER_START_S more: else the command would link by itself, and the
    keeper, holding nothing, would end."""
    try:
        greeting, rest = _read_line(sock, timeout_s)
    except KeeperStuck:
        if _peer_stopped(sock) is not False:
            raise
        greeting, rest = _read_line(sock, KEEPER_START_S)
    if greeting.get("keeper") == "hello":
        return rest
    if greeting.get("ok") is False:
        raise error_from(greeting.get("error") or {})
    raise KeeperGone("the link keeper did not greet")


def _peer_stopped(sock):
    """Whether the process at the socket's other end is stopped: True or False, or None where
    this system cannot tell (no SO_PEERCRED, no /proc)."""
    import struct

    try:
        pid = struct.unpack("3i", sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i")))[0]
        with open("/proc/%d/stat" % pid) as f:
            state = f.read().rsplit(")", 1)[1].split()[0]
    except (AttributeError, OSError, IndexError, ValueError, struct.error):
        return None
    return state in ("T", "t")


def _send(sock, message):
    try:
        sock.sendall(json.dumps(message).encode() + b"\n")
    except OSError as exc:
        raise KeeperGone("the link keeper went away: %s" % (exc.strerror or exc))


def _exchange(sock, message, timeout_s, greeting_s=GREETING_TIMEOUT_S):
    """Send one JSON line, then read the keeper's greeting and its one line; (reply, bytes that
    came after it). The request goes out before the greeting is in: the keeper reads it only
    after greeting, and a command saves a turn of both processes (on busy cores, a wait for
    each to be scheduled)."""
    _send(sock, message)
    rest = _greeted(sock, greeting_s)
    try:
        return _read_line(sock, timeout_s, rest)
    except KeeperStuck:
        raise ConnectError("the link keeper did not answer within %.0f s" % timeout_s)


def error_from(error):
    """The ConnectError (of the same class) that the keeper reports, with the same line."""
    from . import ssh_transport

    kind = error.get("type")
    message = error.get("message") or "the link keeper could not connect"
    if kind == "HostKeyUnknown" and isinstance(error.get("host_key"), dict):
        key = error["host_key"]
        return ssh_transport.HostKeyUnknown(
            ssh_transport.HostKey(key.get("name", ""), key.get("key_type", ""), key.get("fingerprint", "")), error.get("notice", ""))
    cls = getattr(ssh_transport, kind, None) if kind in ("HostKeyChanged", "HostKeyRevoked", "AuthenticationRefused") else None
    return (cls or ConnectError)(message, permanent=bool(error.get("permanent")))


class KeeperLink:
    """The agent's stdin/stdout through the keeper: its Unix socket, which the keeper splices to
    an exec channel of the SSH link it holds. The keeper's end is the link's end."""

    def __init__(self, sock, head):
        self.sock = sock
        self._head = head

    def settimeout(self, seconds):
        self.sock.settimeout(seconds)

    def read(self, n):
        if self._head:
            data, self._head = self._head, b""
            return data
        return self.sock.recv(n)

    def write(self, data):
        self.sock.sendall(data)

    def close(self):
        try:
            self.sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self.sock.close()

    def failure(self):
        return ""


def keeper_link(host, python, accept_new, warm_only=False, accept_any=False):
    """A KeeperLink to `host`'s agent, or None when the keeper cannot serve (the caller connects
    itself): none runs and `warm_only`, or none could be started. The keeper's ConnectError
    (an unknown host key, a refused login, no route) is raised as the command's own.

    An unknown host key is accepted only with `accept_any` (`--accept-new`) or, for a caller
    that asks a person (`accept_new`, a function of the key), when they accept that very key:
    the keeper is told its fingerprint and accepts no other.
    """
    header = {
        "op": "link", "host": host, "python": python, "accept_new": bool(accept_any), "accept_fingerprint": None,
        "agent_socket": os.environ.get("SSH_AUTH_SOCK", ""), "warm_only": bool(warm_only),
        # ssh resolves the destination in the command's environment (${VAR}, SPECDECK_SSH_CONFIG,
        # a ProxyCommand's SHELL), not in the one the keeper started with.
        "environment": dict(os.environ),
    }
    from .openssh import warn_without_ssh

    warn_without_ssh()
    path = socket_path()
    if path is None:
        return None
    for attempt in range(3):
        try:
            sock = _connect(path)
        except KeeperStuck as exc:
            log.info("%s; connecting directly", exc)
            return None
        greeting_s = GREETING_TIMEOUT_S
        if sock is None:
            if warm_only:
                return None
            sock = start_keeper(path)
            if sock is None:
                return None
            greeting_s = KEEPER_START_S  # a fresh interpreter, still importing: not a stopped one
        try:
            reply, head = _exchange(sock, header, REPLY_TIMEOUT_S, greeting_s)
        except KeeperStuck as exc:
            sock.close()
            log.info("%s; connecting directly", exc)
            return None
        except KeeperGone as exc:
            sock.close()
            log.info("%s; starting another", exc)
            continue
        except BaseException:
            sock.close()
            raise
        if reply.get("ok"):
            return KeeperLink(sock, head)
        sock.close()
        if reply.get("cold"):
            return None
        error = error_from(reply.get("error") or {})
        host_key = getattr(error, "host_key", None)
        if host_key is not None and not header["accept_new"] and header["accept_fingerprint"] is None and accept_new(host_key):
            header["accept_fingerprint"] = host_key.fingerprint
            continue
        raise error
    log.warning("the link keeper at %s kept going away; connecting without it", path)
    return None


def request(message, timeout_s=30.0):
    """The keeper's one-line answer to `message` (disconnect, status), or None when no keeper
    runs; a ConnectError when one listens and does not answer (stopped, hung)."""
    path = socket_path()
    try:
        sock = _connect(path) if path else None
    except KeeperStuck as exc:
        raise ConnectError("%s (a stopped process?)" % exc)
    if sock is None:
        return None
    try:
        reply, _ = _exchange(sock, message, timeout_s)
        return reply
    except KeeperStuck as exc:
        raise ConnectError("%s (a stopped process?)" % exc)
    except KeeperGone:
        return None
    finally:
        sock.close()
