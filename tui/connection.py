"""Links to a host's agent: over SSH (paramiko) or, for `local`, a subprocess on this machine.

SSH honours ~/.ssh/config (HostName, User, Port, IdentityFile, ProxyJump), uses ssh-agent
and key files, and checks host keys against ~/.ssh/known_hosts: an unknown key is shown
with its fingerprint and accepted only when the caller says so; a changed key is refused.
A dead link is noticed by the client's heartbeat and by TCP_USER_TIMEOUT on our socket
(paramiko's keepalive alone never notices).
"""

import base64
import getpass
import hashlib
import os
import re
import selectors
import shlex
import socket
import subprocess
import sys
from dataclasses import dataclass, field
from typing import Callable, List, Optional

from .client import AgentClient, ConnectError

CONNECT_TIMEOUT_S = 10.0
# While reconnecting, a TCP connect that hangs (packets dropped, not refused) is given up
# quickly and tried again, so that a SYN goes out at least every second: the link is used
# within a second of its return instead of after the kernel's next SYN retransmission.
RECONNECT_TCP_TIMEOUT_S = 1.0
TCP_USER_TIMEOUT_MS = 4000
KEEPALIVE_S = 2


class HostKeyUnknown(ConnectError):
    def __init__(self, host_key):
        super().__init__(
            "unknown host key for %s: %s %s (accept with --accept-new after checking the fingerprint)"
            % (host_key.name, host_key.key_type, host_key.fingerprint)
        )
        self.host_key = host_key


class HostKeyChanged(ConnectError):
    pass


@dataclass
class HostKey:
    name: str  # as known_hosts names it: host, or [host]:port
    key_type: str
    fingerprint: str
    key: object = None


@dataclass
class Destination:
    text: str
    hostname: str
    port: int = 22
    user: str = ""
    identity_files: List[str] = field(default_factory=list)
    proxy_jump: Optional[str] = None

    @property
    def known_hosts_name(self):
        return self.hostname if self.port == 22 else "[%s]:%d" % (self.hostname, self.port)

    def __str__(self):
        return "%s@%s:%d" % (self.user, self.hostname, self.port)


def ssh_dir():
    return os.path.join(os.path.expanduser("~"), ".ssh")


def parse_destination(text):
    """`user@host`, `user@host:port`, `host` or an ~/.ssh/config alias, resolved through the config."""
    import paramiko

    match = re.fullmatch(r"(?:(?P<user>[^@]+)@)?(?P<host>\[[^\]]+\]|[^:@]+)(?::(?P<port>\d+))?", text)
    if not match:
        raise ConnectError("not an ssh destination: %r (user@host, user@host:port or a ~/.ssh/config alias)" % text)
    host = match.group("host").strip("[]")
    config = paramiko.SSHConfig()
    config_path = os.path.join(ssh_dir(), "config")
    if os.path.exists(config_path):
        config = paramiko.SSHConfig.from_path(config_path)
    options = config.lookup(host)
    port = int(match.group("port") or options.get("port", 22))
    user = match.group("user") or options.get("user") or getpass.getuser()
    identity_files = [os.path.expanduser(p) for p in options.get("identityfile", [])]
    proxy_jump = options.get("proxyjump")
    if proxy_jump and proxy_jump.lower() == "none":
        proxy_jump = None
    return Destination(text, options.get("hostname", host), port, user, identity_files, proxy_jump)


def fingerprint(key):
    digest = hashlib.sha256(key.asbytes()).digest()
    return "SHA256:" + base64.b64encode(digest).decode().rstrip("=")


def _tcp_socket(dest, timeout=CONNECT_TIMEOUT_S):
    try:
        sock = socket.create_connection((dest.hostname, dest.port), timeout=timeout)
    except socket.gaierror:
        raise ConnectError("cannot resolve host %r" % dest.hostname)
    except socket.timeout:
        raise ConnectError("timed out connecting to %s port %d" % (dest.hostname, dest.port))
    except OSError as exc:
        raise ConnectError("cannot connect to %s port %d: %s" % (dest.hostname, dest.port, exc.strerror or exc))
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
    if hasattr(socket, "TCP_USER_TIMEOUT"):
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_USER_TIMEOUT, TCP_USER_TIMEOUT_MS)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return sock


