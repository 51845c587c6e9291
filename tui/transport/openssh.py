"""What a destination means to this user's own OpenSSH client, asked of that client.

`ssh -G DEST` prints OpenSSH's whole resolution of a destination without connecting: the system
and user configs, Include, Match (user, final, exec), canonicalisation, `Port ssh`, comments,
`ssh://` URIs. specdeck reads that answer and never re-implements ssh_config(5); what is left to
do here is what `ssh -G` prints unexpanded (the tokens of IdentityFile, IdentityAgent,
ProxyCommand and ProxyJump, `~` and `${VAR}`), and the route, hop after hop, as ssh builds it:
`ProxyJump h1,h2` makes ssh run `ssh [-l U] [-p P] -J h1 -W [%h]:%p h2`, so the last hop is
resolved with the others as its own ProxyJump, and the first hop with its own config's route.

Only where no `ssh` is installed is paramiko's config reader used, with one line naming what of
the config it cannot honour. `SPECDECK_SSH_CONFIG` is passed as `ssh -F` (to every hop, as ssh
passes its own -F to the jump commands it builds).
"""

import getpass
import hashlib
import os
import pwd
import re
import shutil
import socket
import subprocess
import sys
from dataclasses import dataclass, field
from typing import List, Optional

from .. import logs
from .client import ConnectError

log = logs.get("tui.ssh")

CONNECT_TIMEOUT_S = 10.0  # OpenSSH has none by default; a TCP connect and a handshake each get this
RESOLVE_TIMEOUT_S = 20.0  # `ssh -G` runs Match exec commands: bounded all the same
MAX_HOPS = 16
DEFAULT_IDENTITIES = ("id_rsa", "id_ecdsa", "id_ecdsa_sk", "id_ed25519", "id_ed25519_sk", "id_xmss", "id_dsa")
# What ssh honours and specdeck cannot: refused in one line rather than silently connecting
# another way than ssh would (value: why).
NOT_HONOURED = {
    "knownhostscommand": "specdeck reads known_hosts files only",
    "proxyusefdpass": "specdeck reads its proxy's bytes itself",
}


@dataclass
class Destination:
    """One hop of a route as OpenSSH resolved it."""

    text: str  # as typed (or as the ProxyJump names the hop)
    hostname: str
    port: int = 22
    user: str = ""
    identity_files: List[str] = field(default_factory=list)
    identities_only: bool = False
    explicit_identities: bool = False  # IdentityFile given (else ssh's default files, tried where they exist)
    # IdentityAgent: None where the config names none, "" for `none`, else the socket.
    agent_socket: Optional[str] = None
    # SSH_AUTH_SOCK of the command this link is for, where the config names no agent (None: this
    # process's own): the link keeper connects for commands run in other environments.
    environment_agent: Optional[str] = None
    proxy_command: Optional[str] = None  # tokens expanded
    proxy_jump: List[str] = field(default_factory=list)  # hop specs, first hop first
    connect_timeout_s: float = CONNECT_TIMEOUT_S
    host_key_alias: Optional[str] = None
    user_known_hosts: List[str] = field(default_factory=list)  # the first one is written to
    global_known_hosts: List[str] = field(default_factory=list)
    hash_known_hosts: bool = False
    strict_host_key_checking: str = "ask"  # ask, yes, no, accept-new
    host_key_algorithms: List[str] = field(default_factory=list)
    revoked_host_keys: Optional[str] = None
    original: str = ""  # %n: the host as given
    # The environment ssh is run in (None: this process's): the link keeper resolves and
    # connects for commands run in other environments (${VAR}, SHELL, a ProxyCommand's own).
    environment: Optional[dict] = field(default=None, repr=False, compare=False)

    @property
    def known_hosts_name(self):
        from .known_hosts import host_name

        return host_name(self.hostname, self.port, self.host_key_alias)

    def __str__(self):
        return "%s@%s:%d" % (self.user, self.hostname, self.port)


def config_file(environment=None):
    """The config file given to ssh as -F, or None for ssh's own (the user's and the system's)."""
    return (os.environ if environment is None else environment).get("SPECDECK_SSH_CONFIG") or None


def ssh_client(environment=None):
    """The ssh client on the PATH ssh would be run with, or None."""
    return shutil.which("ssh", path=(os.environ if environment is None else environment).get("PATH"))


