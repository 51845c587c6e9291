"""The spine over a real OpenSSH server: bootstrap, host keys, bad input, cut links."""

import json
import subprocess
import threading
import time

import pytest

from tests.helpers.cli import laptop_for, run_cli
from tests.helpers.waits import wait_for
from tui.transport import bootstrap
from tui.transport.client import AgentClient
from tui.transport.connection import link_factory
from tui.transport.openssh import resolve


def cli(home, host_python, *args, **kw):
    return run_cli(args[0], "--python", host_python, *args[1:], home=home, **kw)


def test_run_jobs_logs_stop_over_ssh(laptop, sshd, host_python):
    started = cli(laptop, host_python, "run", "gpuhost", "--json", "--", "bash", "-c", "for i in 1 2 3; do echo line $i; done", check=0)
    job_id = json.loads(started.stdout)["id"]
    listed = wait_for(
        lambda: [j for j in json.loads(cli(laptop, host_python, "jobs", "gpuhost", "--json", check=0).stdout) if j["id"] == job_id and j["exit_code"] is not None],
        60,
    )
    job = listed[0]
    assert {"id", "name", "state", "exit_code", "started_at", "ended_at"} <= set(job)
    assert job["state"] == "succeeded" and job["exit_code"] == 0
    assert cli(laptop, host_python, "logs", "gpuhost", job_id, check=0).stdout == "line 1\nline 2\nline 3\n"
    assert cli(laptop, host_python, "logs", "gpuhost", job_id, "--follow", check=0).stdout == "line 1\nline 2\nline 3\n"
    # user@host:port works as well as the alias (the key comes from a Host block for the address).
    with open(laptop / ".ssh" / "config", "a") as config:
        config.write("Host %s\n    IdentityFile %s\n" % (sshd.host, sshd.client_key))
    long_job = cli(laptop, host_python, "run", "%s@%s:%d" % (sshd.user, sshd.host, sshd.port), "--", "sleep", "300", check=0).stdout.strip()
    stopped = cli(laptop, host_python, "stop", "gpuhost", long_job, "--wait", "--grace", "2", "--json", check=0)
    assert json.loads(stopped.stdout)["state"] == "stopped"


def test_agent_uploaded_once_then_reused(laptop, sshd, host_python, host_user):
    name, data = bootstrap.build_agent()
    agent = host_user.home / bootstrap.AGENT_DIR / name
    cli(laptop, host_python, "jobs", "gpuhost", check=0)
    assert agent.read_bytes() == data
    first_mtime = agent.stat().st_mtime_ns
    time.sleep(0.05)
    cli(laptop, host_python, "jobs", "gpuhost", check=0)
    assert agent.stat().st_mtime_ns == first_mtime


def test_unknown_host_key_refused_with_fingerprint_unless_accepted(sshd, tmp_path, host_python):
    home = sshd.client_home(tmp_path, known_hosts=False)
    refused = cli(home, host_python, "jobs", "gpuhost")
    assert refused.returncode == 2
    assert sshd.host_fingerprint in refused.stderr and "--accept-new" in refused.stderr
    assert len(refused.stderr.strip().splitlines()) == 1
    assert (home / ".ssh" / "known_hosts").read_text() == ""
    accepted = cli(home, host_python, "jobs", "gpuhost", "--accept-new", check=0)
    assert accepted.returncode == 0
    assert sshd.host_key_pub.split()[1] in (home / ".ssh" / "known_hosts").read_text()
    # Remembered: no flag needed any more.
    cli(home, host_python, "jobs", "gpuhost", check=0)


def test_changed_host_key_always_refused(sshd, tmp_path, host_python):
    home = sshd.client_home(tmp_path, wrong_host_key=True)
    before = (home / ".ssh" / "known_hosts").read_text()
    refused = cli(home, host_python, "jobs", "gpuhost", "--accept-new")
    assert refused.returncode == 2
    assert "HOST KEY CHANGED" in refused.stderr and sshd.host_fingerprint in refused.stderr
    assert (home / ".ssh" / "known_hosts").read_text() == before


