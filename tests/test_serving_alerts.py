"""Alerts as the console words them, and the GPU pane's top line when the host cannot be reached
(the console's side of the same issue as the Speculation pane's): a download whose
verification fails is announced as that download, with its reason, not as a GPU alert; a host
that does not resolve is said on the GPU pane's first line, not `connecting…` for ever."""

import json

from textual.widgets import Static

from tests.checkpoint_fixtures import write_drafter
from tests.helpers.cli import run_cli, use_home
from tests.helpers.pilot import GpusApp
from tests.helpers.waits import wait_for, wait_until
from tui.transport.connection import open_client
from tui.telemetry.pane import GpusPane


async def test_a_failed_verification_is_announced_as_that_download_with_its_reason(agent_home, hub, tmp_path):
    write_drafter(tmp_path / "drafter-src")
    hub.add_repo("team/tiny-eagle3", {name: (tmp_path / "drafter-src" / name).read_bytes() for name in ("config.json", "model.safetensors")})
    env = {"XDG_CONFIG_HOME": str(tmp_path / "config"), "HF_ENDPOINT": "", "HF_TOKEN": ""}
    target = tmp_path / "models" / "tiny-eagle3"
    run_cli("download", "local", "team/tiny-eagle3", "--endpoint", hub.url, "--local-dir", target, "--wait", env=env, check=0)
    client = open_client("local")
    app = GpusApp(client=client)
    try:
        async with app.run_test(size=(100, 30)) as pilot:
            pane = app.query_one(GpusPane)
            await wait_until(pilot, lambda: pane._alerts is not None, message="the alerts followed")
            with open(target / "config.json", "r+b") as f:
                f.write(b"[")
            broken = run_cli("verify", "local:%s" % target, "--json", env=env)
            assert broken.returncode == 1
            job_id = json.loads(run_cli("jobs", "local", "--json", env=env, check=0).stdout)[-1]["id"]
            expected = "download %s: verification failed (1 file differs: mismatch in config.json: " % job_id
            shown = await wait_until(pilot, lambda: [n for n in app._notifications if expected in n.message],
                                     message="the download's alert in a notification")
            assert shown[0].title == "verification failed" and "GPU" not in shown[0].message
        alert = wait_for(lambda: [a for a in client.call("telemetry.alerts")["alerts"] if a.get("job_id") == job_id], 10)[0]
        assert alert["kind"] == "job_failed" and alert["source"] == "download %s" % job_id and alert["message"].startswith(expected)
    finally:
        client.close()


async def test_the_gpu_pane_says_why_it_is_not_connected(tmp_path, monkeypatch):
    from tui.app import SpecdeckApp

    home = tmp_path / "home"
    (home / ".ssh").mkdir(parents=True)
    use_home(monkeypatch, home)
    app = SpecdeckApp(host="someone@no-such-host.invalid")
    async with app.run_test(size=(120, 40)) as pilot:
        await wait_until(pilot, lambda: app.connection_state == "failed", timeout_s=60)
        top = app.query_one(GpusPane).query_one("#gpu-host", Static)
        await wait_until(pilot, lambda: str(top.render()).startswith("not connected: cannot resolve host 'no-such-host.invalid'"),
                         message="the GPU pane's first line")
        assert "connecting" not in str(top.render())
