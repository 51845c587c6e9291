"""Real parts for tests: a non-root host user, real OpenSSH servers, a host Python.

The central tests/conftest.py loads it as a plugin (``pytest_plugins``); everything in
``__all__`` is then visible to every test.

Fixtures (all need root; the test process runs as root):

``host_user`` (session)
    The dedicated non-root account the agent runs as on the "host": ``HostUser`` with
    ``name``, ``uid``, ``gid``, ``home`` (Path) and ``run(argv, ...)`` (run a command as
    that user, locally, without SSH), ``kill_processes()``, ``reset_home()``.
    The account is ``specdeck-test`` (created once, reused). A session holds it
    exclusively through a lock file; a second pytest session running at the same time on
    the same machine gets ``specdeck-test1``, ``specdeck-test2``, ... so that one
    session's cleanup never kills another's daemons. Its HOME is emptied (back to
    /etc/skel) at session start, and every process of the user is killed at session
    start (left-overs of a crashed run) and at session end.

``host_python`` (session)
    Path (str) of the interpreter the agent runs on as that user: ``/usr/bin/python3``
    when it is 3.9+ and usable by the user, else the first usable python3 >= 3.9.
    root's own pyenv python (under /root) is not readable by the user and is not used.

``host_ml_python`` (session)
    Path (str) of a venv's python made from ``host_python`` with huggingface_hub,
    safetensors and numpy (``HOST_ML_REQUIREMENTS``). It lives in a world-readable
    directory keyed by a hash of the requirements and the base interpreter, is built
    once (under a lock) and reused by later sessions.

``ssh_keys`` (session)
    ``SshKeys``: the client key pair (``client_key``, ``client_key_pub``), the
    authorized_keys file of ``host_user`` and an unrelated ed25519 key
    (``wrong_host_key_pub``) for "the host key changed" tests.

``sshd`` (session)
    ``SshServer``: a real ``/usr/sbin/sshd -D -e -f CONF`` on 127.0.0.1 at a free port.
    Fields: ``host``, ``port``, ``user``, ``client_key`` (path str), ``host_key_pub``
    (``"ssh-ed25519 AAAA..."``), ``host_fingerprint`` (``"SHA256:..."``, as
    ``ssh-keygen -lf`` prints it), ``user_home``, ``log_path``, ``known_hosts_line``.
    Methods: ``client_home(tmp_path, known_hosts=True, wrong_host_key=False,
    alias="gpuhost")`` -> Path of a fresh laptop-side HOME with ``.ssh/config`` and
    ``.ssh/known_hosts``; ``connect(timeout=5, **kw)`` -> a connected paramiko
    SSHClient (strict host key checking); ``log_text()``; ``alive()``.

``netns_host`` (function) / ``netns_host_factory`` (function)
    ``NetnsHost``: the same fields and methods as ``SshServer``, for an sshd (port 22)
    inside its own network namespace, reached from the root namespace over a veth pair
    at ``host`` (e.g. 10.231.0.2; the root side is ``peer_address``, e.g. 10.231.0.1).
    ``cut()`` takes the root-side veth down (traffic stops both ways; processes in the
    namespace keep running and their files stay readable from here); ``restore()`` brings
    it back and waits until the sshd answers again; ``ns_run(argv)`` runs a command
    inside the namespace as root (e.g. iptables rules for packet loss). On teardown every
    process in the namespace is killed and the namespace and veth pair are removed, also
    after a failure. ``netns_host_factory()`` makes more than one per test. The netns
    host shares the user (and so HOME) with ``sshd``: it is the same machine.

``wait_for`` is tests/helpers/waits.py's, still exported here for the modules that import it
from here (new code imports it from tests.helpers.waits).
"""

import fcntl
import hashlib
import os
import pwd
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from tests.helpers.waits import wait_for

__all__ = [
    "HOST_ML_REQUIREMENTS",
    "TEST_USER_BASE",
    "HostUser",
    "NetnsHost",
    "SshKeys",
    "SshServer",
    "host_ml_python",
    "host_python",
    "host_user",
    "netns_host",
    "netns_host_factory",
    "ssh_keys",
    "sshd",
    "wait_for",
]

TEST_USER_BASE = "specdeck-test"
HOST_ML_REQUIREMENTS = ("huggingface_hub>=0.30", "safetensors>=0.4", "numpy>=1.24")