def split_typed(text):
    """specdeck's `[user@]host[:port]` (and `[v6]:port`) as (destination for ssh, port or None).
    An `ssh://` URI and anything else go to ssh as typed: ssh parses them itself."""
    if text.startswith("ssh://") or text.startswith("-"):
        return text, None
    match = re.fullmatch(r"(?P<dest>(?:.*@)?(?:\[[^\]]+\]|[^:@\[\]]+)):(?P<port>\d+)", text)
    if not match:
        return text, None
    dest = match.group("dest")
    return re.sub(r"\[([^\]]+)\]$", r"\1", dest), int(match.group("port"))


def hop_spec(spec):
    """A ProxyJump entry, `[user@]host[:port]` or `ssh://[user@]host[:port]`: (user, host, port)."""
    if spec.startswith("ssh://"):
        spec = spec[len("ssh://"):].rstrip("/")
    user, at, rest = spec.rpartition("@")
    if rest.startswith("["):
        host, _, tail = rest[1:].partition("]")
        port = tail[1:] if tail.startswith(":") else ""
    elif rest.count(":") == 1:
        host, _, port = rest.partition(":")
    else:
        host, port = rest, ""
    if not host or (port and not port.isdigit()):
        raise ConnectError("not a ProxyJump host: %r ([user@]host[:port])" % spec, permanent=True)
    return (user if at else None), host, (int(port) if port else None)


def _run_g(dest, user=None, port=None, jumps=None, environment=None):
    """`ssh -G`'s answer for one hop: {keyword: [values]}."""
    argv = [ssh_client(environment), "-G"]
    if config_file(environment):
        argv += ["-F", config_file(environment)]
    if user:
        argv += ["-l", user]
    if port:
        argv += ["-p", str(port)]
    if jumps:
        argv += ["-J", jumps]
    argv += ["--", dest]
    try:
        result = subprocess.run(argv, stdin=subprocess.DEVNULL, capture_output=True, timeout=RESOLVE_TIMEOUT_S, env=environment)
    except subprocess.TimeoutExpired:
        raise ConnectError("`ssh -G %s` did not answer within %g s (a Match exec command that hangs?)" % (dest, RESOLVE_TIMEOUT_S))
    except OSError as exc:
        raise ConnectError("cannot run %s: %s" % (argv[0], exc.strerror or exc))
    err = [l for l in result.stderr.decode("utf-8", "replace").splitlines()
           if l.strip() and not l.startswith("Pseudo-terminal will not be allocated")]
    if result.returncode != 0:
        raise ConnectError("ssh cannot resolve %s: %s" % (dest, err[-1] if err else "exit %d" % result.returncode), permanent=True)
    options = {}
    for line in result.stdout.decode("utf-8", "surrogateescape").splitlines():
        keyword, _, value = line.partition(" ")
        options.setdefault(keyword.lower(), []).append(value)
    return options


def _home():
    try:
        return pwd.getpwuid(os.getuid()).pw_dir  # as OpenSSH: the passwd entry's home, not $HOME
    except KeyError:
        return os.path.expanduser("~")


def _tilde(path):
    """`~` and `~user` at a path's start, from the passwd entries as ssh's tilde_expand does."""
    if not path.startswith("~"):
        return path
    name, slash, rest = path[1:].partition("/")
    if name:
        try:
            home = pwd.getpwnam(name).pw_dir
        except KeyError:
            raise ConnectError("no such user %r in the path %s" % (name, path), permanent=True)
    else:
        home = _home()
    return home.rstrip("/") + "/" + rest if slash else home


def _environment(text, keyword, environment=None):
    def variable(match):
        value = (os.environ if environment is None else environment).get(match.group(1))
        if value is None:
            raise ConnectError("%s uses ${%s}, which is not set (ssh refuses it too)" % (keyword, match.group(1)), permanent=True)
        return value

    return re.sub(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}", variable, text)


def _local_host(with_domain):
    name = socket.gethostname()
    return name if with_domain else name.split(".")[0]


def expand(text, keyword, tokens):
    """ssh's percent_expand over `tokens` ({letter: value}); an unknown token is refused, as ssh does."""

    def token(match):
        letter = match.group(1)
        if letter == "%":
            return "%"
        if letter not in tokens:
            raise ConnectError("%s: the token %%%s is not one ssh takes there" % (keyword, letter), permanent=True)
        value = tokens[letter]
        return value() if callable(value) else value

    return re.sub(r"%(.?)", token, text, flags=re.DOTALL)


