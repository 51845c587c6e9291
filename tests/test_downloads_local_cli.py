"""`specdeck download` and `specdeck verify` on this machine, as a user types them: the real CLI in
a subprocess, the local agent, the fake hub over real HTTP. The shell's HF_ENDPOINT is the hub of
a local download, an unreachable hub points at --endpoint, the directory comes from the host's
download_dir, verify needs no --repo for a directory a download made, and verdicts have one shape."""

import json
import os
import socket
import subprocess
import sys
import time

import pytest

from remote.downloads.output import fmt_size
from tests.checkpoint_fixtures import write_drafter
from tests.helpers.cli import REPO_ROOT, run_cli
from tests.hub_fixtures import blob

MB = 1000 * 1000


@pytest.fixture
def config_env(tmp_path):
    """A private config directory (the user's own ~/.config is never read or written)."""
    return {"XDG_CONFIG_HOME": str(tmp_path / "config"), "HF_ENDPOINT": "", "HF_TOKEN": ""}


def drafter_files(tmp_path):
    write_drafter(tmp_path / "drafter-src")
    return {name: (tmp_path / "drafter-src" / name).read_bytes() for name in ("config.json", "model.safetensors")}


def last_json(result):
    return json.loads(result.stdout.strip().splitlines()[-1])


def closed_port():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def test_the_shells_hf_endpoint_is_the_hub_of_a_local_download(agent_home, hub, tmp_path, config_env):
    hub.add_repo("team/weights", {"config.json": b"{}", "data.bin": blob(3 * MB, 7)})
    target = tmp_path / "weights"
    env = dict(config_env, HF_ENDPOINT=hub.url)
    result = run_cli("download", "local", "team/weights", "--local-dir", target, "--wait", env=env)
    assert result.returncode == 0, result.stderr + result.stdout
    assert result.stdout.strip().splitlines()[-1].startswith("verified: verified 2 files")
    assert (target / "data.bin").read_bytes() == blob(3 * MB, 7)
    assert hub.bytes_served("team/weights", "data.bin") == 3 * MB
    # The progress lines give sizes in one unit, decimal as the hub shows them.
    progress = [line for line in result.stderr.splitlines() if " / " in line]
    assert progress and not any("MiB" in line or "(" in line for line in progress), result.stderr
    assert any("3.00 MB / 3.00 MB" in line for line in progress), result.stderr


def test_an_unreachable_hub_suggests_a_mirror_with_endpoint(agent_home, tmp_path, config_env):
    unreachable = "http://127.0.0.1:%d" % closed_port()
    argv = ("download", "local", "team/weights", "--local-dir", tmp_path / "weights", "--endpoint", unreachable)
    result = run_cli(*argv, env=config_env)
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert "cannot reach %s" % unreachable in lines[0] and "--endpoint URL" in lines[0]
    as_json = run_cli(*argv, "--json", env=config_env)
    assert as_json.returncode == 2
    error = json.loads(as_json.stderr)["error"]
    assert error["type"] == "NetworkUnreachable" and "--endpoint URL" in error["message"]


def test_download_goes_to_the_download_dir_and_verify_needs_no_repo(agent_home, hub, tmp_path, config_env):
    files = drafter_files(tmp_path)
    hub.add_repo("team/tiny-eagle3", files)
    models = tmp_path / "models"
    # No --local-dir and nothing remembered: one line saying how to name one.
    refused = run_cli("download", "local", "team/tiny-eagle3", "--endpoint", hub.url, env=config_env)
    assert refused.returncode == 2
    assert refused.stderr.strip() == ("specdeck: no --local-dir given and no download directory remembered for local: "
                                      "pass --local-dir DIR, or remember one with `specdeck config local --download-dir DIR`")
    run_cli("config", "local", "--download-dir", models, env=config_env, check=0)
    result = run_cli("download", "local", "team/tiny-eagle3", "--endpoint", hub.url, "--wait", "--json", env=config_env)
    assert result.returncode == 0, result.stderr
    summary = last_json(result)
    assert summary["verdict"]["status"] == "verified" and sorted(summary["verdict"]) == ["message", "status"]
    target = models / "tiny-eagle3"
    for name, data in files.items():
        assert (target / name).read_bytes() == data

    # Verify with neither --repo nor --endpoint: the download's record in the directory names both.
    verified = run_cli("verify", "local:%s" % target, "--json", env=config_env)
    assert verified.returncode == 0, verified.stderr
    verdict = last_json(verified)["verdict"]
    assert verdict["status"] == "verified" and verdict["message"].startswith("verified 2 files")
    with open(target / "config.json", "r+b") as f:
        f.write(b"[")
    broken = run_cli("verify", "local:%s" % target, "--json", env=config_env)
    assert broken.returncode == 1
    verdict = last_json(broken)["verdict"]
    assert verdict["status"] == "mismatch" and "config.json" in verdict["message"] and verdict["files"] == ["config.json"]
    human = run_cli("verify", str(target), env=config_env)
    assert human.returncode == 1 and human.stdout.strip().splitlines()[-1].startswith("mismatch: mismatch in config.json")

    # A directory no specdeck download made: one line asking for the repo.
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    unknown = run_cli("verify", str(elsewhere), env=config_env)
    assert unknown.returncode == 2
    lines = unknown.stderr.strip().splitlines()
    assert len(lines) == 1 and str(elsewhere) in lines[0] and "--repo" in lines[0]