SSHD = "/usr/sbin/sshd"
LOCK_DIR = Path(tempfile.gettempdir()) / "specdeck-test-locks"
ML_VENV_ROOT = Path("/opt/specdeck-test")
NETNS_SLOTS = 64
USER_SLOTS = 16


# --------------------------------------------------------------------------- helpers


def _run(argv, check=True, **kw):
    kw.setdefault("stdout", subprocess.PIPE)
    kw.setdefault("stderr", subprocess.PIPE)
    kw.setdefault("stdin", subprocess.DEVNULL)
    kw.setdefault("text", True)
    res = subprocess.run(argv, **kw)
    if check and res.returncode != 0:
        raise RuntimeError(
            f"command failed ({res.returncode}): {' '.join(map(str, argv))}\n"
            f"stdout: {res.stdout}\nstderr: {res.stderr}")
    return res


def _require_root():
    if os.geteuid() != 0:
        pytest.skip("real sshd / netns fixtures need root")


def _lock_file(path, blocking):
    """Open and flock ``path``; return the open file or None when it is taken."""
    path.parent.mkdir(parents=True, exist_ok=True)
    f = open(path, "a+")
    try:
        fcntl.flock(f, fcntl.LOCK_EX | (0 if blocking else fcntl.LOCK_NB))
    except BlockingIOError:
        f.close()
        return None
    return f


def _proc_table():
    """{pid: (ppid, uid)} for every process visible in /proc."""
    table = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/status") as f:
                ppid = uid = None
                for line in f:
                    if line.startswith("PPid:"):
                        ppid = int(line.split()[1])
                    elif line.startswith("Uid:"):
                        uid = int(line.split()[1])
                        break
        except (FileNotFoundError, ProcessLookupError, PermissionError, ValueError):
            continue
        if ppid is not None and uid is not None:
            table[int(entry)] = (ppid, uid)
    return table


def _descendants(pid):
    table = _proc_table()
    children = {}
    for p, (pp, _) in table.items():
        children.setdefault(pp, []).append(p)
    out, todo = [], [pid]
    while todo:
        for c in children.get(todo.pop(), []):
            out.append(c)
            todo.append(c)
    return out


def _kill_pids(pids, grace_s=2.0):
    """SIGTERM, wait up to grace_s, SIGKILL what is left. Returns the pids still alive."""
    pids = [p for p in set(pids) if p != os.getpid()]
    for sig in (signal.SIGTERM, signal.SIGKILL):
        for p in pids:
            try:
                os.kill(p, sig)
            except ProcessLookupError:
                pass
        deadline = time.monotonic() + (grace_s if sig == signal.SIGTERM else 5.0)
        while time.monotonic() < deadline:
            pids = [p for p in pids if _pid_alive(p)]
            if not pids:
                return []
            time.sleep(0.02)
    return pids


def _pid_alive(pid):
    try:
        with open(f"/proc/{pid}/stat") as f:
            state = f.read().rsplit(")", 1)[1].split()[0]
        return state != "Z"
    except (FileNotFoundError, ProcessLookupError, IndexError):
        return False


def _ssh_keygen(path, comment):
    _run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", comment, "-f", str(path)])
    return Path(str(path) + ".pub").read_text().split()[:2]


def _fingerprint(pub_path):
    # "256 SHA256:abc... comment (ED25519)"
    return _run(["ssh-keygen", "-lf", str(pub_path)]).stdout.split()[1]


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _tail(path, n=80):
    try:
        lines = Path(path).read_text(errors="replace").splitlines()
    except FileNotFoundError:
        return "(no log file)"
    return "\n".join(lines[-n:])


# --------------------------------------------------------------------------- the user


