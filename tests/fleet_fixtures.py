"""Real parts for tests of several hosts: a fleet on one machine.

tests/conftest.py loads it as a plugin (``pytest_plugins``); everything in ``__all__`` is then
visible to every test. All need root (real users, a real sshd).

``fleet_users`` (session)
    {"a": HostUser, "b": HostUser, "c": HostUser}: three accounts (``specdeck-fl<slot>a`` ...),
    each its own host: its own HOME, daemon, jobs and alerts. A session holds its slot through a
    lock file (a second pytest session gets the next slot); each account's processes are killed
    and its HOME emptied at session start, its processes killed at session end. User ``b``'s
    daemon replays the 8-GPU H200 NVML recording (tests/data): ``SPECDECK_NVML_REPLAY`` in its
    ``~/.ssh/environment``, which the fleet's sshd reads (``PermitUserEnvironment yes``), so it
    reaches the relay and the daemon the relay starts. ``REPLAYED_GPUS`` says how many.

``fleet_sshd`` (session)
    ``FleetSshd``: one real ``/usr/sbin/sshd`` on 127.0.0.1 that lets all three users in with the
    client key of ``ssh_keys`` (``port``, ``host_key_pub``, ``log_text()``).

``fleet_factory`` (function) / ``fleet`` (function)
    ``fleet_factory(slow=1, rtt_s=0.3, silent=1, silent_timeout_s=3.0, refused=1, unknown_key=1)``
    returns a ``Fleet``: the hosts of a laptop, each a ``FleetHost`` (``alias``, ``kind``,
    ``user`` (a HostUser or None), ``port``, ``rtt_s``, ``timeout_s`` (its ssh ConnectTimeout
    or None), ``expect`` (the state ``specdeck fleet`` gives it)), and a laptop ``home`` whose
    ~/.ssh/config names every alias, whose known_hosts knows the sshd's key (under the name
    every alias but the unknown-key one checks it by), and whose specdeck config remembers
    ``host_python`` as each host's agent interpreter and lists the hosts under ``[fleet]
    hosts``. Kinds: ``up`` (``gpu-a``, ``gpu-b`` (replayed GPUs), ``gpu-c``: the three users
    directly), ``slow`` (``slow-1`` ...: user ``c`` through tests/delay_proxy.py with ``rtt_s``),
    ``silent`` (``silent-1`` ...: a port that accepts TCP and never says a word; its
    ConnectTimeout is ``silent_timeout_s``), ``refused`` (``refused-1``: a port where nothing
    listens), ``unknown key`` (``unknown-key``: user ``a``, its host key checked under a name
    known_hosts does not have). ``Fleet.env`` is what ``run_cli(..., env=fleet.env)`` needs
    (HOME, XDG_CONFIG_HOME); ``Fleet.use(monkeypatch)`` makes this process that laptop (for the
    console's Pilot tests); ``Fleet.names(kind)`` the aliases of a kind, all when None.
    ``fleet`` is ``fleet_factory()``.
"""

import os
import socket
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

import pytest

from tests.delay_proxy import DelayProxy
from tests.helpers.waits import wait_for
from tests.sshd_fixtures import (LOCK_DIR, SSHD, SSHD_CONFIG, HostUser, _ensure_user, _fingerprint, _free_port, _keep_or_remove, _kill_pids,
                                 _lock_file, _require_root, _ssh_keygen, _tail)

__all__ = ["REPLAYED_GPUS", "FleetHost", "Fleet", "FleetSshd", "fleet", "fleet_factory", "fleet_sshd", "fleet_users"]

RECORDING = Path(__file__).resolve().parent / "data" / "nvml-h200.json.gz"
REPLAYED_GPUS = 8
USER_LETTERS = ("a", "b", "c")
SLOTS = 16
UNKNOWN_KEY_ALIAS = "fleet-host-key-nobody-knows"


# --------------------------------------------------------------------------- the users


