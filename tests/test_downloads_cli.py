"""Downloads as users drive them: `specdeck download/verify/jobs/config` over a real sshd against
the fake hub, the shell's hub token on its way to the hub and nowhere else, an interpreter without
huggingface_hub answered with one that has it, and a download that goes on while the SSH link is cut."""

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.checkpoint_fixtures import write_drafter
from tests.helpers.cli import REPO_ROOT, laptop_for, run_cli, ssh_config_env
from tests.helpers.waits import wait_for
from tests.hub_fixtures import blob
from tests.hubserver import FakeHub
from tui.transport.client import AgentClient
from tui.transport.connection import link_factory

MB = 1024 * 1024
SECRET = "hf_SpecdeckCliToken5c2e8a1f9b7d3046"


def state_dir(host_user):
    return host_user.home / ".cache" / "specdeck"


def job_dirs(host_user):
    return sorted(p.name for p in (state_dir(host_user) / "jobs").iterdir() if p.name.startswith("j"))


def text_under(root):
    """Every file under root, decoded loosely: for grepping a secret."""
    chunks = []
    for dirpath, _dirs, names in os.walk(root):
        for name in names:
            path = os.path.join(dirpath, name)
            if os.path.isfile(path) and os.path.getsize(path) < 16 * MB:
                with open(path, "rb") as f:
                    chunks.append(f.read().decode("utf-8", "replace"))
    return "\n".join(chunks)


def drafter_files(tmp_path):
    """A small real EAGLE-3 drafter (SpecForge layout): what verification inspects after hashing."""
    write_drafter(tmp_path / "drafter-src")
    return {name: (tmp_path / "drafter-src" / name).read_bytes() for name in ("config.json", "model.safetensors")}


def host_dir(host_user, name):
    """A fresh directory in the host user's home, as the host user would have it."""
    path = host_user.home / "models" / name
    host_user.run(["mkdir", "-p", str(path.parent)])
    return path


def test_download_then_verified_over_ssh(laptop, hub, host_user, host_python, host_ml_python, tmp_path):
    files = drafter_files(tmp_path)
    hub.add_repo("org/drafter", files)
    target = host_dir(host_user, "drafter-%d" % time.time_ns())
    common = ["--python", host_python, "--host-python", host_ml_python, "--endpoint", hub.url]
    run_cli("jobs", "gpuhost", "--json", "--python", host_python, home=laptop, check=0)  # the daemon is up
    state_before = sorted(p.name for p in state_dir(host_user).iterdir())
    result = run_cli("download", "gpuhost", "org/drafter", "--local-dir", target, "--wait", "--json", *common, home=laptop)
    assert result.returncode == 0, result.stderr + result.stdout
    summary = json.loads(result.stdout.strip().splitlines()[-1])
    assert summary["state"] == "verified" and summary["verdict"]["status"] == "verified"
    for name, data in files.items():
        assert (target / name).read_bytes() == data
    jobs = json.loads(run_cli("jobs", "gpuhost", "--json", "--python", host_python, home=laptop, check=0).stdout)
    job = next(j for j in jobs if j["id"] == summary["id"])
    assert job["kind"] == "download" and job["state"] == "verified"
    assert job["progress"]["bytes_done"] == job["progress"]["bytes_total"] == sum(map(len, files.values()))
    # The same check on the directory as it stands: verified; then a flipped byte: mismatch, exit 1.
    verify = ["verify", "gpuhost:%s" % target, "--repo", "org/drafter", "--json", *common]
    assert run_cli(*verify, home=laptop).returncode == 0
    data = bytearray((target / "model.safetensors").read_bytes())
    data[-10] ^= 0xFF
    (target / "model.safetensors").write_bytes(bytes(data))
    broken = run_cli(*verify, home=laptop)
    assert broken.returncode == 1
    verdict = json.loads(broken.stdout.strip().splitlines()[-1])["verdict"]
    assert verdict["status"] == "mismatch" and "model.safetensors" in verdict["message"]
    # The spec and the plan live in the job's own directory; nothing is left beside the jobs.
    assert sorted(p.name for p in state_dir(host_user).iterdir()) == state_before
    download_dir = state_dir(host_user) / "jobs" / summary["id"]
    assert json.loads((download_dir / "spec.json").read_text())["repo"] == "org/drafter"
    assert json.loads((download_dir / "plan.json").read_text())["ok"] is True
    verify_dir = state_dir(host_user) / "jobs" / json.loads(broken.stdout.strip().splitlines()[-1])["id"]
    assert (verify_dir / "spec.json").exists() and not (verify_dir / "plan.json").exists()