class HostUser:
    """The non-root account the agent runs as; see the module docstring."""

    def __init__(self, name):
        pw = pwd.getpwnam(name)
        self.name = name
        self.uid = pw.pw_uid
        self.gid = pw.pw_gid
        self.home = Path(pw.pw_dir)

    def env(self, **extra):
        env = {
            "HOME": str(self.home),
            "USER": self.name,
            "LOGNAME": self.name,
            "PATH": "/usr/local/bin:/usr/bin:/bin",
            "LANG": "C.UTF-8",
        }
        env.update(extra)
        return env

    def run(self, argv, check=True, env=None, cwd=None, **kw):
        """Run ``argv`` as this user (locally, no SSH); returns CompletedProcess (text)."""
        return _run(argv, check=check, user=self.uid, group=self.gid, extra_groups=[],
                    env=self.env(**(env or {})), cwd=str(cwd or self.home), **kw)

    def pids(self):
        """Live processes of this user (zombies waiting for their parent do not count)."""
        return [p for p, (_, uid) in _proc_table().items()
                if uid == self.uid and _pid_alive(p)]

    def kill_processes(self):
        """Kill every process of this user (the `pkill -u USER` of the brief)."""
        left = []
        for _ in range(3):  # processes may fork while we kill; go round a few times
            left = _kill_pids(self.pids(), grace_s=1.0)
            if not self.pids():
                return
        raise RuntimeError(f"processes of {self.name} survived SIGKILL: {left}")

    def reset_home(self):
        """Empty HOME and put /etc/skel back (kill the user's processes first)."""
        self.home.mkdir(mode=0o755, exist_ok=True)
        for child in self.home.iterdir():
            if child.is_dir() and not child.is_symlink():
                shutil.rmtree(child)
            else:
                child.unlink()
        skel = Path("/etc/skel")
        if skel.is_dir():
            shutil.copytree(skel, self.home, dirs_exist_ok=True, symlinks=True)
        for root, dirs, files in os.walk(self.home):
            for n in dirs + files:
                os.lchown(os.path.join(root, n), self.uid, self.gid)
        os.chown(self.home, self.uid, self.gid)
        os.chmod(self.home, 0o755)


def _ensure_user(name):
    try:
        pwd.getpwnam(name)
    except KeyError:
        for attempt in range(20):  # useradd fails while another useradd holds /etc/passwd
            res = _run(["useradd", "-m", "-s", "/bin/bash", name], check=False)
            if res.returncode == 0:
                break
            if res.returncode == 9:  # name in use: created by someone else meanwhile
                break
            time.sleep(0.1 * (attempt + 1))
        else:
            raise RuntimeError(f"useradd {name} failed: {res.stderr}")
    # With UsePAM no, sshd refuses an account whose password field is "!" as locked.
    if _shadow_password(name) != "*":
        _run(["usermod", "-p", "*", name])


def _shadow_password(name):
    try:
        with open("/etc/shadow") as f:
            for line in f:
                fields = line.rstrip("\n").split(":")
                if fields[0] == name and len(fields) > 1:
                    return fields[1]
    except OSError:
        pass
    return None


@pytest.fixture(scope="session")
def host_user():
    _require_root()
    lock = None
    for slot in range(USER_SLOTS):
        lock = _lock_file(LOCK_DIR / f"user-{slot}.lock", blocking=False)
        if lock is not None:
            name = TEST_USER_BASE if slot == 0 else f"{TEST_USER_BASE}{slot}"
            break
    else:
        raise RuntimeError(f"all {USER_SLOTS} test user slots are taken")
    try:
        _ensure_user(name)
        user = HostUser(name)
        user.kill_processes()  # left-overs of a crashed earlier session on this slot
        user.reset_home()
        yield user
        user.kill_processes()
    finally:
        lock.close()


