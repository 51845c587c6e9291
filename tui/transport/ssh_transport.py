"""SSH transports to a host, made the way OpenSSH would make them from what OpenSSH itself says
the destination means (tui/transport/openssh.py): the route (ProxyCommand, ProxyJump chains, each
hop a channel through the one before), the keys (IdentityFile, IdentitiesOnly, IdentityAgent,
the agent), host keys judged against the files ssh would read (tui/transport/known_hosts.py).

Every failure is a ConnectError with one human line; those that trying again cannot cure (a
host key, a refused login) are marked permanent so that a healing client stops.
"""

import base64
import logging
import os
import socket
from dataclasses import dataclass

from .. import logs
from . import known_hosts, openssh
from .client import ConnectError

# paramiko logs through logging itself: the log is set up as the command asked before paramiko
# is loaded (tui/logs.py). A failed handshake is logged as a whole traceback; with no handler
# configured Python would print it to stderr before our one line, and with one set up the
# records still reach its handlers.
logs.installed()
logging.getLogger("paramiko").addHandler(logging.NullHandler())

CONNECT_TIMEOUT_S = openssh.CONNECT_TIMEOUT_S
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


def fingerprint(key):
    return known_hosts.fingerprint_of_blob(key.asbytes())


def unresolved(dest):
    """The line for a host name that did not resolve, with where the name came from."""
    if dest.original != dest.hostname:  # the name came from the HostName ssh's config gives
        return "cannot resolve host %r: the name did not resolve; it is the HostName the ssh config gives for %s" % (
            dest.hostname, dest.original)
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


def _prefer_known_key_types(transport, dest):
    """Host key algorithms of the types known_hosts holds for this host first, as ssh orders
    them: a host known by its RSA key is asked for that key, not called changed because it
    offered an ed25519 one first. HostKeyAlgorithms from the config bounds the list."""
    options = transport.get_security_options()
    offered = list(options.key_types)
    if dest.host_key_algorithms:
        allowed = [a for a in offered if a in dest.host_key_algorithms]
        offered = allowed or offered
    entries = known_hosts.lookup(dest.known_hosts_name, dest.user_known_hosts + dest.global_known_hosts)
    known = {known_hosts.algorithm_family(e.key_type) for e in entries if e.marker is None}
    first = [a for a in offered if known_hosts.algorithm_family(a) in known]
    options.key_types = first + [a for a in offered if a not in first]


def _check_host_key(transport, dest, accept_new):
    """The host key judged as OpenSSH judges it; a changed or revoked key refused whatever the config says."""
    key = transport.get_remote_server_key()
    blob = key.asbytes()
    name = dest.known_hosts_name
    host_key = HostKey(name, key.get_name(), known_hosts.fingerprint_of_blob(blob))
    where_revoked = known_hosts.revoked_in_file(dest.revoked_host_keys, blob) if dest.revoked_host_keys else None
    verdict = known_hosts.check(name, blob, dest.user_known_hosts + dest.global_known_hosts)
    if where_revoked or verdict.status == "revoked":
        raise HostKeyRevoked(
            "the host key of %s (%s %s) is revoked in %s: refusing to connect"
            % (name, host_key.key_type, host_key.fingerprint, where_revoked or verdict.entries[0].where)
        )
    if verdict.status == "known":
        return
    if verdict.status == "changed":
        # A known host offering another key, of the same type or not, is refused on every path.
        known = ", ".join("%s %s (%s)" % (e.key_type, known_hosts.fingerprint_of_blob(e.key_blob), e.where) for e in verdict.entries)
        lenient = ""
        if dest.strict_host_key_checking == "no":
            lenient = " (StrictHostKeyChecking no in the ssh config would let ssh through; specdeck refuses a changed key whatever the config)"
        raise HostKeyChanged(
            "HOST KEY CHANGED for %s: it now offers %s %s, known_hosts has %s. Refusing to connect%s; "
            "if the host was reinstalled, remove the old line yourself" % (
                name, host_key.key_type, host_key.fingerprint, known, lenient)
        )
    notice = ""
    if verdict.entries:
        notice = "; %s names a certificate authority for this host, but specdeck checks plain host keys, not certificates" % (
            verdict.entries[0].where
        )
    if dest.strict_host_key_checking == "yes":
        raise ConnectError("unknown host key for %s: %s %s, and StrictHostKeyChecking yes in the ssh config refuses an "
                           "unknown key (ssh would too): add it to known_hosts first%s" % (
                               name, host_key.key_type, host_key.fingerprint, notice), permanent=True)
    # accept-new and no: ssh records an unknown key without asking; so does specdeck.
    if dest.strict_host_key_checking not in ("accept-new", "no") and not accept_new(host_key):
        raise HostKeyUnknown(host_key, notice)
    if not dest.user_known_hosts:
        return  # UserKnownHostsFile none: accepted for this connection only
    known_hosts.append(dest.user_known_hosts[0], name, key.get_name(), key.get_base64(), hashed=dest.hash_known_hosts)