def _check_host_key(transport, dest, accept_new):
    import paramiko

    key = transport.get_remote_server_key()
    known_hosts = os.path.join(ssh_dir(), "known_hosts")
    host_keys = paramiko.HostKeys()
    if os.path.exists(known_hosts):
        host_keys.load(known_hosts)
    host_key = HostKey(dest.known_hosts_name, key.get_name(), fingerprint(key), key)
    entry = host_keys.lookup(dest.known_hosts_name)
    if entry:
        if entry.get(key.get_name()) == key:
            return
        # A known host offering another key, of the same type or not, is refused.
        known = ", ".join("%s %s" % (k, fingerprint(v)) for k, v in entry.items())
        raise HostKeyChanged(
            "HOST KEY CHANGED for %s: it now offers %s %s, known_hosts has %s. Refusing to connect; "
            "if the host was reinstalled, remove the old line from %s yourself"
            % (dest.known_hosts_name, key.get_name(), host_key.fingerprint, known, known_hosts)
        )
    if not accept_new(host_key):
        raise HostKeyUnknown(host_key)
    os.makedirs(ssh_dir(), mode=0o700, exist_ok=True)
    with open(known_hosts, "a") as f:
        f.write("%s %s %s\n" % (dest.known_hosts_name, key.get_name(), key.get_base64()))


def _candidate_keys(dest, skipped):
    """ssh-agent keys, then the config's IdentityFiles, then the default key files.

    Key files that cannot be used are noted in `skipped` so that a refusal can say why.
    """
    import paramiko

    try:
        for key in paramiko.Agent().get_keys():
            yield "ssh-agent key %s" % fingerprint(key), key
    except Exception:
        pass
    paths = dest.identity_files or [os.path.join(ssh_dir(), name) for name in ("id_ed25519", "id_ecdsa", "id_rsa")]
    for path in paths:
        if not os.path.exists(path):
            if dest.identity_files:
                skipped.append("%s: no such file" % path)
            continue
        try:
            yield path, paramiko.PKey.from_path(path)
        except paramiko.PasswordRequiredException:
            skipped.append("%s: encrypted (add it to ssh-agent)" % path)
        except (paramiko.SSHException, ValueError, OSError) as exc:
            skipped.append("%s: %s" % (path, exc))


def open_transport(dest, accept_new, sock=None, tcp_timeout=CONNECT_TIMEOUT_S):
    """An authenticated paramiko Transport to `dest`, through its ProxyJump if any."""
    import paramiko

    if sock is None and dest.proxy_jump:
        jump = open_transport(parse_destination(dest.proxy_jump.split(",")[0]), accept_new)
        try:
            sock = jump.open_channel("direct-tcpip", (dest.hostname, dest.port), ("127.0.0.1", 0), timeout=CONNECT_TIMEOUT_S)
        except (paramiko.SSHException, OSError) as exc:
            raise ConnectError("jump host %s could not reach %s:%d: %s" % (dest.proxy_jump, dest.hostname, dest.port, exc))
    if sock is None:
        sock = _tcp_socket(dest, tcp_timeout)
    transport = paramiko.Transport(sock)
    try:
        transport.start_client(timeout=CONNECT_TIMEOUT_S)
    except (paramiko.SSHException, OSError, EOFError) as exc:
        transport.close()
        raise ConnectError("SSH handshake with %s:%d failed: %s" % (dest.hostname, dest.port, exc or type(exc).__name__))
    try:
        _check_host_key(transport, dest, accept_new)
    except ConnectError:
        transport.close()
        raise
    tried, skipped = [], []
    for label, key in _candidate_keys(dest, skipped):
        tried.append(label)
        try:
            transport.auth_publickey(dest.user, key)
        except paramiko.AuthenticationException:
            continue
        except (paramiko.SSHException, OSError) as exc:
            transport.close()
            raise ConnectError("SSH authentication with %s failed: %s" % (dest, exc))
        if transport.is_authenticated():
            transport.set_keepalive(KEEPALIVE_S)
            return transport
    transport.close()
    raise ConnectError(
        "authentication refused for %s@%s (tried %s)"
        % (dest.user, dest.hostname, ", ".join(tried + skipped) if tried or skipped else "no keys: none found")
    )


