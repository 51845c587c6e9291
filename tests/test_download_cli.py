"""Downloads as users drive them: `specdeck download/verify/jobs` over a real sshd against the
fake hub, and a download that goes on while the SSH link is cut."""

import json
import time

import pytest

from tests.checkpoint_fixtures import write_drafter
from tests.conftest import laptop_for, run_cli
from tests.hub_fixtures import blob
from tests.hubserver import FakeHub
from tests.sshd_fixtures import wait_for
from tui.client import AgentClient
from tui.connection import link_factory

MB = 1024 * 1024


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


@pytest.mark.parametrize(
    "repo, extra, kind, words",
    [
        ("org/missing", [], "RepoNotFound", "org/missing"),
        ("org/drafter", ["no-such-file.bin"], "FileNotFound", "no-such-file.bin"),
        ("org/drafter", ["--revision", "v9"], "RevisionNotFound", "v9"),
        ("org/gated", [], "AuthRequired", "org/gated"),
    ],
)
def test_download_refused_before_starting_with_one_line(repo, extra, kind, words, laptop, hub, host_user, host_python, host_ml_python, tmp_path):
    files = drafter_files(tmp_path)
    hub.add_repo("org/drafter", files)
    hub.add_repo("org/gated", files, gated=True)
    target = host_dir(host_user, "refused-%d" % time.time_ns())
    jobs_before = run_cli("jobs", "gpuhost", "--json", "--python", host_python, home=laptop, check=0).stdout
    result = run_cli(
        "download", "gpuhost", repo, *extra, "--local-dir", target, "--python", host_python,
        "--host-python", host_ml_python, "--endpoint", hub.url, home=laptop,
    )
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and words in lines[0], result.stderr
    assert not target.exists()
    assert run_cli("jobs", "gpuhost", "--json", "--python", host_python, home=laptop, check=0).stdout == jobs_before


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
