"""SSH transports to a host, the way OpenSSH would make them: ~/.ssh/config (HostName, User,
Port, IdentityFile, ProxyJump, ConnectTimeout, HostKeyAlias, UserKnownHostsFile,
GlobalKnownHostsFile, HashKnownHosts), ssh-agent and key files, host keys checked against
known_hosts as OpenSSH does (tui/transport/known_hosts.py).

Every failure is a ConnectError with one human line; those that trying again cannot cure (a
host key, a refused login) are marked permanent so that a healing client stops.
"""

import getpass
import logging
import os
import re
import socket
from dataclasses import dataclass, field
from typing import List, Optional

from .. import logs
from . import known_hosts
from .client import ConnectError

# paramiko logs through logging itself: the log is set up as the command asked before paramiko
# is loaded (tui/logs.py). A failed handshake is logged as a whole traceback; with no handler
# configured Python would print it to stderr before our one line, and with one set up the
# records still reach its handlers.
logs.installed()
logging.getLogger("paramiko").addHandler(logging.NullHandler())

CONNECT_TIMEOUT_S = 10.0  # TCP connect, and separately the SSH greeting + key exchange
TCP_USER_TIMEOUT_MS = 4000
KEEPALIVE_S = 2


class HostKeyUnknown(ConnectError):
    def __init__(self, host_key, notice=""):
        super().__init__(
            "unknown host key for %s: %s %s (accept with --accept-new after checking the fingerprint)%s"
            % (host_key.name, host_key.key_type, host_key.fingerprint, notice),
            permanent=True,
        )
        self.host_key = host_key
        self.notice = notice
        # The console asked in a dialog and was told no: its next step is a key, not a flag.
        self.console_message = "unknown host key for %s: %s %s, not accepted: press r to be asked again%s" % (
            host_key.name, host_key.key_type, host_key.fingerprint, notice)


class HostKeyChanged(ConnectError):
    permanent = True


class HostKeyRevoked(ConnectError):
    permanent = True


class AuthenticationRefused(ConnectError):
    permanent = True


@dataclass
class HostKey:
    name: str  # as known_hosts names it: host, [host]:port, or the HostKeyAlias
    key_type: str
    fingerprint: str


@dataclass
class Destination:
    text: str
    hostname: str
    port: int = 22
    user: str = ""
    identity_files: List[str] = field(default_factory=list)
    proxy_jump: Optional[str] = None
    connect_timeout_s: float = CONNECT_TIMEOUT_S
    host_key_alias: Optional[str] = None
    user_known_hosts: List[str] = field(default_factory=list)  # the first one is written to
    global_known_hosts: List[str] = field(default_factory=list)
    hash_known_hosts: bool = False
    # ssh-agent's socket: None for this process's SSH_AUTH_SOCK, "" for none. The link keeper
    # (tui/transport/keeper.py) sets the one of the command it connects for, not the one it started with.
    agent_socket: Optional[str] = None

    @property
    def known_hosts_name(self):
        return known_hosts.host_name(self.hostname, self.port, self.host_key_alias)

    def __str__(self):
        return "%s@%s:%d" % (self.user, self.hostname, self.port)


def ssh_dir():
    return os.path.join(os.path.expanduser("~"), ".ssh")


def _file_list(value, default):
    """A known-hosts option: several space-separated files, `none` for none."""
    if value is None:
        return default
    words = value if isinstance(value, list) else value.split()
    return [] if [w.lower() for w in words] == ["none"] else [os.path.expanduser(w) for w in words]


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
        try:
            config = paramiko.SSHConfig.from_path(config_path)
        except Exception as exc:  # paramiko raises several kinds for a bad line
            raise ConnectError("cannot read %s: %s" % (config_path, exc), permanent=True)
    options = config.lookup(host)
    port = int(match.group("port") or options.get("port", 22))
    user = match.group("user") or options.get("user") or getpass.getuser()
    identity_files = [os.path.expanduser(p) for p in options.get("identityfile", [])]
    proxy_jump = options.get("proxyjump")
    if proxy_jump and proxy_jump.lower() == "none":
        proxy_jump = None
    try:
        connect_timeout_s = float(options.get("connecttimeout", CONNECT_TIMEOUT_S))
    except ValueError:
        connect_timeout_s = CONNECT_TIMEOUT_S
    alias = options.get("hostkeyalias")
    return Destination(
        text,
        options.get("hostname", host),
        port,
        user,
        identity_files,
        proxy_jump,
        connect_timeout_s=connect_timeout_s if connect_timeout_s > 0 else CONNECT_TIMEOUT_S,
        host_key_alias=None if alias is None or alias.lower() == "none" else alias,
        user_known_hosts=_file_list(
            options.get("userknownhostsfile"), [os.path.join(ssh_dir(), "known_hosts"), os.path.join(ssh_dir(), "known_hosts2")]
        ),
        global_known_hosts=_file_list(options.get("globalknownhostsfile"), ["/etc/ssh/ssh_known_hosts", "/etc/ssh/ssh_known_hosts2"]),
        hash_known_hosts=str(options.get("hashknownhosts", "no")).lower() == "yes",
    )