def test_a_failed_download_has_a_verdict_of_the_same_shape(agent_home, hub, tmp_path, config_env):
    hub.add_repo("team/tiny", {"config.json": b"{}"})
    local_dir = tmp_path / "tiny"
    local_dir.mkdir()
    # Verifying against a repo the hub does not have: the job fails; its verdict says why.
    result = run_cli("verify", str(local_dir), "--repo", "team/gone", "--endpoint", hub.url, "--json", env=config_env)
    assert result.returncode == 2
    verdict = last_json(result)["verdict"]
    assert verdict["status"] == "error" and "team/gone" in verdict["message"]
    assert sorted(verdict) == ["message", "status"]


def test_a_stopped_download_reads_stopped_with_what_is_kept(agent_home, hub, tmp_path, config_env):
    hub.add_repo("team/slow", {"data.bin": blob(4 * MB, 5)})
    hub.throttle(256 * 1000)
    target = tmp_path / "slow"
    run_env = {k: v for k, v in os.environ.items() if k != "SSH_AUTH_SOCK"}
    run_env.update(config_env, PYTHONPATH=str(REPO_ROOT))
    waiting = subprocess.Popen([sys.executable, "-m", "tui.cli", "download", "local", "team/slow", "--local-dir", str(target),
                                "--endpoint", hub.url, "--wait"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                               text=True, env=run_env, cwd=str(REPO_ROOT))
    try:
        job_id = waiting.stdout.readline().strip()
        while not [p for p in target.rglob("*.incomplete") if p.stat().st_size]:
            assert waiting.poll() is None, waiting.stderr.read()
            time.sleep(0.05)
        run_cli("stop", "local", job_id, "--wait", env=config_env, check=0)
        out, err = waiting.communicate(timeout=120)
    finally:
        if waiting.poll() is None:
            waiting.kill()
            waiting.wait()
    kept = next(target.rglob("*.incomplete")).stat().st_size
    # The user asked for it: no error, the words say so and what stays on disk for the next run.
    assert waiting.returncode == 2, err
    assert out.strip().splitlines()[-1] == "stopped: %s on disk kept for the next run" % fmt_size(kept), out + err
    listed = json.loads(run_cli("jobs", "local", "--json", env=config_env, check=0).stdout)
    job = next(entry for entry in listed if entry["id"] == job_id)
    assert job["state"] == "stopped" and job["progress"]["error"] is None
    assert job["progress"]["verdict"] == {"status": "stopped", "message": "%s on disk kept for the next run" % fmt_size(kept),
                                          "kept_bytes": kept}


@pytest.mark.parametrize("name", ["../../outside", "a/../../x", "/abs/outside", "ok/\x1b]0;x"])
def test_a_hub_name_that_leaves_the_local_dir_is_refused_and_nothing_is_written(
        agent_home, hub, tmp_path, config_env, name):
    outside = tmp_path / "outside"
    outside.write_bytes(b"mine")
    hub.add_repo("team/evil", {"config.json": b"{}", name: b"the hub's bytes"})
    target = tmp_path / "deep" / "weights"
    result = run_cli("download", "local", "team/evil", "--local-dir", target, "--endpoint", hub.url, "--wait",
                     env=config_env)
    assert result.returncode != 0, result.stdout
    assert ascii(name) in result.stderr and "refusing" in result.stderr, result.stderr
    assert outside.read_bytes() == b"mine"
    assert not (target / "config.json").exists()


@pytest.mark.parametrize("planted, named", [("sub", "'sub/x'"), (".cache", "'config.json'")])
def test_a_symlink_in_the_local_dir_pointing_out_is_not_written_through(agent_home, hub, tmp_path, config_env, planted, named):
    # A link where a file goes, or where its partial file and record go first (.cache/huggingface).
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    target = tmp_path / "weights"
    target.mkdir()
    (target / planted).symlink_to(elsewhere)
    hub.add_repo("team/evil", {"config.json": b"{}", "sub/x": b"the hub's bytes"})
    result = run_cli("download", "local", "team/evil", "--local-dir", target, "--endpoint", hub.url, "--wait",
                     env=config_env)
    assert result.returncode != 0, result.stdout
    assert named in result.stderr, result.stderr
    assert list(elsewhere.iterdir()) == []
    assert not (target / "config.json").exists()