def _usable_python(user, path):
    try:
        res = user.run([path, "-c", "import sys; print(sys.version_info >= (3, 9))"],
                       check=False, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return res.returncode == 0 and res.stdout.strip() == "True"


@pytest.fixture(scope="session")
def host_python(host_user):
    candidates = ["/usr/bin/python3", "/usr/local/bin/python3"]
    for d in ("/usr/bin", "/usr/local/bin"):
        versions = []
        for p in Path(d).glob("python3.*"):
            suffix = p.name[len("python3."):]
            if suffix.isdigit():
                versions.append((int(suffix), str(p)))
        candidates += [p for _, p in sorted(versions, reverse=True)]
    base = getattr(sys, "_base_executable", None) or sys.executable
    candidates.append(os.path.realpath(base))
    tried = []
    for c in candidates:
        if c in tried or not os.path.exists(c):
            continue
        tried.append(c)
        if _usable_python(host_user, c):
            return c
    raise RuntimeError(f"no python3 >= 3.9 usable by {host_user.name}; tried {tried} "
                       "(install Debian's python3)")


@pytest.fixture(scope="session")
def host_ml_python(host_user, host_python):
    version = _run([host_python, "-c", "import sys; print(sys.version)"]).stdout.strip()
    key = hashlib.sha256(
        "\n".join([os.path.realpath(host_python), version, *HOST_ML_REQUIREMENTS]).encode()
    ).hexdigest()[:12]
    ML_VENV_ROOT.mkdir(parents=True, exist_ok=True)
    os.chmod(ML_VENV_ROOT, 0o755)
    venv = ML_VENV_ROOT / f"ml-venv-{key}"
    py = venv / "bin" / "python"
    marker = venv / ".specdeck-complete"
    lock = _lock_file(ML_VENV_ROOT / f"ml-venv-{key}.lock", blocking=True)
    try:
        if not marker.exists():
            if venv.exists():
                shutil.rmtree(venv)
            res = _run([host_python, "-m", "venv", str(venv)], check=False)
            if res.returncode == 0:
                _run([str(py), "-m", "pip", "install", "-q", "--disable-pip-version-check",
                      *HOST_ML_REQUIREMENTS], timeout=900)
            else:  # Debian without python3-venv: no ensurepip; install with our own pip
                if venv.exists():
                    shutil.rmtree(venv)
                _run([host_python, "-m", "venv", "--without-pip", str(venv)])
                _run([sys.executable, "-m", "pip", "--python", str(py), "install", "-q",
                      "--disable-pip-version-check", *HOST_ML_REQUIREMENTS], timeout=900)
            _run(["chmod", "-R", "a+rX", str(venv)])
            marker.write_text(" ".join(HOST_ML_REQUIREMENTS) + "\n")
    finally:
        lock.close()
    res = host_user.run([str(py), "-c", "import huggingface_hub, safetensors, numpy"],
                        check=False)
    if res.returncode != 0:
        raise RuntimeError(f"{py} is not usable by {host_user.name}: {res.stderr}")
    return str(py)


# --------------------------------------------------------------------------- keys


class SshKeys:
    """Client key pair, authorized_keys of the test user, a spare 'wrong' host key."""

    def __init__(self, directory, user):
        self.dir = Path(directory)
        os.chmod(self.dir, 0o755)  # sshd reads authorized_keys as the user
        self.client_key = str(self.dir / "client_ed25519")
        typ, b64 = _ssh_keygen(self.client_key, "specdeck-test-client")
        self.client_key_pub = f"{typ} {b64}"
        self.authorized_keys = self.dir / f"authorized_keys.{user.name}"
        self.authorized_keys.write_text(self.client_key_pub + "\n")
        os.chown(self.authorized_keys, user.uid, user.gid)
        os.chmod(self.authorized_keys, 0o600)
        self.authorized_keys_pattern = str(self.dir / "authorized_keys.%u")
        typ, b64 = _ssh_keygen(self.dir / "wrong_host_ed25519", "not-this-host")
        self.wrong_host_key_pub = f"{typ} {b64}"


@pytest.fixture(scope="session")
def ssh_keys(host_user):
    d = tempfile.mkdtemp(prefix="specdeck-keys-")
    try:
        yield SshKeys(d, host_user)
    finally:
        shutil.rmtree(d, ignore_errors=True)


# --------------------------------------------------------------------------- sshd

SSHD_CONFIG = """\
ListenAddress {listen}
Port {port}
HostKey {host_key}
AuthorizedKeysFile {authorized_keys}
PidFile {pid_file}
AllowUsers {user}
PermitRootLogin no
PubkeyAuthentication yes
PasswordAuthentication no
KbdInteractiveAuthentication no
UsePAM no
StrictModes no
UseDNS no
PrintMotd no
PrintLastLog no
X11Forwarding no
AllowTcpForwarding yes
MaxStartups 64:30:256
MaxSessions 64
LoginGraceTime 30
LogLevel VERBOSE
Subsystem sftp internal-sftp
"""


class SshServer:
    """A running sshd; see the module docstring for the fields."""

    def __init__(self, *, host, port, user, keys, confdir, host_key_pub, host_fingerprint,
                 proc, log_path, start_s):
        self.host = host
        self.port = port
        self.user = user.name
        self.user_home = user.home
        self.client_key = keys.client_key
        self.host_key_pub = host_key_pub
        self.host_fingerprint = host_fingerprint
        self.log_path = Path(log_path)
        self.confdir = Path(confdir)
        self.proc = proc
        self.start_s = start_s
        self._keys = keys
        # A known_hosts for callers of connect() here, outside any client HOME.
        self.known_hosts = self.confdir / "known_hosts"
        self.known_hosts.write_text(self.known_hosts_line + "\n")

    @property
    def host_spec(self):
        """How OpenSSH and paramiko name this host in known_hosts."""
        return self.host if self.port == 22 else f"[{self.host}]:{self.port}"

    @property
    def known_hosts_line(self):
        return f"{self.host_spec} {self.host_key_pub}"

    def client_home(self, tmp_path, known_hosts=True, wrong_host_key=False, alias="gpuhost"):
        """A fresh laptop-side HOME under tmp_path with .ssh/config (alias) and known_hosts.

        known_hosts=False leaves known_hosts empty (first contact); wrong_host_key=True
        records a different ed25519 key for this host (the "host key changed" case).
        """
        home = Path(tmp_path) / f"home-{alias}"
        n = 1
        while home.exists():
            n += 1
            home = Path(tmp_path) / f"home-{alias}-{n}"
        ssh = home / ".ssh"
        ssh.mkdir(parents=True, mode=0o700)
        os.chmod(ssh, 0o700)
        kh = ssh / "known_hosts"
        if wrong_host_key:
            kh.write_text(f"{self.host_spec} {self._keys.wrong_host_key_pub}\n")
        elif known_hosts:
            kh.write_text(self.known_hosts_line + "\n")
        else:
            kh.write_text("")
        os.chmod(kh, 0o600)
        # UserKnownHostsFile is spelled out because OpenSSH takes ~ from the passwd entry,
        # not from $HOME.
        cfg = ssh / "config"
        cfg.write_text(
            f"Host {alias}\n"
            f"    HostName {self.host}\n"
            f"    Port {self.port}\n"
            f"    User {self.user}\n"
            f"    IdentityFile {self.client_key}\n"
            f"    IdentitiesOnly yes\n"
            f"    UserKnownHostsFile {kh}\n"
            # Any other destination (user@address:port) as on a laptop whose home this is: ssh
            # reads ~ from the passwd entry, so the laptop's files are named here.
            f"Host *\n"
            f"    IdentityFile {self.client_key}\n"
            f"    UserKnownHostsFile {kh}\n"
        )
        os.chmod(cfg, 0o600)
        return home

    def connect(self, timeout=5.0, **kw):
        """A paramiko SSHClient connected as the test user, host key checked strictly."""
        import paramiko

        client = paramiko.SSHClient()
        client.load_host_keys(str(self.known_hosts))
        client.set_missing_host_key_policy(paramiko.RejectPolicy())
        args = dict(hostname=self.host, port=self.port, username=self.user,
                    key_filename=self.client_key, look_for_keys=False, allow_agent=False,
                    timeout=timeout, banner_timeout=timeout, auth_timeout=timeout)
        args.update(kw)
        try:
            client.connect(**args)
        except BaseException:
            client.close()
            raise
        return client

    def alive(self):
        return self.proc.poll() is None

    def log_text(self):
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def _stop(self):
        """Kill sshd and every process below it; raise with the log if it had died."""
        died_early = self.proc.poll() is not None
        pids = [self.proc.pid] + _descendants(self.proc.pid) if not died_early else []
        left = _kill_pids(pids)
        try:
            self.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            left.append(self.proc.pid)
        if died_early or left:
            why = (f"sshd exited early with {self.proc.returncode}" if died_early
                   else f"processes survived SIGKILL: {left}")
            raise AssertionError(f"sshd at {self.host}:{self.port}: {why}\n"
                                 f"--- sshd log ({self.log_path}) ---\n{_tail(self.log_path)}")

    def __repr__(self):
        return f"<{type(self).__name__} {self.user}@{self.host}:{self.port}>"


def _start_sshd(*, keys, user, confdir, listen, port, prefix=(), cls=SshServer, config_lines="", **extra):
    """Write a config (`config_lines` appended), start sshd in the foreground, wait until it listens."""
    confdir = Path(confdir)
    host_key = confdir / "host_ed25519"
    if not host_key.exists():
        _ssh_keygen(host_key, f"specdeck-test-host-{listen}")
    typ, b64 = Path(str(host_key) + ".pub").read_text().split()[:2]
    fingerprint = _fingerprint(str(host_key) + ".pub")
    conf = confdir / "sshd_config"
    conf.write_text(SSHD_CONFIG.format(
        listen=listen, port=port, host_key=host_key,
        authorized_keys=keys.authorized_keys_pattern, pid_file=confdir / "sshd.pid",
        user=user.name) + config_lines)
    os.makedirs("/run/sshd", mode=0o755, exist_ok=True)
    os.chmod("/run/sshd", 0o755)
    log_path = confdir / "sshd.log"
    t0 = time.monotonic()
    with open(log_path, "ab") as log:
        proc = subprocess.Popen([*prefix, SSHD, "-D", "-e", "-f", str(conf)],
                                stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                                start_new_session=True)
    ready = f"Server listening on {listen} port {port}"

    def listening():
        if proc.poll() is not None:
            return "exited"
        return ready in log_path.read_text(errors="replace")

    try:
        state = wait_for(listening, 10, interval_s=0.01, message=f"sshd: {ready!r}")
    except AssertionError:
        _kill_pids([proc.pid])
        raise AssertionError(f"sshd did not start listening\n--- sshd log ---\n{_tail(log_path)}")
    if state == "exited":
        proc.wait()
        return None, _tail(log_path)
    return cls(host=listen, port=port, user=user, keys=keys, confdir=confdir,
               host_key_pub=f"{typ} {b64}", host_fingerprint=fingerprint, proc=proc,
               log_path=log_path, start_s=time.monotonic() - t0, **extra), None


def _keep_or_remove(request, directory, server_log):
    if request.session.testsfailed:
        sys.__stderr__.write(f"\n[sshd_fixtures] tests failed; sshd log kept: {server_log}\n")
    else:
        shutil.rmtree(directory, ignore_errors=True)


@pytest.fixture(scope="session")
def sshd(request, host_user, ssh_keys):
    confdir = tempfile.mkdtemp(prefix="specdeck-sshd-")
    os.chmod(confdir, 0o755)
    server, log = None, None
    for _ in range(20):  # a free port can be taken between probing and binding
        server, log = _start_sshd(keys=ssh_keys, user=host_user, confdir=confdir,
                                  listen="127.0.0.1", port=_free_port())
        if server is not None or "Address already in use" not in (log or ""):
            break
    if server is None:
        raise AssertionError(f"sshd exited at start\n--- sshd log ---\n{log}")
    try:
        yield server
    finally:
        server._stop()
        _keep_or_remove(request, confdir, server.log_path)


# --------------------------------------------------------------------------- netns


class NetnsHost(SshServer):
    """An sshd inside a network namespace behind a veth pair; see the module docstring."""

    def __init__(self, *, netns, veth_host, veth_ns, peer_address, setup_s, **kw):
        super().__init__(**kw)
        self.netns = netns
        self.veth_host = veth_host
        self.veth_ns = veth_ns
        self.peer_address = peer_address
        self.setup_s = setup_s
        self.is_cut = False

    def cut(self):
        """Take the root-side veth down: no packet passes either way from now on."""
        _run(["ip", "link", "set", self.veth_host, "down"])
        self.is_cut = True

    def restore(self, timeout_s=10):
        """Bring the link back and wait until sshd answers on it again."""
        _run(["ip", "link", "set", self.veth_host, "up"])
        self.is_cut = False

        def answers():
            with socket.create_connection((self.host, self.port), timeout=1) as s:
                s.settimeout(1)
                return s.recv(64).startswith(b"SSH-")

        wait_for(answers, timeout_s, message=f"sshd at {self.host} after restore()",
                 ignore=(OSError,))

    def ns_run(self, argv, check=True, **kw):
        """Run a command as root inside the namespace (e.g. iptables)."""
        return _run(["ip", "netns", "exec", self.netns, *argv], check=check, **kw)

    def ns_pids(self):
        res = _run(["ip", "netns", "pids", self.netns], check=False)
        return [int(p) for p in res.stdout.split()] if res.returncode == 0 else []


def _netns_cleanup(ns, veth_host):
    """Kill everything in the namespace, delete it and the veth pair. Idempotent."""
    errors = []
    res = _run(["ip", "netns", "pids", ns], check=False)
    if res.returncode == 0:
        left = _kill_pids([int(p) for p in res.stdout.split()], grace_s=0.5)
        if left:
            errors.append(f"processes in {ns} survived SIGKILL: {left}")
    _run(["ip", "netns", "del", ns], check=False)
    _run(["ip", "link", "del", veth_host], check=False)
    if _run(["ip", "link", "show", veth_host], check=False).returncode == 0:
        errors.append(f"veth {veth_host} still exists")
    if ns in _run(["ip", "netns", "list"], check=False).stdout.split():
        errors.append(f"netns {ns} still exists")
    return errors


def _make_netns_host(request, keys, user):
    t0 = time.monotonic()
    lock = None
    for slot in range(NETNS_SLOTS):
        lock = _lock_file(LOCK_DIR / f"netns-{slot}.lock", blocking=False)
        if lock is not None:
            break
    else:
        raise RuntimeError(f"all {NETNS_SLOTS} netns slots are taken")
    ns, vh, vn = f"specdeck-ns{slot}", f"sdtest{slot}h", f"sdtest{slot}n"
    peer_addr, ns_addr = f"10.231.{slot}.1", f"10.231.{slot}.2"
    confdir = tempfile.mkdtemp(prefix=f"specdeck-netns{slot}-")
    os.chmod(confdir, 0o755)
    server = None
    try:
        _netns_cleanup(ns, vh)  # left-overs of a crashed run on this slot
        _run(["ip", "netns", "add", ns])
        _run(["ip", "link", "add", vh, "type", "veth", "peer", "name", vn])
        _run(["ip", "link", "set", vn, "netns", ns])
        _run(["ip", "addr", "add", f"{peer_addr}/30", "dev", vh])
        _run(["ip", "link", "set", vh, "up"])
        _run(["ip", "-n", ns, "addr", "add", f"{ns_addr}/30", "dev", vn])
        _run(["ip", "-n", ns, "link", "set", vn, "up"])
        _run(["ip", "-n", ns, "link", "set", "lo", "up"])
        server, log = _start_sshd(
            keys=keys, user=user, confdir=confdir, listen=ns_addr, port=22,
            prefix=("ip", "netns", "exec", ns), cls=NetnsHost, netns=ns, veth_host=vh,
            veth_ns=vn, peer_address=peer_addr, setup_s=0.0)
        if server is None:
            raise AssertionError(f"sshd in {ns} exited at start\n--- sshd log ---\n{log}")
        server.setup_s = time.monotonic() - t0
    except BaseException:
        if server is not None:
            _kill_pids([server.proc.pid])
        _netns_cleanup(ns, vh)
        shutil.rmtree(confdir, ignore_errors=True)
        lock.close()
        raise

    def teardown():
        try:
            died_early = server.proc.poll() is not None
            errors = _netns_cleanup(ns, vh)  # kills sshd too: it lives in the namespace
            try:
                server.proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                errors.append("sshd did not exit")
            if died_early:
                errors.insert(0, f"sshd exited early with {server.proc.returncode}")
            if errors:
                raise AssertionError(f"netns host {ns}: {'; '.join(errors)}\n"
                                     f"--- sshd log ({server.log_path}) ---\n"
                                     f"{_tail(server.log_path)}")
            _keep_or_remove(request, confdir, server.log_path)
        finally:
            lock.close()

    return server, teardown


@pytest.fixture
def netns_host_factory(request, host_user, ssh_keys):
    """Call it to get a fresh NetnsHost; all of them are removed at the end of the test."""
    teardowns = []

    def make():
        server, teardown = _make_netns_host(request, ssh_keys, host_user)
        teardowns.append(teardown)
        return server

    try:
        yield make
    finally:
        errors = []
        for teardown in reversed(teardowns):
            try:
                teardown()
            except Exception as exc:  # tear every one down, then report
                errors.append(str(exc))
        if errors:
            raise AssertionError("\n\n".join(errors))


@pytest.fixture
def netns_host(netns_host_factory):
    return netns_host_factory()
