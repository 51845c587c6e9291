"""`specdeck download` and `specdeck verify` on this machine, as a user types them: the real CLI in
a subprocess, the local agent, the fake hub over real HTTP. The shell's HF_ENDPOINT is the hub of
a local download, an unreachable hub points at --endpoint, the directory comes from the host's
download_dir, verify needs no --repo for a directory a download made, and verdicts have one shape."""

import json
import socket

import pytest

from tests.checkpoint_fixtures import write_drafter
from tests.conftest import run_cli
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


def test_a_symlink_in_the_local_dir_pointing_out_is_not_written_through(agent_home, hub, tmp_path, config_env):
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    target = tmp_path / "weights"
    target.mkdir()
    (target / "sub").symlink_to(elsewhere)
    hub.add_repo("team/evil", {"config.json": b"{}", "sub/x": b"the hub's bytes"})
    result = run_cli("download", "local", "team/evil", "--local-dir", target, "--endpoint", hub.url, "--wait",
                     env=config_env)
    assert result.returncode != 0, result.stdout
    assert "'sub/x'" in result.stderr, result.stderr
    assert list(elsewhere.iterdir()) == []
    assert not (target / "config.json").exists()