def _tokens(dest, jump_text=""):
    """The tokens IdentityFile, IdentityAgent and UserKnownHostsFile take (ssh_config(5), TOKENS)."""
    uid = os.getuid()

    def conn_hash():
        text = "%s%s%d%s" % (_local_host(True), dest.hostname, dest.port, dest.user)
        return hashlib.sha1(text.encode()).hexdigest()

    return {
        "C": conn_hash, "d": _home, "h": dest.hostname, "i": str(uid), "k": dest.host_key_alias or dest.original,
        "L": lambda: _local_host(False), "l": lambda: _local_host(True), "n": dest.original, "p": str(dest.port),
        "r": dest.user, "u": getpass.getuser, "j": jump_text,
    }


def _path(value, keyword, tokens, environment=None):
    return _tilde(expand(_environment(value, keyword, environment), keyword, tokens))


def _files(values, keyword, tokens, environment=None):
    words = [w for value in values for w in value.split()]
    if [w.lower() for w in words] in ([], ["none"]):
        return []
    return [w if not re.search(r"%|\$\{|^~", w) else _path(w, keyword, tokens, environment) for w in words]


def _one(options, keyword, default=None):
    values = options.get(keyword)
    return values[0] if values else default


def _destination(text, original, options, environment=None):
    """A Destination from `ssh -G`'s answer."""
    for keyword, why in NOT_HONOURED.items():
        value = _one(options, keyword)
        if value and value.lower() not in ("none", "no", "false"):
            raise ConnectError("%s is set for %s in the ssh config, and specdeck cannot honour it (%s)" % (
                _spelled(keyword), original, why), permanent=True)
    port = _one(options, "port", "22")
    try:
        port = int(port)
    except ValueError:
        raise ConnectError("ssh resolved %s to the port %r" % (original, port), permanent=True)
    timeout = _one(options, "connecttimeout", "none")
    alias = _one(options, "hostkeyalias")
    strict = {"true": "yes", "false": "no"}.get(_one(options, "stricthostkeychecking", "ask"), _one(options, "stricthostkeychecking", "ask"))
    dest = Destination(
        text, _one(options, "hostname", original), port, _one(options, "user") or getpass.getuser(),
        identities_only=_one(options, "identitiesonly", "no") in ("yes", "true"),
        connect_timeout_s=float(timeout) if timeout.isdigit() and int(timeout) > 0 else CONNECT_TIMEOUT_S,
        host_key_alias=None if alias in (None, "none") else alias,
        hash_known_hosts=_one(options, "hashknownhosts", "no") in ("yes", "true"),
        strict_host_key_checking=strict,
        host_key_algorithms=[a for a in (_one(options, "hostkeyalgorithms") or "").split(",") if a],
        original=original,
        environment=environment,
    )
    jump = _one(options, "proxyjump")
    jump = None if jump in (None, "none") else jump
    tokens = _tokens(dest, jump or "")
    route_tokens = {"h": dest.hostname, "n": original, "p": str(dest.port), "r": dest.user}
    command = _one(options, "proxycommand")
    if command and command != "none":
        dest.proxy_command = expand(command, "ProxyCommand", route_tokens)
    elif jump:
        dest.proxy_jump = [expand(spec, "ProxyJump", route_tokens) for spec in jump.split(",") if spec]
    identities = options.get("identityfile", [])
    defaults = ["~/.ssh/" + name for name in DEFAULT_IDENTITIES]
    dest.explicit_identities = identities != defaults
    dest.identity_files = [_path(p, "IdentityFile", tokens, environment) for p in identities]
    agent = _one(options, "identityagent")
    if agent is not None:
        if agent == "none":
            dest.agent_socket = ""
        elif agent != "SSH_AUTH_SOCK":
            if agent.startswith("$") and not agent.startswith("${"):
                agent = (os.environ if environment is None else environment).get(agent[1:], "")  # `IdentityAgent $VAR`: the variable names the socket
                dest.agent_socket = agent
            else:
                dest.agent_socket = _path(agent, "IdentityAgent", tokens, environment)
    dest.user_known_hosts = _files(options.get("userknownhostsfile", ["~/.ssh/known_hosts ~/.ssh/known_hosts2"]),
                                   "UserKnownHostsFile", tokens, environment)
    dest.global_known_hosts = _files(options.get("globalknownhostsfile", ["/etc/ssh/ssh_known_hosts /etc/ssh/ssh_known_hosts2"]),
                                     "GlobalKnownHostsFile", tokens, environment)
    revoked = _one(options, "revokedhostkeys")
    if revoked and revoked != "none":
        dest.revoked_host_keys = _path(revoked, "RevokedHostKeys", tokens, environment)
    return dest