def fingerprint(key):
    return known_hosts.fingerprint_of_blob(key.asbytes())


def unresolved(dest):
    """The line for a host name that did not resolve, with how to name a host by an alias."""
    typed = re.sub(r"^[^@]*@", "", dest.text)
    typed = re.sub(r":\d+$", "", typed).strip("[]")
    if typed != dest.hostname:  # the name came from the HostName of an ~/.ssh/config alias
        return "cannot resolve host %r: the name did not resolve; it is the HostName ~/.ssh/config gives for %s" % (
            dest.hostname, typed)
    return ("cannot resolve host %r: the name did not resolve; to name a host by an alias, add `Host %s` with "
            "`HostName <address>` to ~/.ssh/config" % (dest.hostname, dest.hostname))


def _tcp_socket(dest, timeout):
    try:
        sock = socket.create_connection((dest.hostname, dest.port), timeout=timeout)
    except socket.gaierror:
        raise ConnectError(unresolved(dest))
    except socket.timeout:
        raise ConnectError("timed out connecting to %s port %d" % (dest.hostname, dest.port))
    except OSError as exc:
        raise ConnectError("cannot connect to %s port %d: %s" % (dest.hostname, dest.port, exc.strerror or exc))
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
    if hasattr(socket, "TCP_USER_TIMEOUT"):
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_USER_TIMEOUT, TCP_USER_TIMEOUT_MS)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return sock


def _no_greeting(where, timeout_s):
    return (
        "no SSH greeting from %s within %g s: something accepts connections there but does not speak SSH "
        "(a stuck sshd, a bastion, another service?)" % (where, timeout_s)
    )


def _handshake_failure(exc, where, timeout_s):
    """One line for a failed SSH greeting or key exchange, from what paramiko raised."""
    text = str(exc)
    cause = exc.__cause__ or exc.__context__
    if "protocol banner" in text:  # paramiko: "Error reading SSH protocol banner" + its cause
        if isinstance(cause, (socket.timeout, TimeoutError)):
            return _no_greeting(where, timeout_s)
        return "%s closed the connection without an SSH greeting: is it an SSH server?" % where
    if "protocol version" in text or "Incompatible version" in text:
        return "%s does not speak SSH: %s" % (where, text)
    if isinstance(exc, (EOFError, ConnectionError)):
        return "%s closed the connection during the SSH handshake" % where
    return "SSH handshake with %s failed: %s" % (where, text or type(exc).__name__)


def _handshake(transport, dest, timeout_s):
    import paramiko

    where = "%s port %d" % (dest.hostname, dest.port)
    # Bounded: without these a port that accepts TCP and stays silent holds us for paramiko's
    # defaults, then fails with an error that does not say what happened.
    transport.banner_timeout = timeout_s
    transport.handshake_timeout = timeout_s
    try:
        # A little longer than the banner timeout, so that a silent port fails as "no greeting".
        transport.start_client(timeout=timeout_s + 1)
    except (paramiko.SSHException, OSError, EOFError) as exc:
        raise ConnectError(_handshake_failure(exc, where, timeout_s))
    # start_client returns without a word when its own timeout passes mid-negotiation.
    if not transport.is_active() or not getattr(transport, "initial_kex_done", True):
        if not transport.remote_version:
            raise ConnectError(_no_greeting(where, timeout_s))
        raise ConnectError("the SSH handshake with %s did not finish within %g s" % (where, timeout_s))


