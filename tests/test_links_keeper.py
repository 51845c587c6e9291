"""Links kept warm between headless commands, over a real sshd with real keeper processes: the
second command reuses the first one's SSH link (one login for both), a keeper killed with
SIGKILL or a link cut on the host's side is replaced without a word to the user, one stopped
with SIGSTOP is passed by at once, `[links] keep` ends the keeper and its socket, `specdeck
disconnect` ends a link now, another user can neither reach the socket nor, when the directory
is opened to them, be served by it, nor lock the commands out with a directory made first, an
unknown host key is refused through the keeper with the same one line, and the console takes a
warm link only when the keeper holds one.

Each test has its own XDG_RUNTIME_DIR, also its commands' TMPDIR (so its own keeper wherever
the socket goes); the keepers it started are killed at its end, found by that directory in
their command line.
"""

import json
import os
import signal
import socket
import stat
import sys
import tempfile
from pathlib import Path

import pytest

from tests.helpers.cli import run_cli, use_home
from tests.helpers.keepers import keeper_pids
from tests.helpers.waits import wait_for


class Laptop:
    """A laptop-side user of the loopback sshd with a runtime directory of its own."""

    def __init__(self, sshd, home, runtime_dir, host_python):
        self.sshd, self.home, self.runtime_dir, self.host_python = sshd, home, runtime_dir, host_python

    def cli(self, *args, check=None, python=True, env=None, timeout=120):
        extra = ("--python", self.host_python) if python and args[0] != "disconnect" else ()
        env = {"XDG_RUNTIME_DIR": str(self.runtime_dir), "TMPDIR": str(self.runtime_dir), **(env or {})}
        return run_cli(args[0], *extra, *args[1:], home=self.home, env=env, check=check, timeout=timeout)

    def logins(self):
        return self.sshd.log_text().count("Accepted publickey for %s " % self.sshd.user)

    def sockets(self):
        directory = self.runtime_dir / "specdeck"
        return sorted(p.name for p in directory.iterdir() if p.name.endswith(".sock")) if directory.exists() else []

    def status(self, monkeypatch):
        use_home(monkeypatch, self.home)
        monkeypatch.setenv("XDG_RUNTIME_DIR", str(self.runtime_dir))
        from tui.transport import links

        return links.request({"op": "status"})


@pytest.fixture
def laptop_user(sshd, tmp_path, host_python):
    runtime_dir = Path(tempfile.mkdtemp(prefix="sd-rt-"))  # short: a socket path holds ~107 bytes
    home = sshd.client_home(tmp_path)
    yield Laptop(sshd, home, runtime_dir, host_python)
    for pid in keeper_pids(runtime_dir):
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    wait_for(lambda: not keeper_pids(runtime_dir), 10, message="the test's keepers to die")


def jobs_ok(laptop):
    result = laptop.cli("jobs", "gpuhost", "--json")
    assert result.returncode == 0, result.stderr
    assert result.stderr == ""
    return json.loads(result.stdout)


def test_second_command_reuses_the_link(laptop_user, monkeypatch):
    before = laptop_user.logins()
    jobs_ok(laptop_user)
    assert laptop_user.logins() == before + 1
    [keeper] = keeper_pids(laptop_user.runtime_dir)
    jobs_ok(laptop_user)
    run = laptop_user.cli("run", "gpuhost", "--json", "--", "true", check=0)
    assert json.loads(run.stdout)["id"]
    assert laptop_user.logins() == before + 1  # three commands, one login
    assert keeper_pids(laptop_user.runtime_dir) == [keeper]
    [link] = laptop_user.status(monkeypatch)["links"]
    assert link["host"] == "gpuhost" and link["alive"] and link["dest"].endswith(":%d" % laptop_user.sshd.port)


def test_two_relays_wait_ready_so_commands_back_to_back_each_find_one(laptop_user, host_user, monkeypatch):
    jobs_ok(laptop_user)
    python = laptop_user.host_python

    def spares():
        [link] = laptop_user.status(monkeypatch)["links"]
        return link["spares"].get(python, 0)

    wait_for(lambda: spares() == 2, 30, message="two relays ready")
    relays = [pid for pid in host_user.pids() if b"--if-running" in Path("/proc/%d/cmdline" % pid).read_bytes()]
    assert len(relays) >= 2  # on the host, relays idle for the next commands (an ended test's may still be exiting)
    jobs_ok(laptop_user)
    jobs_ok(laptop_user)  # back to back: the second took the other ready relay
    wait_for(lambda: spares() == 2, 30, message="the two used relays replaced")