def _identity_keys(dest, skipped):
    """(label, key) of each IdentityFile that loads; the ones that cannot are noted in `skipped`."""
    import paramiko

    keys = []
    for path in dest.identity_files:
        if not os.path.exists(path):
            if dest.explicit_identities:
                skipped.append("%s: no such file" % path)
            continue
        try:
            keys.append((path, paramiko.PKey.from_path(path)))
        except paramiko.PasswordRequiredException:
            public = _public_key(path + ".pub")
            if public is not None:
                keys.append((path, public))  # usable through the agent only
            else:
                skipped.append("%s: encrypted (add it to ssh-agent)" % path)
        except (paramiko.SSHException, ValueError, OSError) as exc:
            skipped.append("%s: %s" % (path, exc))
    return keys


def _public_key(path):
    import paramiko

    try:
        with open(path) as f:
            fields = f.read(65536).split()
        return paramiko.PublicBlob(fields[0], base64.b64decode(fields[1]))
    except (OSError, IndexError, ValueError):
        return None


def _candidate_keys(dest, skipped):
    """Keys in the order ssh offers them: the agent's (under IdentitiesOnly only those an
    IdentityFile names), then the IdentityFiles' own private keys."""
    files = _identity_keys(dest, skipped)
    named = {key.asbytes() for _, key in files}
    try:
        for key in _agent(dest).get_keys():
            if dest.identities_only and key.asbytes() not in named:
                continue
            yield "ssh-agent key %s" % fingerprint(key), key
    except Exception:
        pass
    for label, key in files:
        if hasattr(key, "sign_ssh_data"):  # a private key, not a public one kept for the agent's sake
            yield label, key


def _agent(dest):
    """paramiko's ssh-agent client, on the socket `dest` names (an agent with no keys for "")."""
    import paramiko

    path = dest.agent_socket
    if path is None:
        path = dest.environment_agent
    if path is None:
        return paramiko.Agent()
    agent = paramiko.agent.AgentSSH()
    if path:
        conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            conn.connect(path)
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


class ProxyCommand:
    """A ProxyCommand run as ssh runs it (`$SHELL -c "exec CMD"`), its stdin and stdout one end of
    a socket pair whose other end carries the SSH connection. Its own session: it has no
    terminal to prompt on, as under the console it must not. Its stderr is kept for the error line."""

    def __init__(self, command, environment=None):
        import subprocess
        import tempfile

        self.command = command
        self.sock, theirs = socket.socketpair()
        self.stderr = tempfile.TemporaryFile()
        shell = (os.environ if environment is None else environment).get("SHELL") or "/bin/sh"
        try:
            self.process = subprocess.Popen([shell, "-c", "exec " + command], stdin=theirs, stdout=theirs, stderr=self.stderr,
                                            start_new_session=True, close_fds=True, env=environment)
        except OSError as exc:
            self.sock.close()
            self.stderr.close()
            raise ConnectError("cannot run the ProxyCommand %r: %s" % (command, exc.strerror or exc), permanent=True)
        finally:
            theirs.close()

    def said(self):
        """The proxy's last line on stderr, if it wrote one."""
        try:
            self.stderr.seek(0)
            lines = [l for l in self.stderr.read(65536).decode("utf-8", "replace").splitlines() if l.strip()]
        except (OSError, ValueError):
            return ""
        return lines[-1].strip() if lines else ""

    def close(self):
        import subprocess

        self.sock.close()
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=2)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self.stderr.close()


