"""The real-parts fixtures work with real clients: paramiko and OpenSSH's ssh."""

import base64
import hashlib
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

_ROOT = str(Path(__file__).resolve().parents[1])
if _ROOT not in sys.path:  # `pytest` (not `python -m pytest`) does not put the root there
    sys.path.insert(0, _ROOT)

# The central conftest loads the fixtures as a plugin; import them here only when it did not,
# else this module would get its own second set of session fixtures (a second sshd).
_FROM_CONFTEST = "tests.sshd_fixtures" in sys.modules
from tests import sshd_fixtures as fx  # noqa: E402
from tests.helpers.waits import wait_for

if not _FROM_CONFTEST:
    from tests.sshd_fixtures import *  # noqa: E402,F401,F403

paramiko = pytest.importorskip("paramiko")


def _exec(client, command, timeout=10):
    _, out, err = client.exec_command(command, timeout=timeout)
    status = out.channel.recv_exit_status()
    return status, out.read().decode(), err.read().decode()


def _client_for_home(server, home, timeout=5):
    client = paramiko.SSHClient()
    client.load_host_keys(str(home / ".ssh" / "known_hosts"))
    client.set_missing_host_key_policy(paramiko.RejectPolicy())
    client.connect(server.host, port=server.port, username=server.user,
                   key_filename=server.client_key, look_for_keys=False, allow_agent=False,
                   timeout=timeout, banner_timeout=timeout, auth_timeout=timeout)
    return client


def _ssh(home, *args, timeout=30):
    return subprocess.run(
        ["ssh", "-F", str(home / ".ssh" / "config"), "-o", "BatchMode=yes", *args],
        env={"HOME": str(home), "PATH": os.environ.get("PATH", "/usr/bin:/bin")},
        stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=timeout)


# --------------------------------------------------------------------------- sshd


def test_paramiko_connects_as_test_user(sshd, host_user, tmp_path):
    assert host_user.name.startswith("specdeck-test") and host_user.uid != 0
    home = sshd.client_home(tmp_path)
    kh = (home / ".ssh" / "known_hosts").read_text()
    assert kh == f"[127.0.0.1]:{sshd.port} {sshd.host_key_pub}\n"
    t0 = time.monotonic()
    client = _client_for_home(sshd, home)
    connect_s = time.monotonic() - t0
    try:
        assert _exec(client, "id -un") == (0, host_user.name + "\n", "")
        status, out, _ = _exec(client, 'echo "$HOME"')
        assert out.strip() == str(host_user.home)
    finally:
        client.close()
    print(f"\nsshd start {sshd.start_s * 1000:.0f} ms, paramiko connect+auth "
          f"{connect_s * 1000:.0f} ms")


def test_host_fingerprint_is_the_served_key(sshd):
    client = sshd.connect()
    try:
        key = client.get_transport().get_remote_server_key()
    finally:
        client.close()
    assert key.get_name() == "ssh-ed25519"
    assert f"{key.get_name()} {key.get_base64()}" == sshd.host_key_pub
    digest = base64.b64encode(hashlib.sha256(key.asbytes()).digest()).decode().rstrip("=")
    assert sshd.host_fingerprint == f"SHA256:{digest}"


def test_client_home_variants_for_host_key_checks(sshd, tmp_path):
    with pytest.raises(paramiko.BadHostKeyException):
        _client_for_home(sshd, sshd.client_home(tmp_path, wrong_host_key=True))
    home = sshd.client_home(tmp_path, known_hosts=False)
    assert (home / ".ssh" / "known_hosts").read_text() == ""
    with pytest.raises(paramiko.SSHException, match="not found in known_hosts"):
        _client_for_home(sshd, home)


def test_openssh_client_uses_the_alias(sshd, tmp_path):
    home = sshd.client_home(tmp_path)
    cfg = (home / ".ssh" / "config").read_text()
    assert "Host gpuhost" in cfg and f"Port {sshd.port}" in cfg
    res = _ssh(home, "gpuhost", "true")
    assert res.returncode == 0, res.stderr
    res = _ssh(home, "gpuhost", "id -un")
    assert res.stdout == sshd.user + "\n", res.stderr

    changed = _ssh(sshd.client_home(tmp_path, wrong_host_key=True), "gpuhost", "true")
    assert changed.returncode == 255
    assert "REMOTE HOST IDENTIFICATION HAS CHANGED" in changed.stderr


def test_sftp_subsystem(sshd):
    client = sshd.connect()
    try:
        sftp = client.open_sftp()
        with sftp.open("sftp-probe.txt", "w") as f:
            f.write("hello")
        sftp.close()
    finally:
        client.close()
    probe = Path(sshd.user_home) / "sftp-probe.txt"
    assert probe.read_text() == "hello"
    assert probe.stat().st_uid != 0
    probe.unlink()