@pytest.mark.parametrize(
    "repo, extra, kind, words, code",
    [
        # Not there: what was asked for failed (1); not allowed: a usage problem (2).
        ("org/missing", [], "RepoNotFound", "org/missing", 1),
        ("org/drafter", ["no-such-file.bin"], "FileNotFound", "no-such-file.bin", 1),
        ("org/drafter", ["--revision", "v9"], "RevisionNotFound", "v9", 1),
        ("org/gated", [], "AuthRequired", "org/gated", 2),
    ],
)
def test_download_refused_before_starting_with_one_line(repo, extra, kind, words, code, laptop, hub, host_user, host_python, host_ml_python, tmp_path):
    files = drafter_files(tmp_path)
    hub.add_repo("org/drafter", files)
    hub.add_repo("org/gated", files, gated=True)
    target = host_dir(host_user, "refused-%d" % time.time_ns())
    run_cli("jobs", "gpuhost", "--json", "--python", host_python, home=laptop, check=0)  # the host's daemon up
    dirs_before = job_dirs(host_user)
    result = run_cli(
        "download", "gpuhost", repo, *extra, "--local-dir", target, "--python", host_python,
        "--host-python", host_ml_python, "--endpoint", hub.url, home=laptop,
    )
    assert result.returncode == code
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and words in lines[0], result.stderr
    as_json = run_cli(
        "download", "gpuhost", repo, *extra, "--local-dir", target, "--python", host_python,
        "--host-python", host_ml_python, "--endpoint", hub.url, "--json", home=laptop,
    )
    assert as_json.returncode == code and json.loads(as_json.stderr)["error"]["type"] == kind
    assert not target.exists()
    # No job for it, not even one that ended at once, and no directory reserved for one left
    # behind (other modules' jobs may come and go on this host user meanwhile: those are listed).
    new_dirs = set(job_dirs(host_user)) - set(dirs_before)
    jobs_after = json.loads(run_cli("jobs", "gpuhost", "--json", "--python", host_python, home=laptop, check=0).stdout)
    assert [job for job in jobs_after if str(target) in json.dumps(job)] == []
    listed = set(job["id"] for job in jobs_after)
    assert [d for d in sorted(new_dirs - listed) if (state_dir(host_user) / "jobs" / d).exists()] == []


def test_the_hosts_login_hf_endpoint_is_the_hub_when_none_is_named(laptop, hub, host_user, host_python, host_ml_python, tmp_path):
    # The host's own mirror, set in its login profile: a download that names none goes there.
    files = drafter_files(tmp_path)
    hub.add_repo("org/drafter", files)
    profile = host_user.home / ".profile"
    before = profile.read_bytes() if profile.exists() else None
    host_user.run(["sh", "-c", "echo 'export HF_ENDPOINT=%s' >> ~/.profile" % hub.url])
    try:
        target = host_dir(host_user, "login-endpoint-%d" % time.time_ns())
        result = run_cli("download", "gpuhost", "org/drafter", "--local-dir", target, "--wait", "--json", "--python", host_python,
                         "--host-python", host_ml_python, home=laptop, env={"HF_ENDPOINT": "", "XDG_CONFIG_HOME": str(laptop / ".config")})
        assert result.returncode == 0, result.stderr + result.stdout
        assert json.loads(result.stdout.strip().splitlines()[-1])["verdict"]["status"] == "verified"
        assert hub.bytes_served("org/drafter", "model.safetensors") == len(files["model.safetensors"])
    finally:
        if before is None:
            profile.unlink()
        else:
            profile.write_bytes(before)