@pytest.mark.parametrize(
    "case",
    ["unresolvable", "refused_auth", "missing_interpreter", "missing_command", "unknown_job"],
)
def test_bad_input_is_one_clear_line(case, laptop, sshd, host_python, host_user):
    jobs_dir = host_user.home / ".cache" / "specdeck" / "jobs"
    jobs_before = sorted(p.name for p in jobs_dir.iterdir()) if jobs_dir.exists() else []
    if case == "unresolvable":
        result = cli(laptop, host_python, "jobs", "no-such-host.invalid")
        expected, code = "cannot resolve host 'no-such-host.invalid'", 2
    elif case == "refused_auth":
        result = cli(laptop, host_python, "jobs", "root@%s:%d" % (sshd.host, sshd.port))
        expected, code = "authentication refused for root@%s" % sshd.host, 2
    elif case == "missing_interpreter":
        result = run_cli("jobs", "gpuhost", "--python", "/opt/no-such/python3", home=laptop)
        expected, code = "interpreter was not found on the host", 2
    elif case == "missing_command":
        result = cli(laptop, host_python, "run", "gpuhost", "--", "huggingface-cli-missing", "download")
        expected, code = "command not found on the host's login PATH: huggingface-cli-missing", 2  # BadRequest: a usage error
    else:
        result = cli(laptop, host_python, "stop", "gpuhost", "j999999")
        expected, code = "no job j999999 on this host", 1
    assert result.returncode == code, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("specdeck: ") and expected in lines[0], result.stderr
    assert "Traceback" not in result.stderr
    jobs_after = sorted(p.name for p in jobs_dir.iterdir()) if jobs_dir.exists() else []
    assert jobs_after == jobs_before  # nothing half-started


def test_command_found_on_the_login_path_not_the_exec_path(laptop, host_python, host_user):
    # A venv on the PATH of login shells only (~/.profile), as a non-interactive SSH exec lacks it.
    venv_bin = host_user.home / ("venv-%d" % time.time_ns()) / "bin"
    host_user.run(["mkdir", "-p", str(venv_bin)])
    host_user.run(["sh", "-c", 'printf "#!/bin/sh\\necho trained\\n" > "$1" && chmod +x "$1"', "-", str(venv_bin / "train-drafter")])
    profile = host_user.home / ".profile"
    original = profile.read_text() if profile.exists() else None
    host_user.run(["sh", "-c", 'echo "export PATH=%s:\\$PATH" >> "$HOME/.profile"' % venv_bin])
    try:
        job_id = cli(laptop, host_python, "run", "gpuhost", "--", "train-drafter", check=0).stdout.strip()
        job = wait_for(
            lambda: [j for j in json.loads(cli(laptop, host_python, "jobs", "gpuhost", "--json", check=0).stdout) if j["id"] == job_id and j["exit_code"] is not None],
            60,
        )[0]
        assert job["argv"] == [str(venv_bin / "train-drafter")] and job["exit_code"] == 0
        assert cli(laptop, host_python, "logs", "gpuhost", job_id, check=0).stdout == "trained\n"
    finally:
        if original is None:
            profile.unlink()
        else:
            profile.write_text(original)


def test_ssh_config_alias_resolves(laptop, sshd):
    dest = resolve("gpuhost")
    assert (dest.hostname, dest.port, dest.user) == (sshd.host, sshd.port, sshd.user)
    assert dest.identity_files == [sshd.client_key]


def test_cut_link_noticed_and_stream_resumes_without_loss_or_duplicates(netns_host, tmp_path, monkeypatch, host_python, host_user):
    laptop_for(netns_host, tmp_path, monkeypatch)
    states = []
    client = AgentClient(link_factory("gpuhost", python=host_python), reconnect=True, on_state=lambda s, d: states.append((time.monotonic(), s)))
    client.start()
    count = 120
    job = client.call("jobs.submit", {"argv": ["bash", "-c", "for i in $(seq 1 %d); do echo line $i; sleep 0.1; done" % count]})
    received = []
    done = threading.Event()
    client.subscribe("jobs.follow", {"id": job["id"], "after": 0}, lambda data, seq: received.append(data["text"]), lambda data: done.set())
    wait_for(lambda: len("".join(received).splitlines()) >= 10, 30)
    log = host_user.home / ".cache" / "specdeck" / "jobs" / job["id"] / "output.log"
    netns_host.cut()
    cut_at = time.monotonic()
    size_at_cut = log.stat().st_size
    wait_for(lambda: client.state == "reconnecting", 30, message="the cut was never noticed")
    noticed_s = next(t for t, s in states if s == "reconnecting") - cut_at
    wait_for(lambda: log.stat().st_size > size_at_cut, 30, message="the job to go on while the link is down")
    netns_host.restore()
    back_at = time.monotonic()
    wait_for(lambda: client.state == "connected", 30, message="never reconnected")
    resumed_s = next(t for t, s in states if s == "connected" and t > back_at) - back_at
    assert done.wait(60)
    lines = "".join(received).splitlines()
    assert lines == ["line %d" % i for i in range(1, count + 1)]
    client.close()
    print("cut noticed after %.1f s; resumed %.2f s after the link returned" % (noticed_s, resumed_s))