def _check_host_key(transport, dest, accept_new):
    key = transport.get_remote_server_key()
    blob = key.asbytes()
    name = dest.known_hosts_name
    host_key = HostKey(name, key.get_name(), known_hosts.fingerprint_of_blob(blob))
    verdict = known_hosts.check(name, blob, dest.user_known_hosts + dest.global_known_hosts)
    if verdict.status == "known":
        return
    if verdict.status == "revoked":
        raise HostKeyRevoked(
            "the host key of %s (%s %s) is marked @revoked in %s: refusing to connect"
            % (name, host_key.key_type, host_key.fingerprint, verdict.entries[0].where)
        )
    if verdict.status == "changed":
        # A known host offering another key, of the same type or not, is refused.
        known = ", ".join("%s %s (%s)" % (e.key_type, known_hosts.fingerprint_of_blob(e.key_blob), e.where) for e in verdict.entries)
        raise HostKeyChanged(
            "HOST KEY CHANGED for %s: it now offers %s %s, known_hosts has %s. Refusing to connect; "
            "if the host was reinstalled, remove the old line yourself" % (name, host_key.key_type, host_key.fingerprint, known)
        )
    notice = ""
    if verdict.entries:
        notice = "; %s names a certificate authority for this host, but specdeck checks plain host keys, not certificates" % (
            verdict.entries[0].where
        )
    if not accept_new(host_key):
        raise HostKeyUnknown(host_key, notice)
    if not dest.user_known_hosts:
        return  # UserKnownHostsFile none: accepted for this connection only
    known_hosts.append(dest.user_known_hosts[0], name, key.get_name(), key.get_base64(), hashed=dest.hash_known_hosts)


def _candidate_keys(dest, skipped):
    """ssh-agent keys, then the config's IdentityFiles, then the default key files.

    Key files that cannot be used are noted in `skipped` so that a refusal can say why.
    """
    import paramiko

    try:
        for key in _agent(dest).get_keys():
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


def _agent(dest):
    """paramiko's ssh-agent client, on the socket `dest` names (an agent with no keys for "")."""
    import paramiko

    if dest.agent_socket is None:
        return paramiko.Agent()
    agent = paramiko.agent.AgentSSH()
    if dest.agent_socket:
        conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            conn.connect(dest.agent_socket)
        except OSError:
            conn.close()  # a dangling variable: the agent is gone, as paramiko.Agent() takes it
            return agent
        agent._connect(conn)
    return agent


def _authenticate(transport, dest):
    import paramiko

    tried, skipped = [], []
    for label, key in _candidate_keys(dest, skipped):
        tried.append(label)
        try:
            transport.auth_publickey(dest.user, key)
        except paramiko.AuthenticationException:
            continue
        except (paramiko.SSHException, OSError, EOFError) as exc:
            raise ConnectError("SSH authentication with %s failed: %s" % (dest, exc or type(exc).__name__))
        if transport.is_authenticated():
            return
    raise AuthenticationRefused(
        "authentication refused for %s@%s (tried %s)"
        % (dest.user, dest.hostname, ", ".join(tried + skipped) if tried or skipped else "no keys: none found")
    )


def open_transport(dest, accept_new, tcp_timeout=None):
    """An authenticated paramiko Transport to `dest`, through its ProxyJump if any.

    Its `jump_transport` (None without ProxyJump) is closed with it by SSHLink.
    """
    import paramiko

    jump = sock = transport = None
    try:
        if dest.proxy_jump:
            jump_dest = parse_destination(dest.proxy_jump.split(",")[0])
            jump_dest.agent_socket = dest.agent_socket
            jump = open_transport(jump_dest, accept_new)
            try:
                sock = jump.open_channel("direct-tcpip", (dest.hostname, dest.port), ("127.0.0.1", 0), timeout=dest.connect_timeout_s)
            except (paramiko.SSHException, OSError, EOFError) as exc:
                raise ConnectError("jump host %s could not reach %s:%d: %s" % (dest.proxy_jump, dest.hostname, dest.port, exc))
        else:
            sock = _tcp_socket(dest, tcp_timeout or dest.connect_timeout_s)
        transport = paramiko.Transport(sock)
        transport.jump_transport = jump
        _handshake(transport, dest, dest.connect_timeout_s)
        _check_host_key(transport, dest, accept_new)
        _authenticate(transport, dest)
        transport.set_keepalive(KEEPALIVE_S)
        return transport
    except BaseException:
        if transport is not None:
            transport.close()
        elif sock is not None:
            sock.close()
        if jump is not None:
            jump.close()
        raise


def close_transport(transport):
    transport.close()
    if getattr(transport, "jump_transport", None) is not None:
        transport.jump_transport.close()