@pytest.fixture(scope="session")
def fleet_users(ssh_keys):
    _require_root()
    for slot in range(SLOTS):
        lock = _lock_file(LOCK_DIR / ("fleet-%d.lock" % slot), blocking=False)
        if lock is not None:
            break
    else:
        raise RuntimeError("all %d fleet user slots are taken" % SLOTS)
    users = {}
    try:
        for letter in USER_LETTERS:
            name = "specdeck-fl%d%s" % (slot, letter)
            _ensure_user(name)
            user = users[letter] = HostUser(name)
            user.kill_processes()  # left-overs of a crashed session on this slot
            user.reset_home()
            # sshd reads authorized_keys as the user: owned by it, 0600 (AuthorizedKeysFile .../authorized_keys.%u).
            keys = Path(ssh_keys.authorized_keys_pattern.replace("%u", name))
            keys.write_text(ssh_keys.client_key_pub + "\n")
            os.chown(keys, user.uid, user.gid)
            os.chmod(keys, 0o600)
        _write_user_file(users["b"], ".ssh/environment", "SPECDECK_NVML_REPLAY=%s:%d\n" % (RECORDING, REPLAYED_GPUS))
        yield users
    finally:
        for user in users.values():
            user.kill_processes()
        lock.close()


def _write_user_file(user, relative, text):
    path = user.home / relative
    path.parent.mkdir(mode=0o700, exist_ok=True)
    os.chown(path.parent, user.uid, user.gid)
    path.write_text(text)
    os.chown(path, user.uid, user.gid)
    os.chmod(path, 0o600)


# --------------------------------------------------------------------------- one sshd for all


class FleetSshd:
    """A running sshd that lets every fleet user in."""

    def __init__(self, port, host_key_pub, proc, log_path):
        self.host = "127.0.0.1"
        self.port = port
        self.host_key_pub = host_key_pub
        self.proc = proc
        self.log_path = Path(log_path)

    @property
    def known_hosts_name(self):
        return "[%s]:%d" % (self.host, self.port)

    def log_text(self):
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""


@pytest.fixture(scope="session")
def fleet_sshd(request, fleet_users, ssh_keys):
    confdir = Path(tempfile.mkdtemp(prefix="specdeck-fleet-sshd-"))
    os.chmod(confdir, 0o755)
    host_key = confdir / "host_ed25519"
    key_type, key_b64 = _ssh_keygen(host_key, "specdeck-fleet-host")
    os.makedirs("/run/sshd", mode=0o755, exist_ok=True)
    log_path = confdir / "sshd.log"
    server = None
    for _ in range(20):  # a free port can be taken between probing and binding
        port = _free_port()
        conf = confdir / "sshd_config"
        conf.write_text(SSHD_CONFIG.format(listen="127.0.0.1", port=port, host_key=host_key,
                                           authorized_keys=ssh_keys.authorized_keys_pattern, pid_file=confdir / "sshd.pid",
                                           user=" ".join(u.name for u in fleet_users.values()))
                        + "PermitUserEnvironment yes\n")
        with open(log_path, "ab") as log:
            proc = subprocess.Popen([SSHD, "-D", "-e", "-f", str(conf)], stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                                    start_new_session=True)
        ready = "Server listening on 127.0.0.1 port %d" % port
        state = wait_for(lambda: "exited" if proc.poll() is not None else ready in log_path.read_text(errors="replace"), 10,
                         interval_s=0.01, message="the fleet's sshd: %r" % ready)
        if state != "exited":
            server = FleetSshd(port, "%s %s" % (key_type, key_b64), proc, log_path)
            break
        if "Address already in use" not in _tail(log_path):
            break
    if server is None:
        raise AssertionError("the fleet's sshd did not start\n--- sshd log ---\n%s" % _tail(log_path))
    assert _fingerprint(str(host_key) + ".pub").startswith("SHA256:")
    try:
        yield server
    finally:
        _kill_pids([proc.pid])
        _keep_or_remove(request, confdir, log_path)


# --------------------------------------------------------------------------- a laptop's fleet


@dataclass
class FleetHost:
    alias: str
    kind: str  # up, slow, silent, refused, unknown key
    user: Optional[HostUser]
    port: int
    expect: str  # the state `specdeck fleet` gives it
    rtt_s: float = 0.0
    timeout_s: Optional[float] = None  # its ssh ConnectTimeout, when the config gives one