def test_a_relay_held_by_a_long_command_is_replaced_while_it_runs(laptop_user, monkeypatch):
    """A relay taken is replaced once its command ends, or a moment after it was taken where the
    command goes on (a followed log): the next commands still find two ready."""
    jobs_ok(laptop_user)
    python = laptop_user.host_python

    def spares():
        [link] = laptop_user.status(monkeypatch)["links"]
        return link["spares"].get(python, 0)

    wait_for(lambda: spares() == 2, 30, message="two relays ready")
    from tui.transport import links

    held = links.keeper_link("gpuhost", python, False, warm_only=True)
    assert held is not None
    try:
        wait_for(lambda: spares() == 2, 30, message="the held relay replaced while its command runs")
    finally:
        held.close()
    jobs_ok(laptop_user)
    wait_for(lambda: spares() == 2, 30, message="the next command's relay replaced after it")


def test_killed_keeper_is_replaced_and_the_next_command_says_nothing(laptop_user):
    jobs_ok(laptop_user)
    [killed] = keeper_pids(laptop_user.runtime_dir)
    os.kill(killed, signal.SIGKILL)
    wait_for(lambda: killed not in keeper_pids(laptop_user.runtime_dir), 10, message="the keeper to die")
    assert laptop_user.sockets()  # the killed keeper's socket is still there, listened to by no one
    jobs_ok(laptop_user)  # nothing on stderr
    [replacement] = keeper_pids(laptop_user.runtime_dir)
    assert replacement != killed


def test_a_link_cut_on_the_host_side_is_replaced_without_an_error(laptop_user, host_user):
    jobs_ok(laptop_user)
    logins = laptop_user.logins()
    # The keeper's SSH session on the host: kill it there, as a host reboot or a firewall would.
    sessions = [pid for pid in host_user.pids() if Path("/proc/%d/cmdline" % pid).read_bytes().startswith(b"sshd:")]
    assert sessions
    for pid in sessions:
        os.kill(pid, signal.SIGKILL)
    jobs_ok(laptop_user)
    assert laptop_user.logins() == logins + 1


def test_keep_from_the_config_ends_the_keeper_and_its_socket(laptop_user, private_laptop_config):
    (private_laptop_config / "specdeck").mkdir(parents=True)
    (private_laptop_config / "specdeck" / "config.toml").write_text('[links]\nkeep = "2s"\n')
    jobs_ok(laptop_user)
    assert keeper_pids(laptop_user.runtime_dir) and laptop_user.sockets()
    wait_for(lambda: not keeper_pids(laptop_user.runtime_dir), 30, message="the keeper to end after keep = 2s")
    assert laptop_user.sockets() == []


def test_disconnect_ends_the_link_now(laptop_user):
    nothing = laptop_user.cli("disconnect", "gpuhost", check=0)
    assert "nothing to close" in nothing.stdout
    jobs_ok(laptop_user)
    logins = laptop_user.logins()
    closed = laptop_user.cli("disconnect", "gpuhost", "--json", check=0)
    reply = json.loads(closed.stdout)
    assert [c["host"] for c in reply["closed"]] == ["gpuhost"]
    jobs_ok(laptop_user)
    assert laptop_user.logins() == logins + 1  # the link was really gone: a new login
    ended = laptop_user.cli("disconnect", check=0)
    assert "ended the link keeper" in ended.stdout and "gpuhost" in ended.stdout
    wait_for(lambda: not keeper_pids(laptop_user.runtime_dir), 10, message="the keeper to end")
    assert laptop_user.sockets() == []


