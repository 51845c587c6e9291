"""A command's side of the link keeper (tui/keeper.py): where the keeper listens, how a command
takes a link from it, starts it when none answers, and asks it to end links.

Nothing here imports paramiko or cryptography: a warm command costs a Unix socket, one JSON
line each way, and then its own requests. The keeper listens on a socket in a directory only
this user can open ($XDG_RUNTIME_DIR/specdeck, else $TMPDIR/specdeck-links-UID), created 0700;
a directory or socket that someone else owns or that others may open is refused with one line,
never used. One keeper serves one user with one HOME and one config file (they name its SSH
settings, keys, known_hosts and how long links stay): the socket's name is a hash of them and
of this code's version, so an upgraded specdeck never takes a link from an older keeper.

What a command says to the keeper, one JSON line: `{"op": "link", "host", "python",
"accept_new", "accept_fingerprint", "agent_socket", "warm_only"}`; it answers one JSON line,
`{"ok": true}` followed by the agent's own bytes (its hello first), or `{"ok": false, "error":
{"type", "message", "permanent", ...}}` (the ConnectError the command would have raised itself),
or `{"ok": false, "cold": true}` when `warm_only` found no live link. `{"op": "disconnect",
"host"}` and `{"op": "status"}` answer one line.
"""

import hashlib
import json
import logging
import os
import socket
import stat
import sys
import time

from .client import ConnectError

log = logging.getLogger(__name__)

KEEPER_START_S = 10.0  # a keeper just started has this long to listen
# The keeper answers a link request once it has connected (cold: SSH's own timeouts apply,
# twice over with a jump host) and started the agent (the client's hello timeout).
REPLY_TIMEOUT_S = 90.0
MAX_LINE_BYTES = 1 << 16


class KeeperGone(Exception):
    """The keeper went away before it answered (killed, or ending just then)."""


def runtime_dir():
    """The directory of this user's keeper sockets, created 0700; ConnectError when it is not
    private to this user."""
    base = os.environ.get("XDG_RUNTIME_DIR")
    if base and os.path.isdir(base):
        path = os.path.join(base, "specdeck")
    else:
        path = os.path.join(os.environ.get("TMPDIR") or "/tmp", "specdeck-links-%d" % os.getuid())
    try:
        os.mkdir(path, 0o700)
    except FileExistsError:
        pass
    except OSError as exc:
        raise ConnectError("cannot keep links in %s: %s" % (path, exc.strerror or exc), permanent=True)
    why = not_private(path, directory=True)
    if why:
        raise ConnectError("refusing to keep links in %s: %s" % (path, why), permanent=True)
    return path


def not_private(path, directory):
    """Why `path` (a directory, or the keeper's socket) may not be used, or None."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return None if not directory else "it does not exist"
    kind_ok = stat.S_ISDIR(st.st_mode) if directory else stat.S_ISSOCK(st.st_mode)
    if not kind_ok:
        return "it is not a %s" % ("directory" if directory else "socket")
    if st.st_uid != os.getuid():
        return "it belongs to uid %d, not this user (uid %d)" % (st.st_uid, os.getuid())
    if st.st_mode & 0o077:
        return "its mode is %04o: others may open it" % stat.S_IMODE(st.st_mode)
    return None


def identity():
    """What one keeper serves: this HOME, this config file, this code."""
    from remote import AGENT_VERSION

    from .config import config_path

    here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    text = "\0".join([os.path.expanduser("~"), config_path(), here, AGENT_VERSION])
    return hashlib.sha256(text.encode("utf-8", "surrogateescape")).hexdigest()[:12]


def socket_path():
    directory = runtime_dir()
    path = os.path.join(directory, "keeper-%s.sock" % identity())
    if len(path.encode()) > 100 and os.environ.get("XDG_RUNTIME_DIR"):  # sun_path holds ~107 bytes
        saved = os.environ.pop("XDG_RUNTIME_DIR")
        try:
            return socket_path()
        finally:
            os.environ["XDG_RUNTIME_DIR"] = saved
    why = not_private(path, directory=False)
    if why:
        raise ConnectError("refusing to use the link keeper's socket %s: %s" % (path, why), permanent=True)
    return path


def _connect(path):
    """A socket connected to the keeper at `path`, or None when none listens there."""
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.connect(path)
        return sock
    except OSError:  # no socket, a stale one (a killed keeper), a keeper ending
        sock.close()
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

    parent = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    code = "import sys; sys.path[:0] = [%r]; from tui.keeper import main; sys.exit(main(sys.argv[1:]))" % parent
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
        sock = _connect(path)
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


def _exchange(sock, message, timeout_s):
    """Send one JSON line, read the keeper's one line; (reply, bytes that came after it)."""
    sock.settimeout(timeout_s)
    try:
        sock.sendall(json.dumps(message).encode() + b"\n")
        buffer = b""
        while b"\n" not in buffer:
            chunk = sock.recv(65536)
            if not chunk:
                raise KeeperGone("the link keeper closed the connection before answering")
            buffer += chunk
            if len(buffer) > MAX_LINE_BYTES:
                raise KeeperGone("the link keeper's answer is not a line")
    except socket.timeout:
        raise ConnectError("the link keeper did not answer within %.0f s" % timeout_s)
    except OSError as exc:
        raise KeeperGone("the link keeper went away: %s" % (exc.strerror or exc))
    line, _, rest = buffer.partition(b"\n")
    try:
        reply = json.loads(line)
    except ValueError:
        raise KeeperGone("the link keeper's answer is not JSON")
    return reply, rest


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
    }
    path = socket_path()
    for attempt in range(3):
        sock = _connect(path)
        if sock is None:
            if warm_only:
                return None
            sock = start_keeper(path)
            if sock is None:
                return None
        try:
            reply, head = _exchange(sock, header, REPLY_TIMEOUT_S)
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
    """The keeper's one-line answer to `message` (disconnect, status), or None when no keeper runs."""
    sock = _connect(socket_path())
    if sock is None:
        return None
    try:
        reply, _ = _exchange(sock, message, timeout_s)
        return reply
    except KeeperGone:
        return None
    finally:
        sock.close()