def test_inspect_and_compare_a_checkpoint_on_the_host(laptop, host_python, host_user, tmp_path):
    from tests.checkpoint_fixtures import write_drafter

    on_host = host_user.home / ("drafter-%d" % time.time_ns())
    write_drafter(on_host, layout="specforge")
    subprocess.run(["chown", "-R", host_user.name, str(on_host)], check=True)  # the host user's own files
    report = json.loads(cli(laptop, host_python, "inspect", "gpuhost:%s" % on_host, "--json", check=0).stdout)
    assert report["format"] == "specforge" and report["path"] == str(on_host)
    assert any(t["name"] == "fc.weight" and "3 auxiliary hidden states of the target" in t["role"] for t in report["tensors"])
    human = cli(laptop, host_python, "inspect", "gpuhost:%s" % on_host, check=0).stdout
    assert "fc.weight" in human and "draft id -> target id" in human
    # The same drafter here and on the host, in two layouts: compatible, by role.
    here = write_drafter(tmp_path / "speculators", layout="speculators")
    result = json.loads(cli(laptop, host_python, "compare", "gpuhost:%s" % on_host, here, "--json").stdout)
    assert result["verdict"]["status"] == "compatible", result["reasons"]
    # On two machines only the reports are compared: the rows claim no more than shape and dtype.
    assert {row["status"] for row in result["rows"]} == {"same shape and dtype"} and result["values"]["compared"] is False
    # Two drafters of the host, fine-tuned apart: the host compares their values where they lie.
    other = host_user.home / ("other-%d" % time.time_ns())
    write_drafter(other, layout="specforge", values=1)
    subprocess.run(["chown", "-R", host_user.name, str(other)], check=True)
    human = cli(laptop, host_python, "compare", "gpuhost:%s" % on_host, "gpuhost:%s" % other).stdout
    assert "Tensors: 15, 0 differ, 13 differ in values, 2 same" in human
    missing = cli(laptop, host_python, "inspect", "gpuhost:/no/such/checkpoint")
    assert missing.returncode == 1 and "/no/such/checkpoint" in missing.stderr and len(missing.stderr.strip().splitlines()) == 1


def test_proxy_jump_reaches_a_host_only_the_jump_host_sees(netns_host, ssh_keys, host_user, tmp_path, monkeypatch, host_python):
    # A second sshd on the namespace's own loopback: nothing outside the namespace can reach it,
    # so a connection that works went through the jump host.
    from tests.sshd_fixtures import _start_sshd

    confdir = tmp_path / "inner-sshd"
    confdir.mkdir()
    confdir.chmod(0o755)
    inner, log = _start_sshd(keys=ssh_keys, user=host_user, confdir=confdir, listen="127.0.0.1", port=2222,
                             prefix=("ip", "netns", "exec", netns_host.netns))
    assert inner is not None, log
    try:
        home = laptop_for(netns_host, tmp_path, monkeypatch)
        with open(home / ".ssh" / "config", "a") as config:
            config.write("Host inner\n    HostName 127.0.0.1\n    Port 2222\n    User %s\n    IdentityFile %s\n    ProxyJump gpuhost\n"
                         % (host_user.name, ssh_keys.client_key))
        with open(home / ".ssh" / "known_hosts", "a") as known:
            known.write("[127.0.0.1]:2222 %s\n" % inner.host_key_pub)
        result = run_cli("run", "inner", "--python", host_python, "--json", "--", "true", home=home)
        assert result.returncode == 0, result.stderr
        assert "Accepted publickey" in inner.log_text()
    finally:
        inner._stop()


def test_ssh_agent_keys_are_used(sshd, ssh_keys, tmp_path, host_python):
    home = sshd.client_home(tmp_path)
    config = home / ".ssh" / "config"
    config.write_text("\n".join(l for l in config.read_text().splitlines() if "IdentityFile" not in l and "IdentitiesOnly" not in l) + "\n")
    agent_socket = tmp_path / "agent.sock"
    agent = subprocess.Popen(["ssh-agent", "-D", "-a", str(agent_socket)], stdout=subprocess.DEVNULL)
    try:
        wait_for(agent_socket.exists, 10)
        subprocess.run(["ssh-add", ssh_keys.client_key], env={"SSH_AUTH_SOCK": str(agent_socket)}, check=True, capture_output=True)
        without = run_cli("jobs", "gpuhost", "--python", host_python, home=home)
        assert without.returncode == 2 and "authentication refused" in without.stderr
        with_agent = run_cli("jobs", "gpuhost", "--python", host_python, home=home, env={"SSH_AUTH_SOCK": str(agent_socket)})
        assert with_agent.returncode == 0, with_agent.stderr
    finally:
        agent.terminate()