class SSHLink:
    """The agent's stdin/stdout as an exec channel of an SSH transport."""

    def __init__(self, transport, command):
        self.transport = transport
        self.channel = transport.open_session(timeout=CONNECT_TIMEOUT_S)
        self.channel.exec_command(command)

    def settimeout(self, seconds):
        self.channel.settimeout(seconds)

    def read(self, n):
        return self.channel.recv(n)

    def write(self, data):
        self.channel.sendall(data)

    def close(self):
        try:
            self.channel.close()
        finally:
            self.transport.close()

    def failure(self):
        """Why the agent did not start, from its stderr and exit status."""
        # stdout's end can come before the exit status: wait for the status (bounded).
        self.channel.status_event.wait(5)
        err = b""
        try:
            self.channel.settimeout(2)
            while True:
                chunk = self.channel.recv_stderr(65536)
                if not chunk:
                    break
                err += chunk
        except Exception:
            pass  # what came is enough
        status = self.channel.exit_status if self.channel.exit_status_ready() else None
        lines = [l for l in err.decode("utf-8", "replace").splitlines() if l.strip()]
        if status == 127:
            return "the interpreter was not found on the host (%s)" % (lines[-1] if lines else "exit 127")
        if lines:
            return "the agent failed to start on the host: %s" % lines[-1]
        return "the agent exited with status %s before its handshake" % status if status is not None else ""


class LocalLink:
    """The agent as a subprocess of this machine: the embedded default, no SSH."""

    def __init__(self, python=None):
        package_parent = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(p for p in (package_parent, env.get("PYTHONPATH")) if p)
        try:
            self.process = subprocess.Popen(
                [python or sys.executable, "-m", "remote", "relay"],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                env=env,
            )
        except OSError as exc:
            raise ConnectError("cannot start the local agent with %s: %s" % (python or sys.executable, exc.strerror or exc))
        self._timeout = None
        self._selector = selectors.DefaultSelector()
        self._selector.register(self.process.stdout, selectors.EVENT_READ)

    def settimeout(self, seconds):
        self._timeout = seconds

    def read(self, n):
        if self._timeout is not None and not self._selector.select(self._timeout):
            raise socket.timeout("timed out")
        return os.read(self.process.stdout.fileno(), n)

    def write(self, data):
        self.process.stdin.write(data)
        self.process.stdin.flush()

    def close(self):
        try:
            self.process.stdin.close()
        except OSError:
            pass
        try:
            self.process.wait(timeout=2)
        except subprocess.TimeoutExpired:
            self.process.kill()

    def failure(self):
        try:
            err = self.process.stderr.read().decode("utf-8", "replace").strip().splitlines()
        except OSError:
            err = []
        return "the local agent failed: %s" % err[-1] if err else ""


def refuse_unknown(host_key):
    return False


def link_factory(host, python="python3", accept_new: Callable[[HostKey], bool] = refuse_unknown):
    """A function that makes a new link to `host` each time it is called (for reconnects)."""
    if host in (None, "", "local"):
        local_python = None if python in (None, "python3") else python
        return lambda reconnecting=False: LocalLink(local_python)
    dest = parse_destination(host)

    def connect(reconnecting=False):
        from . import bootstrap

        transport = open_transport(dest, accept_new, tcp_timeout=RECONNECT_TCP_TIMEOUT_S if reconnecting else CONNECT_TIMEOUT_S)
        try:
            remote_path = bootstrap.ensure_agent(transport)
            return SSHLink(transport, shlex.join([python, remote_path, "relay"]))
        except ConnectError:
            transport.close()
            raise
        except Exception as exc:
            transport.close()
            raise ConnectError("could not start the agent on %s: %s" % (dest, exc))

    return connect


def open_client(host, python="python3", accept_new=refuse_unknown, reconnect=False, on_state=None):
    """Connect to `host` (or `local`) and return a started AgentClient."""
    return AgentClient(link_factory(host, python, accept_new), reconnect=reconnect, on_state=on_state).start()