def test_the_shells_token_reaches_the_hub_and_nowhere_else(laptop, hub, host_user, host_python, host_ml_python):
    # A gated repo, and a host that has no token of its own: only the shell's HF_TOKEN opens it.
    files = {"config.json": b"{}", "weights.bin": blob(8 * MB, 5)}
    hub.add_repo("org/gated", files, gated=True, tokens=[SECRET])
    argv = ["download", "gpuhost", "org/gated", "--python", host_python, "--host-python", host_ml_python,
            "--endpoint", hub.url]
    refused = run_cli(*argv, "--local-dir", host_dir(host_user, "no-token-%d" % time.time_ns()), home=laptop, env={"HF_TOKEN": ""})
    assert refused.returncode == 2 and "org/gated is gated" in refused.stderr
    hub.requests.clear()
    hub.throttle(2 * MB)  # a few seconds of a running job to look at
    target = host_dir(host_user, "token-%d" % time.time_ns())
    env = {k: v for k, v in os.environ.items() if k != "SSH_AUTH_SOCK"}
    env.update(ssh_config_env(laptop))
    env.update(PYTHONPATH=str(REPO_ROOT), HF_TOKEN=SECRET)
    cli = subprocess.Popen([sys.executable, "-m", "tui.cli", *argv, "--local-dir", str(target), "--wait", "--json"],
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, cwd=str(REPO_ROOT))
    process_lists = []
    while cli.poll() is None:
        process_lists.append(subprocess.run(["ps", "-eww", "-o", "pid,user,args"], capture_output=True, text=True).stdout)
        time.sleep(0.1)
    out, err = cli.communicate()
    assert cli.returncode == 0, err + out
    summary = json.loads(out.strip().splitlines()[-1])
    assert summary["state"] == "verified"
    assert (target / "weights.bin").read_bytes() == files["weights.bin"]
    # The token went with every request to the hub, the shell's own.
    assert hub.requests and {q["token"] for q in hub.requests} == {SECRET}
    # ps was looked at while the job ran, and showed no token.
    job_dir = str(state_dir(host_user) / "jobs" / summary["id"])
    assert any(job_dir in listing for listing in process_lists)
    for listing in process_lists:
        assert SECRET not in listing
    # Not in any file of the agent (job.json, spec.json, plan.json, logs, progress) nor the laptop's.
    assert SECRET not in text_under(state_dir(host_user))
    assert SECRET not in text_under(laptop)
    assert SECRET not in out + err