def test_another_user_cannot_use_the_keeper(laptop_user, host_user, host_python):
    jobs_ok(laptop_user)
    [name] = laptop_user.sockets()
    path = laptop_user.runtime_dir / "specdeck" / name
    probe = (
        "import socket, sys\n"
        "s = socket.socket(socket.AF_UNIX)\n"
        "try:\n"
        "    s.connect(sys.argv[1])\n"
        "except OSError as exc:\n"
        "    print('connect:', exc.strerror); sys.exit(0)\n"
        "s.settimeout(10)\n"  # the keeper answers a stranger before reading a request
        "print('reply:', s.makefile().readline().strip())\n"
    )
    assert host_user.run([host_python, "-c", probe, str(path)]).stdout.strip() == "connect: Permission denied"
    # Opened to others by mistake: the keeper still serves only its own user (SO_PEERCRED)...
    for directory in (laptop_user.runtime_dir, laptop_user.runtime_dir / "specdeck"):
        directory.chmod(0o755)
    path.chmod(0o777)
    answered = host_user.run([host_python, "-c", probe, str(path)]).stdout.strip()
    assert answered.startswith("reply: ")
    reply = json.loads(answered[len("reply: "):])
    assert reply["ok"] is False and "refused" in reply["error"]["message"]
    # ...and a command of its own user never uses a directory others may open: it keeps its
    # links in a private one instead, without a word.
    served = laptop_user.cli("jobs", "gpuhost", "--json")
    assert served.returncode == 0 and served.stderr == "", served.stderr
    assert len(keeper_pids(laptop_user.runtime_dir)) == 2
    private = laptop_user.runtime_dir / ("specdeck-links-%d" % os.getuid())
    assert [p.name for p in private.iterdir() if p.name.endswith(".sock")] == [name]
    assert stat.S_IMODE(private.stat().st_mode) == 0o700


def test_a_link_directory_made_first_by_someone_else_locks_no_one_out(laptop_user):
    """/tmp/specdeck-links-UID made by another user (who alone may remove it): the commands keep
    their links in a private directory of their own state directory, and the next command finds
    the same keeper."""
    squatted = laptop_user.runtime_dir / ("specdeck-links-%d" % os.getuid())  # the commands' TMPDIR
    squatted.mkdir(mode=0o777)
    os.chown(squatted, 65534, 65534)
    env = {"XDG_RUNTIME_DIR": "", "XDG_STATE_HOME": str(laptop_user.runtime_dir / "st")}
    before = laptop_user.logins()
    for _ in range(2):
        result = laptop_user.cli("jobs", "gpuhost", "--json", env=env)
        assert result.returncode == 0 and result.stderr == "", result.stderr
    assert laptop_user.logins() == before + 1  # the second command took the first one's link
    assert len(keeper_pids(laptop_user.runtime_dir)) == 1
    assert list(squatted.iterdir()) == []
    private = laptop_user.runtime_dir / "st" / "specdeck" / "links"
    assert private.stat().st_uid == os.getuid() and stat.S_IMODE(private.stat().st_mode) == 0o700
    assert [p.name for p in private.iterdir() if p.name.endswith(".sock")]


SWAPPER = r"""
import os, socket, sys, time
tmp, name, sock_name, record, seconds = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4], float(sys.argv[5])
target = os.path.join(tmp, name)
end = time.time() + seconds
n = 0
with open(record, "a") as out:
    while time.time() < end:
        n += 1
        mine = os.path.join(tmp, "swap-%d" % n)
        os.mkdir(mine, 0o700)
        listener = socket.socket(socket.AF_UNIX)
        listener.bind(os.path.join(mine, sock_name))
        listener.listen(16)
        listener.settimeout(0.02)
        # Whatever is at a name the commands may use (the fixed one, or one made afresh beside
        # it) goes, and ours takes its place.
        names = [target] + [os.path.join(tmp, e) for e in os.listdir(tmp) if e.startswith(name + "-")]
        for victim in names:
            try:
                os.rename(victim, os.path.join(tmp, "gone-%d-%s" % (n, os.path.basename(victim))))
            except OSError:
                pass
        try:
            os.rename(mine, names[-1])
        except OSError:
            pass
        try:
            conn, _ = listener.accept()
            conn.settimeout(1)
            try:
                got = conn.recv(65536)
            except OSError:
                got = b""
            out.write("connected %d bytes: %r\n" % (len(got), got[:200]))
            out.flush()
        except socket.timeout:
            pass
        listener.close()
"""