def test_host_python_runs_as_the_user_over_ssh(sshd, host_python):
    client = sshd.connect()
    try:
        status, out, err = _exec(client, f"{host_python} -c 'import sys; "
                                         f"print(sys.version_info >= (3, 9), sys.executable)'")
    finally:
        client.close()
    assert status == 0, err
    assert out.split()[0] == "True"


def test_host_ml_python_has_the_ml_stack(sshd, host_ml_python):
    assert os.stat(host_ml_python).st_mode & 0o005
    script = (
        "import numpy, huggingface_hub, safetensors.numpy as st; "
        "st.save_file({'w': numpy.arange(6, dtype=numpy.float32).reshape(2, 3)}, 'probe.st'); "
        "print(st.load_file('probe.st')['w'].shape, huggingface_hub.__version__)"
    )
    client = sshd.connect()
    try:
        status, out, err = _exec(client, f'{host_ml_python} -c "{script}" && rm probe.st',
                                 timeout=60)
    finally:
        client.close()
    assert status == 0, err
    assert out.startswith("(2, 3)")


def test_user_processes_outlive_the_session(sshd, host_user):
    client = sshd.connect()
    try:
        status, out, _ = _exec(
            client, "setsid nohup sleep 300 >/dev/null 2>&1 </dev/null & echo $!")
    finally:
        client.close()
    pid = int(out)
    wait_for(lambda: pid in host_user.pids(), 10, message="the detached sleep among the user's processes")
    # (the fixtures kill every process of the user at session end; other tests' daemons
    # may be running now, so only this one goes)
    assert fx._kill_pids([pid]) == []


# --------------------------------------------------------------------------- netns


def test_netns_host_cut_and_restore(netns_host, tmp_path):
    assert netns_host.host.startswith("10.231.") and netns_host.port == 22
    print(f"\nnetns host setup (ns, veth, sshd) {netns_host.setup_s * 1000:.0f} ms")
    client = netns_host.connect()
    try:
        assert _exec(client, "id -un")[1] == netns_host.user + "\n"
        netns_host.cut()
        t0 = time.monotonic()
        with pytest.raises((paramiko.SSHException, socket.timeout, OSError)):
            _exec(client, "true", timeout=2)
        assert time.monotonic() - t0 < 10
    finally:
        client.close()
    with pytest.raises((paramiko.SSHException, OSError)):
        netns_host.connect(timeout=2).close()

    netns_host.restore()
    client = netns_host.connect(timeout=5)
    try:
        assert _exec(client, "id -un")[1] == netns_host.user + "\n"
    finally:
        client.close()
    # OpenSSH reaches it through the alias as well.
    assert _ssh(netns_host.client_home(tmp_path), "gpuhost", "true").returncode == 0


def test_netns_process_keeps_writing_while_cut(netns_host, host_user):
    out_file = host_user.home / "netns-writer.log"
    client = netns_host.connect()
    try:
        status, out, err = _exec(
            client,
            f"setsid nohup sh -c 'while :; do date +%s.%N >> {out_file}; sleep 0.05; done' "
            ">/dev/null 2>&1 </dev/null & echo $!")
    finally:
        client.close()
    assert status == 0, err
    pid = int(out)
    assert pid in netns_host.ns_pids()
    assert os.readlink(f"/proc/{pid}/ns/net") != os.readlink("/proc/self/ns/net")
    wait_for(out_file.exists, 5, message="writer's first line")

    netns_host.cut()
    n0 = len(out_file.read_text().splitlines())
    wait_for(lambda: len(out_file.read_text().splitlines()) >= n0 + 10, 10,
             message="writer to go on while the link is down")
    netns_host.restore()


def test_netns_teardown_removes_everything(ssh_keys, host_user, request):
    server, teardown = fx._make_netns_host(request, ssh_keys, host_user)
    client = server.connect()
    try:
        _, out, _ = _exec(client, "setsid nohup sleep 300 >/dev/null 2>&1 </dev/null & echo $!")
    finally:
        client.close()
    pid = int(out)
    server.cut()  # teardown must work with the link down, too
    teardown()
    assert not fx._pid_alive(pid)
    assert not fx._pid_alive(server.proc.pid)
    links = subprocess.run(["ip", "-o", "link"], capture_output=True, text=True).stdout
    assert server.veth_host not in links
    nss = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    assert server.netns not in nss.split()


# --------------------------------------------------------------------------- wait_for


def test_wait_for_returns_value_and_times_out():
    calls = []
    assert wait_for(lambda: calls.append(1) or (len(calls) >= 3 and "done"), 5) == "done"
    with pytest.raises(AssertionError, match="timed out after 0.1 s waiting for never"):
        wait_for(lambda: False, 0.1, message="never")

    def flaky():
        raise FileNotFoundError("x")

    with pytest.raises(AssertionError, match="FileNotFoundError"):
        wait_for(flaky, 0.1, ignore=(FileNotFoundError,))
    with pytest.raises(FileNotFoundError):
        wait_for(flaky, 0.1)