def test_an_interpreter_without_huggingface_hub_names_one_that_has_it(laptop, hub, host_user, host_python, host_ml_python, tmp_path):
    hub.add_repo("org/drafter", drafter_files(tmp_path))
    # The ML venv where users keep one: ~/.venv-something.
    venv = host_user.home / ".venv-specdeck-ml"
    host_user.run(["ln", "-sfn", str(Path(host_ml_python).parent.parent), str(venv)])
    config_env = {"XDG_CONFIG_HOME": str(laptop / ".config")}
    try:
        target = host_dir(host_user, "interp-%d" % time.time_ns())
        # The agent's own interpreter (host_python) has no huggingface_hub.
        refused = run_cli("download", "gpuhost", "org/drafter", "--local-dir", target, "--python", host_python,
                          "--endpoint", hub.url, home=laptop, env=config_env)
        if refused.returncode != 2:  # say what the host planned with, and under which environment
            jobs = run_cli("jobs", "gpuhost", "--json", home=laptop, env=config_env).stdout
            probe = host_user.run(["sh", "-lc", "%s -c 'import huggingface_hub; print(huggingface_hub.__file__)'" % host_python], check=False)
            pytest.fail("a download under %s was accepted: %s %s; jobs: %s; the login shell's %s finds: %s %s"
                        % (host_python, refused.stdout, refused.stderr, jobs[-2000:], host_python, probe.stdout, probe.stderr))
        lines = refused.stderr.strip().splitlines()
        assert len(lines) == 1, refused.stderr
        assert "huggingface_hub is not installed for %s" % host_python in lines[0]
        assert str(venv / "bin" / "python") in lines[0]
        assert "specdeck config gpuhost --ml-python " in lines[0]
        # Remembered once, neither --python nor --host-python is typed again.
        run_cli("config", "gpuhost", "--ml-python", venv / "bin" / "python", "--agent-python", host_python,
                home=laptop, env=config_env, check=0)
        shown = json.loads(run_cli("config", "gpuhost", "--json", home=laptop, env=config_env, check=0).stdout)
        assert shown["settings"] == {"ml_python": str(venv / "bin" / "python"), "agent_python": host_python}
        result = run_cli("download", "gpuhost", "org/drafter", "--local-dir", target, "--wait", "--json",
                         "--endpoint", hub.url, home=laptop, env=config_env)
        assert result.returncode == 0, result.stderr + result.stdout
        summary = json.loads(result.stdout.strip().splitlines()[-1])
        assert summary["state"] == "verified"
        job = json.loads(run_cli("jobs", "gpuhost", "--json", home=laptop, env=config_env, check=0).stdout)
        assert next(j for j in job if j["id"] == summary["id"])["argv"][0] == str(venv / "bin" / "python")
    finally:
        venv.unlink()


def test_download_goes_on_while_the_ssh_link_is_cut(netns_host, tmp_path, monkeypatch, host_user, host_python, host_ml_python):
    # The hub is reachable from the host over the same veth; only SSH traffic is cut, so the
    # download goes on while the console cannot see it.
    hub = FakeHub(root=str(tmp_path / "hub")).start(host=netns_host.peer_address)
    try:
        files = {"config.json": b"{}", "weights.bin": blob(24 * MB, 2)}
        hub.add_repo("org/slow", files)
        hub.throttle(3 * MB)
        laptop_for(netns_host, tmp_path, monkeypatch)
        client = AgentClient(link_factory("gpuhost", python=host_python), reconnect=True).start()
        target = host_dir(host_user, "slow-%d" % time.time_ns())
        job = client.call(
            "download.start",
            {"repo": "org/slow", "local_dir": str(target), "endpoint": hub.url, "python": host_ml_python},
            timeout=120,
        )
        wait_for(lambda: (client.call("jobs.get", {"id": job["id"]}).get("progress") or {}).get("bytes_done", 0) > 2 * MB, 60)
        rules = [["INPUT", "--dport"], ["OUTPUT", "--sport"]]
        for chain, port_flag in rules:
            netns_host.ns_run(["iptables", "-A", chain, "-p", "tcp", port_flag, "22", "-j", "DROP"])
        progress_file = host_user.home / ".cache" / "specdeck" / "jobs" / job["id"] / "progress.json"
        done_at_cut = json.loads(progress_file.read_text())["bytes_done"]
        wait_for(lambda: client.state == "reconnecting", 30, message="the cut was never noticed")
        wait_for(lambda: json.loads(progress_file.read_text())["bytes_done"] > done_at_cut + 3 * MB, 60)
        seen_while_cut = json.loads(progress_file.read_text())["bytes_done"]
        for chain, port_flag in rules:
            netns_host.ns_run(["iptables", "-D", chain, "-p", "tcp", port_flag, "22", "-j", "DROP"])
        wait_for(lambda: client.state == "connected", 30, message="never reconnected")
        progress = client.call("jobs.get", {"id": job["id"]})["progress"]
        assert progress["bytes_done"] >= seen_while_cut  # the console sees what happened meanwhile
        final = wait_for(lambda: (lambda j: j["exit_code"] is not None and j)(client.call("jobs.get", {"id": job["id"]})), 120)
        assert final["state"] == "verified"
        assert (target / "weights.bin").read_bytes() == files["weights.bin"]
        client.close()
    finally:
        hub.stop()