def _hop_key(dest):
    return (dest.user, dest.hostname.lower(), dest.port)


def _route_socket(dest, accept_new, tcp_timeout, path, parts):
    """The byte stream to `dest`'s sshd, by the route ssh would take: its ProxyCommand, the last
    hop of its ProxyJump (reached the same way, with the hops before it as its own ProxyJump),
    or TCP. What it opens to get there is appended to `parts`, to be closed with the link."""
    import paramiko

    if dest.proxy_command:
        proxy = ProxyCommand(dest.proxy_command, dest.environment)
        parts.append(proxy)
        return proxy.sock, proxy
    if dest.proxy_jump:
        *before, last = dest.proxy_jump
        user, host, port = openssh.hop_spec(last)
        hop = openssh.resolve(host, user=user, port=port, jumps=",".join(before) or None, environment=dest.environment)
        hop.environment_agent = dest.environment_agent
        jump = open_transport(hop, accept_new, path=path)
        parts.append(_Closing(jump))
        try:
            channel = jump.open_channel("direct-tcpip", (dest.hostname, dest.port), ("127.0.0.1", 0), timeout=dest.connect_timeout_s)
        except (paramiko.SSHException, OSError, EOFError) as exc:
            raise ConnectError("jump host %s could not reach %s:%d: %s" % (hop, dest.hostname, dest.port, exc or type(exc).__name__))
        return channel, None
    return _tcp_socket(dest, tcp_timeout or dest.connect_timeout_s), None


class _Closing:
    def __init__(self, transport):
        self.transport = transport

    def close(self):
        close_transport(self.transport)


def open_transport(dest, accept_new, tcp_timeout=None, path=()):
    """An authenticated paramiko Transport to `dest`, by the route ssh would take to it (every
    hop's host key judged from that hop's own known_hosts files, with its own user and keys).

    What the route opened (jump hosts' transports, a ProxyCommand) is closed with it by
    close_transport. A route that comes back to a hop it passed is refused in one line.
    """
    import paramiko

    if _hop_key(dest) in path or len(path) >= openssh.MAX_HOPS:
        chain = " -> ".join("%s@%s:%d" % hop for hop in path + (_hop_key(dest),))
        raise ConnectError("the ProxyJump route loops: %s" % chain, permanent=True)
    parts, transport, proxy = [], None, None
    try:
        sock, proxy = _route_socket(dest, accept_new, tcp_timeout, path + (_hop_key(dest),), parts)
        if not parts:
            parts.append(sock)
        transport = paramiko.Transport(sock)
        transport.route_parts = parts
        _prefer_known_key_types(transport, dest)
        try:
            _handshake(transport, dest, dest.connect_timeout_s)
        except ConnectError as exc:
            said = proxy.said() if proxy is not None else ""
            if said:
                raise ConnectError("%s (the ProxyCommand %r said: %s)" % (exc, dest.proxy_command, said))
            raise
        _check_host_key(transport, dest, accept_new)
        _authenticate(transport, dest)
        transport.set_keepalive(KEEPALIVE_S)
        return transport
    except BaseException:
        if transport is not None:
            transport.close()
        for part in reversed(parts):
            part.close()
        raise


def close_transport(transport):
    transport.close()
    for part in reversed(getattr(transport, "route_parts", ())):
        part.close()