def test_a_second_user_who_owns_tmpdir_and_swaps_the_directory_reaches_nothing(laptop_user, host_user, host_python):
    """TMPDIR belongs to another user, who renames the links directory away and puts their own,
    with a listening socket of the keeper's name, in its place, over and over: the commands
    never use that TMPDIR, and nothing of theirs (a request, the environment) reaches the other
    user's socket; every command lands on the host."""
    import subprocess

    laptop_user.runtime_dir.chmod(0o755)  # the other user may pass through to their directory
    shared = laptop_user.runtime_dir / "shared"
    shared.mkdir()
    os.chown(shared, host_user.uid, host_user.gid)
    shared.chmod(0o777)
    env = {"XDG_RUNTIME_DIR": "", "TMPDIR": str(shared), "XDG_STATE_HOME": str(laptop_user.runtime_dir / "st"),
           "HF_TOKEN": "hf_secret_of_the_laptop"}
    probe = run_cli("config", "--help", home=laptop_user.home)  # an ordinary start, nothing connects
    assert probe.returncode == 0
    from tests.helpers.cli import REPO_ROOT, ssh_config_env

    identity_env = dict(os.environ, PYTHONPATH=str(REPO_ROOT), **ssh_config_env(laptop_user.home), **env)
    sock_name = "keeper-%s.sock" % subprocess.run(
        [sys.executable, "-c", "from tui.transport.keeper_socket import identity; print(identity())"],
        capture_output=True, text=True, env=identity_env, cwd=str(REPO_ROOT), check=True).stdout.strip()
    record = shared / "caught.txt"
    record.touch()
    os.chown(record, host_user.uid, host_user.gid)
    swapper = subprocess.Popen([host_python, "-c", SWAPPER, str(shared), "specdeck-links-%d" % os.getuid(), sock_name, str(record), "60"],
                               user=host_user.uid, group=host_user.gid, extra_groups=[], cwd=str(shared),
                               stderr=subprocess.PIPE, text=True)
    try:
        wait_for(lambda: swapper.poll() is not None or any(p.name == "specdeck-links-%d" % os.getuid() for p in shared.iterdir()),
                 10, message="the other user's swapping")
        assert swapper.poll() is None, swapper.stderr.read()
        before = laptop_user.logins()
        for _ in range(4):
            result = laptop_user.cli("jobs", "gpuhost", "--json", env=env)
            assert result.returncode == 0 and result.stderr == "", result.stderr
        assert laptop_user.logins() >= before + 1  # the host's own word: the commands landed there
    finally:
        swapper.kill()
        swapper.wait()
    assert record.read_text() == ""
    assert stat.S_IMODE((laptop_user.runtime_dir / "st" / "specdeck" / "links").stat().st_mode) == 0o700


def test_nothing_is_sent_to_a_keeper_socket_another_user_holds(laptop_user, host_user, host_python):
    """Whatever the directories said, a socket whose peer is another user is told nothing."""
    import subprocess

    from remote.core.peer import NotOurs, connect_own

    laptop_user.runtime_dir.chmod(0o755)
    place = laptop_user.runtime_dir / "theirs"
    place.mkdir()
    os.chown(place, host_user.uid, host_user.gid)
    path = place / "keeper.sock"
    record = place / "caught.txt"
    listener = subprocess.Popen([host_python, "-c", (
        "import socket, sys\n"
        "s = socket.socket(socket.AF_UNIX); s.bind(sys.argv[1]); s.listen(1)\n"
        "import os; os.chmod(sys.argv[1], 0o777); print('ready', flush=True)\n"
        "total = 0\n"
        "for _ in range(2):\n"
        "    c, _ = s.accept(); c.settimeout(3)\n"
        "    try:\n        total += len(c.recv(100))\n    except OSError:\n        pass\n"
        "open(sys.argv[2], 'w').write('%d' % total)\n"), str(path), str(record)],
        user=host_user.uid, group=host_user.gid, extra_groups=[], stdout=subprocess.PIPE, text=True)
    try:
        assert listener.stdout.readline().strip() == "ready"
        with pytest.raises(NotOurs, match="uid %d" % host_user.uid):
            connect_own(str(path), 5)
        from tui.transport import links

        with pytest.raises(links.KeeperStuck):
            links._connect(str(path))
        listener.wait(10)
    finally:
        listener.kill()
    assert record.read_text() == "0"


