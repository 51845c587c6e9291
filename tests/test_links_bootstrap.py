"""The agent's boot over its own exec channel, over a real sshd: on first contact the agent is
sent through the boot (no SFTP session), written 0600 in a 0700 directory and reused after; a
truncated or damaged copy on the host is replaced; the boot runs nothing from the directory the
exec starts in; the daemon the boot's relay starts runs from the zipapp. Both ways of linking:
in this process (the console's) and through the keeper (headless commands).
"""

import os
import signal
import stat
import tempfile
from pathlib import Path

import pytest

from tests.helpers.cli import daemon_pid, run_cli
from tests.helpers.keepers import keeper_pids
from tests.helpers.waits import wait_for
from tui.transport import bootstrap
from tui.transport.connection import open_client


@pytest.fixture
def cold(sshd, tmp_path, host_python, monkeypatch):
    """`cold("jobs", ...)`: a headless command through a keeper of this test's own, which is
    ended first, so that each call boots the agent on a new channel."""
    runtime_dir = Path(tempfile.mkdtemp(prefix="sd-rt-"))
    home = sshd.client_home(tmp_path)
    env = {"XDG_RUNTIME_DIR": str(runtime_dir)}

    def command(*args):
        run_cli("disconnect", home=home, env=env, check=0)
        wait_for(lambda: not keeper_pids(runtime_dir), 10, message="the keeper to end")
        return run_cli(args[0], "--python", host_python, *args[1:], home=home, env=env)

    yield command
    for pid in keeper_pids(runtime_dir):
        os.kill(pid, signal.SIGKILL)


def sftp_sessions(sshd):
    return sshd.log_text().count("subsystem 'sftp'")


def agent_path(host_user):
    name, _ = bootstrap.build_agent()
    return host_user.home / bootstrap.AGENT_DIR / name


def test_agent_sent_through_the_boot_on_first_contact_then_reused(cold, sshd, host_user):
    agents = host_user.home / bootstrap.AGENT_DIR
    host_user.run(["rm", "-rf", str(host_user.home / ".cache" / "specdeck" / "agents")])
    sftp_before = sftp_sessions(sshd)
    first = cold("jobs", "gpuhost")
    assert first.returncode == 0 and first.stderr == "", first.stderr
    agent = agent_path(host_user)
    assert agent.read_bytes() == bootstrap.build_agent()[1]
    assert stat.S_IMODE(agent.stat().st_mode) == 0o600 and stat.S_IMODE(agents.stat().st_mode) == 0o700
    assert agent.stat().st_uid == host_user.uid
    assert [p.name for p in agents.iterdir() if p.name.endswith(".partial")] == []
    mtime = agent.stat().st_mtime_ns
    again = cold("jobs", "gpuhost")
    assert again.returncode == 0, again.stderr
    assert agent.stat().st_mtime_ns == mtime  # not sent again
    assert sftp_sessions(sshd) == sftp_before


@pytest.mark.parametrize("damage", ["truncated", "one byte changed"])
def test_a_damaged_cached_agent_is_replaced(damage, cold, host_user):
    assert cold("jobs", "gpuhost").returncode == 0
    agent = agent_path(host_user)
    data = agent.read_bytes()
    if damage == "truncated":
        agent.write_bytes(data[: len(data) // 2])
    else:
        agent.write_bytes(data[:1000] + bytes([data[1000] ^ 1]) + data[1001:])
    result = cold("jobs", "gpuhost")
    assert result.returncode == 0 and result.stderr == "", result.stderr
    assert agent.read_bytes() == data


def test_the_console_link_boots_the_agent_too(laptop, host_python, host_user):
    host_user.run(["rm", "-rf", str(host_user.home / ".cache" / "specdeck" / "agents")])
    client = open_client("gpuhost", python=host_python)  # the console's way: no keeper
    try:
        assert client.call("ping")["time"] > 0
    finally:
        client.close()
    assert agent_path(host_user).read_bytes() == bootstrap.build_agent()[1]


def test_the_boot_runs_nothing_from_the_exec_directory(cold, host_user, host_python):
    # The exec starts in the user's home: a remote/ planted there must not run as the agent.
    marker = host_user.home / "planted-ran"
    package = host_user.home / "remote"
    host_user.run(["mkdir", "-p", str(package)])
    code = "open(%r, 'a').write('planted\\n')\n" % str(marker)
    for name in ("__init__.py", "__main__.py"):
        host_user.run([host_python, "-c", "import sys; open(sys.argv[1], 'w').write(sys.argv[2])", str(package / name), code])
    try:
        host_user.run(["rm", "-rf", str(host_user.home / ".cache" / "specdeck" / "agents")])
        first = cold("jobs", "gpuhost")  # sent through the boot
        cached = cold("jobs", "gpuhost")  # run from the cache
        assert first.returncode == 0 and cached.returncode == 0, first.stderr + cached.stderr
        assert not marker.exists()
    finally:
        host_user.run(["rm", "-rf", str(package), str(marker)])


def test_the_daemon_started_by_the_boots_relay_runs_from_the_zipapp(cold, host_user):
    state = host_user.home / ".cache" / "specdeck"
    pid = daemon_pid(state)
    if pid:
        os.kill(pid, signal.SIGTERM)
        wait_for(lambda: daemon_pid(state) is None, 10, message="the daemon to stop")
    assert cold("jobs", "gpuhost").returncode == 0
    pid = wait_for(lambda: daemon_pid(state), 10, message="a daemon")
    argv = Path("/proc/%d/cmdline" % pid).read_bytes().split(b"\0")
    assert str(agent_path(host_user)).encode() in argv and b"daemon" in argv


def test_the_laptop_keeps_its_last_build_and_builds_again_when_a_source_changes(tmp_path, monkeypatch):
    # A keeper's start reads the kept build instead of packing every source again; what it
    # ships is always what a fresh build of the sources as they are now would be.
    from tui.transport import agent_cache

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.setattr(bootstrap, "_built", {})
    fresh = bootstrap._build()
    assert bootstrap.build_agent() == fresh[:2]
    kept = Path(agent_cache.cache_dir())
    assert stat.S_IMODE(kept.stat().st_mode) == 0o700
    pyz = next(kept.glob("*.pyz"))
    bootstrap._built.clear()
    assert bootstrap.build_agent() == fresh[:2]  # read back
    pyz.write_bytes(pyz.read_bytes()[:-1] + b"\0")  # a damaged copy is never shipped
    bootstrap._built.clear()
    assert bootstrap.build_agent() == fresh[:2]
    # An edit of any source the build reads (here one of a stand-in package) is a new stamp.
    sources = tmp_path / "pkg"
    sources.mkdir()
    (sources / "a.py").write_text("x = 1\n")
    before = agent_cache.stamp([str(sources)], "1")
    (sources / "a.py").write_text("x = 22\n")
    assert agent_cache.stamp([str(sources)], "1") != before
    assert agent_cache.stamp([str(sources)], "2") != agent_cache.stamp([str(sources)], "1")