class Fleet:
    """A laptop's hosts; see the module docstring."""

    def __init__(self, hosts, home, python):
        self.hosts = hosts
        self.home = home
        self.python = python
        self.config_home = home / ".config"
        self.env = {"HOME": str(home), "XDG_CONFIG_HOME": str(self.config_home),
                    "SPECDECK_SSH_CONFIG": str(home / ".ssh" / "config")}

    def host(self, alias):
        return next(h for h in self.hosts if h.alias == alias)

    def names(self, kind=None):
        return [h.alias for h in self.hosts if kind is None or h.kind == kind]

    def use(self, monkeypatch):
        """Make this process the fleet's laptop (HOME, config, no ssh-agent)."""
        for name, value in self.env.items():
            monkeypatch.setenv(name, value)
        monkeypatch.delenv("SSH_AUTH_SOCK", raising=False)
        return self.home


class _Silent:
    """A port that accepts TCP connections (the kernel's backlog) and never says a word."""

    def __init__(self):
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(64)
        self.port = self.sock.getsockname()[1]

    def stop(self):
        self.sock.close()


@pytest.fixture
def fleet_factory(tmp_path, fleet_sshd, fleet_users, ssh_keys, host_python):
    made = []

    def make(slow=1, rtt_s=0.3, silent=1, silent_timeout_s=3.0, refused=1, unknown_key=1):
        hosts = [FleetHost("gpu-%s" % letter, "up", fleet_users[letter], fleet_sshd.port, "up") for letter in USER_LETTERS]
        for n in range(1, slow + 1):
            proxy = DelayProxy(fleet_sshd.port, rtt_s=rtt_s)
            made.append(proxy)
            hosts.append(FleetHost("slow-%d" % n, "slow", fleet_users["c"], proxy.port, "up", rtt_s=rtt_s))
        for n in range(1, silent + 1):
            port = _Silent()
            made.append(port)
            hosts.append(FleetHost("silent-%d" % n, "silent", None, port.port, "timed out", timeout_s=silent_timeout_s))
        for n in range(1, refused + 1):
            hosts.append(FleetHost("refused-%d" % n, "refused", None, _free_port(), "refused"))
        if unknown_key:
            hosts.append(FleetHost("unknown-key", "unknown key", fleet_users["a"], fleet_sshd.port, "unknown host key"))
        home = Path(tempfile.mkdtemp(prefix="laptop-", dir=str(tmp_path)))
        _write_laptop(home, hosts, fleet_sshd, ssh_keys.client_key, host_python)
        return Fleet(hosts, home, host_python)

    yield make
    for thing in made:
        thing.stop()


def _write_laptop(home, hosts, sshd, client_key, host_python):
    from tui import config

    ssh = home / ".ssh"
    ssh.mkdir(mode=0o700)
    known_hosts = ssh / "known_hosts"
    known_hosts.write_text("%s %s\n" % (sshd.known_hosts_name, sshd.host_key_pub))
    lines = []
    for host in hosts:
        lines += ["Host %s" % host.alias, "    HostName 127.0.0.1", "    Port %d" % host.port,
                  "    User %s" % (host.user.name if host.user else "nobody"), "    IdentityFile %s" % client_key,
                  "    IdentitiesOnly yes", "    UserKnownHostsFile %s" % known_hosts]
        # Through a proxy the port differs, the host does not: its key is checked under the sshd's name.
        lines.append("    HostKeyAlias %s" % (UNKNOWN_KEY_ALIAS if host.kind == "unknown key" else sshd.known_hosts_name))
        if host.timeout_s:
            lines.append("    ConnectTimeout %g" % host.timeout_s)
    (ssh / "config").write_text("\n".join(lines) + "\n")
    for path in (ssh / "config", known_hosts):
        os.chmod(path, 0o600)
    path = str(home / ".config" / "specdeck" / "config.toml")
    config.save({"hosts": {h.alias: {"agent_python": host_python} for h in hosts}, "fleet": {"hosts": [h.alias for h in hosts]}}, path)


@pytest.fixture
def fleet(fleet_factory):
    return fleet_factory()