def test_a_stopped_keeper_is_passed_by_and_the_command_connects_itself(laptop_user):
    jobs_ok(laptop_user)
    [keeper] = keeper_pids(laptop_user.runtime_dir)
    logins = laptop_user.logins()
    os.kill(keeper, signal.SIGSTOP)
    try:
        # Well under the 90 s a command waits for a keeper that greeted and is connecting.
        result = laptop_user.cli("jobs", "gpuhost", "--json", timeout=30)
        assert result.returncode == 0 and result.stderr == "", result.stderr
        assert laptop_user.logins() == logins + 1  # a link of its own
        assert keeper_pids(laptop_user.runtime_dir) == [keeper]  # no second keeper beside it
        assert Path("/proc/%d/stat" % keeper).read_text().rsplit(")", 1)[1].split()[0] == "T"  # stopped throughout
    finally:
        os.kill(keeper, signal.SIGCONT)
    jobs_ok(laptop_user)  # going again, it serves again
    assert laptop_user.logins() == logins + 1


def test_unknown_host_key_refused_through_the_keeper(sshd, tmp_path, host_python, laptop_user):
    laptop_user.home = sshd.client_home(tmp_path, known_hosts=False)
    known_hosts = laptop_user.home / ".ssh" / "known_hosts"
    refused = laptop_user.cli("jobs", "gpuhost")
    assert refused.returncode == 2
    [line] = refused.stderr.strip().splitlines()
    assert line.startswith("specdeck: unknown host key for") and sshd.host_fingerprint in line and "--accept-new" in line
    assert known_hosts.read_text() == ""
    again = laptop_user.cli("jobs", "gpuhost")  # the keeper holds nothing for that host: refused again
    assert again.returncode == 2 and again.stderr == refused.stderr
    accepted = laptop_user.cli("jobs", "gpuhost", "--accept-new")
    assert accepted.returncode == 0, accepted.stderr
    assert sshd.host_key_pub.split()[1] in known_hosts.read_text()


def test_the_console_takes_the_keepers_link_only_when_warm(laptop_user, monkeypatch):
    from tui.transport.client import AgentClient
    from tui.transport.connection import link_factory
    from tui.transport.links import KeeperLink

    use_home(monkeypatch, laptop_user.home)
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(laptop_user.runtime_dir))
    monkeypatch.delenv("SSH_AUTH_SOCK", raising=False)
    cold = AgentClient(link_factory("gpuhost", python=laptop_user.host_python, keeper="warm")).start()
    try:
        assert not isinstance(cold.link, KeeperLink)
        assert keeper_pids(laptop_user.runtime_dir) == []  # "warm" never starts a keeper
    finally:
        cold.close()
    jobs_ok(laptop_user)
    logins = laptop_user.logins()
    warm = AgentClient(link_factory("gpuhost", python=laptop_user.host_python, keeper="warm")).start()
    try:
        assert isinstance(warm.link, KeeperLink)
        assert warm.call("ping")["time"] > 0
        assert laptop_user.logins() == logins
    finally:
        warm.close()


def test_spare_relay_never_brings_a_stopped_daemon_back(laptop_user, host_user, monkeypatch):
    from tests.helpers.cli import daemon_pid

    jobs_ok(laptop_user)
    stopped = laptop_user.cli("daemon", "stop", "gpuhost", "--json", check=0)
    assert json.loads(stopped.stdout)["was_running"] is True
    state = host_user.home / ".cache" / "specdeck"
    # The keeper prepares a spare relay after every command, the stop too: once it is done, no
    # daemon runs (a spare never starts one).
    wait_for(lambda: not laptop_user.status(monkeypatch)["links"][0]["preparing"], 30, message="the spare to be ready")
    wait_for(lambda: daemon_pid(state) is None, 10, message="the daemon to stop")
    sock = socket.socket(socket.AF_UNIX)
    assert sock.connect_ex(str(state / "daemon.sock")) != 0
    sock.close()
    jobs_ok(laptop_user)  # a command starts it again, as without a keeper
    assert daemon_pid(state) is not None