def _spelled(keyword):
    return {"knownhostscommand": "KnownHostsCommand", "proxyusefdpass": "ProxyUseFdpass"}.get(keyword, keyword)


def resolve(text, user=None, port=None, jumps=None, environment=None):
    """The Destination `text` means to ssh, typed as specdeck takes it (`[user@]host[:port]`, an
    alias, an `ssh://` URI), or as a hop of a ProxyJump (`user`, `port`, `jumps`: what ssh puts on
    the jump command's line). `environment`: the one ssh runs in (None: this process's)."""
    if not text or text.startswith("-") or any(c in text for c in "\0\n\r"):
        raise ConnectError("not an ssh destination: %r" % text, permanent=True)
    if ssh_client(environment) is None:
        return _resolve_with_paramiko(text, user, port, environment)
    dest_text, typed_port = split_typed(text) if user is None and port is None else (text, None)
    options = _run_g(dest_text, user, port or typed_port, jumps, environment)
    original = dest_text
    if original.startswith("ssh://"):
        original = hop_spec(original)[1]
    elif "@" in original:
        original = original.rpartition("@")[2]
    return _destination(text, original, options, environment)


# -- where no ssh client is installed

# What paramiko's reader does not do that ssh would (keyword, or `Match` with a criterion).
_PARAMIKO_BLIND = ("include", "canonicalizehostname", "proxyjump", "identityagent", "revokedhostkeys", "knownhostscommand")


_warned = set()  # the configs already warned about in this process


def warn_without_ssh(environment=None):
    """Where no ssh client is installed, one line on stderr (once a process) naming what of the
    config paramiko's reader cannot honour; the link keeper, whose stderr goes nowhere, leaves
    it to the command (tui/transport/links.py calls this first)."""
    if ssh_client(environment) is not None:
        return
    path = config_file(environment) or os.path.join(_home(), ".ssh", "config")
    if path in _warned:
        return
    _warned.add(path)
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            lines = f.read(1 << 20).splitlines()
    except OSError:
        return
    words = {line.split()[0].lower() for line in lines if line.split() and not line.lstrip().startswith("#")}
    blind = sorted(w for w in words if w in _PARAMIKO_BLIND)
    if any(re.match(r"\s*match\s.*\b(final|canonical|exec)\b", l, re.I) for l in lines):
        blind.append("Match final/canonical/exec")
    if blind:
        line = "no ssh client is installed: %s is read by paramiko, which does not honour %s" % (path, ", ".join(blind))
        log.warning("%s", line)
        sys.stderr.write("specdeck: warning: %s\n" % line)


def _resolve_with_paramiko(text, user, port, environment=None):
    import paramiko

    warn_without_ssh(environment)
    path = config_file(environment) or os.path.join(_home(), ".ssh", "config")
    config = paramiko.SSHConfig()
    if os.path.exists(path):
        try:
            with open(path, encoding="utf-8", errors="replace") as f:
                config = paramiko.SSHConfig.from_text(f.read(1 << 20))
        except Exception as exc:  # paramiko raises several kinds for a bad line
            raise ConnectError("cannot read %s: %s" % (path, exc), permanent=True)
    dest_text, typed_port = split_typed(text) if user is None and port is None else (text, None)
    typed_user, at, host = dest_text.rpartition("@")
    options = config.lookup(host)
    as_g = {k: (v if isinstance(v, list) else [str(v)]) for k, v in options.items()}
    if user or at:
        as_g["user"] = [user or typed_user]
    if port or typed_port:
        as_g["port"] = [str(port or typed_port)]
    as_g.setdefault("identityfile", ["~/.ssh/" + name for name in DEFAULT_IDENTITIES])
    return _destination(text, host, as_g, environment)
