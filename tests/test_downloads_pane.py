"""The Downloads pane against the real local agent and the fake hub over real HTTP:
start a download from the form, watch it reach its verdict, open it in the Tensors pane;
tell downloads from verifications, repair, cancel after asking, remember the endpoint when asked."""

import json
import os

import numpy as np
import pytest
from safetensors.numpy import save_file
from textual.widgets import Checkbox, DataTable, Input, ProgressBar, Static, TabbedContent

from remote.downloads.output import fmt_size
from tests.checkpoint_fixtures import small_drafter_files
from tests.helpers.cli import use_home
from tests.helpers.pilot import DownloadsHost, fill_form, notified, text_of
from tests.helpers.waits import wait_for, wait_until
from tests.hub_fixtures import blob
from tui import config
from tui.checkpoints.pane import TensorsPane
from tui.downloads.form import DownloadForm
from tui.downloads.file_progress import FileProgress
from tui.downloads.pane import DownloadsPane
from tui.screens.confirm import ConfirmScreen


@pytest.fixture(autouse=True)
def private_config(tmp_path, monkeypatch):
    """The form remembers what it was given (tui/config.py): in a config of the test's own."""
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    monkeypatch.delenv("HF_ENDPOINT", raising=False)


def state_cell(pane, job_id):
    return str(pane.query_one("#downloads-jobs", DataTable).get_cell(job_id, "state"))


async def test_download_from_the_form_reaches_verified_and_opens_in_tensors(client, hub, tmp_path):
    files = small_drafter_files(tmp_path)
    hub.add_repo("team/tiny-eagle3", files)
    local_dir = str(tmp_path / "downloads" / "tiny-eagle3")
    app = DownloadsHost(client)
    async with app.run_test(size=(120, 40)) as pilot:
        pane = app.query_one(DownloadsPane)
        await pilot.press("n")
        await wait_until(pilot, lambda: isinstance(app.screen, DownloadForm))
        await fill_form(pilot, {"repo": "team/tiny-eagle3", "local_dir": local_dir, "endpoint": hub.url})
        await wait_until(pilot, lambda: not isinstance(app.screen, DownloadForm), timeout_s=60)
        await wait_until(pilot, lambda: len(pane.jobs) == 1)
        job_id = next(iter(pane.jobs))
        await wait_until(pilot, lambda: state_cell(pane, job_id) == "verified", timeout_s=60)

        # The detail shows each file full and the verdict; the user was told once.
        await wait_until(pilot, lambda: len(pane.query(FileProgress)) == 2, timeout_s=10)  # mounted after the verdict's event
        bars = list(pane.query(FileProgress))
        assert sorted(bar.path for bar in bars) == ["config.json", "model.safetensors"]
        # A bar's own ProgressBar is composed a moment after the bar is mounted.
        await wait_until(pilot, lambda: all(bar.query(ProgressBar) and bar.query_one(ProgressBar).percentage == 1.0 for bar in bars),
                         timeout_s=5)
        assert pane.query_one("#downloads-total", ProgressBar).percentage == 1.0
        assert "verified" in str(pane.query_one("#downloads-verdict", Static).render())
        # An endpoint typed in the form is for this download: remembered only when its box is ticked.
        assert config.remembered("local", "hub_endpoint") is None
        await pilot.pause(2.5)  # two more polls must not announce it again
        announced = [m for m in notified(app) if m.startswith(job_id)]
        assert len(announced) == 1 and "verified" in announced[0]
        assert os.path.getsize(os.path.join(local_dir, "model.safetensors")) == len(files["model.safetensors"])

        # t lands in the Tensors pane on that directory, with its tensors listed.
        await pilot.press("t")
        tensors = app.query_one(TensorsPane)
        assert app.query_one(TabbedContent).active == "tensors"
        await wait_until(pilot, lambda: tensors.report is not None, timeout_s=30)
        assert tensors.path == local_dir
        names = [str(row[0]) for row in map(tensors.query_one("#tensors-table", DataTable).get_row_at, range(tensors.query_one("#tensors-table", DataTable).row_count))]
        assert "fc.weight" in names and "d2t" in names


async def test_refused_download_shows_the_agents_line_under_the_form(client, hub, tmp_path):
    app = DownloadsHost(client)
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.press("n")
        await wait_until(pilot, lambda: isinstance(app.screen, DownloadForm))
        await fill_form(pilot, {"repo": "team/no-such-repo", "local_dir": str(tmp_path / "x"), "endpoint": hub.url})
        error = app.screen.query_one("#form-error", Static)
        await wait_until(pilot, lambda: "not found" in str(error.render()), timeout_s=60)
        assert isinstance(app.screen, DownloadForm)  # still there, to fix and submit again
        assert "team/no-such-repo" in str(error.render())
        assert client.call("jobs.list")["jobs"] == []


async def test_retry_and_verify_for_downloads_started_here_or_elsewhere(client, hub, tmp_path):
    hub.add_repo("team/tiny-eagle3", small_drafter_files(tmp_path))
    elsewhere = client.call("download.start", {"repo": "team/tiny-eagle3", "local_dir": str(tmp_path / "elsewhere"), "endpoint": hub.url}, timeout=120)
    wait_for(lambda: client.call("jobs.get", {"id": elsewhere["id"]})["state"] == "verified", 60)
    app = DownloadsHost(client)
    async with app.run_test(size=(120, 40)) as pilot:
        pane = app.query_one(DownloadsPane)
        await wait_until(pilot, lambda: elsewhere["id"] in pane.jobs)
        # It had ended before the pane saw it run: nothing turned, nothing announced.
        assert not [m for m in notified(app) if m.startswith(elsewhere["id"])]
        pane.query_one("#downloads-jobs", DataTable).focus()
        # Started from a script, not this console: the job keeps its spec, so v works for it too.
        await pilot.press("v")
        await wait_until(pilot, lambda: len(pane.jobs) == 2, timeout_s=60)
        recheck = max(pane.jobs, key=lambda job_id: int(job_id[1:]))
        await wait_until(pilot, lambda: pane.jobs[recheck]["state"] == "verified", timeout_s=60)
        # Where its files went, the job itself says: t works for it too.
        await pilot.press("t")
        tensors = app.query_one(TensorsPane)
        assert app.query_one(TabbedContent).active == "tensors" and tensors.path == str(tmp_path / "elsewhere")
        app.query_one(TabbedContent).active = "downloads"
        pane.query_one("#downloads-jobs", DataTable).focus()

        local_dir = str(tmp_path / "here")
        await pilot.press("n")
        await wait_until(pilot, lambda: isinstance(app.screen, DownloadForm))
        await fill_form(pilot, {"repo": "team/tiny-eagle3", "local_dir": local_dir, "endpoint": hub.url})
        await wait_until(pilot, lambda: len(pane.jobs) == 3, timeout_s=60)
        mine = max(pane.jobs, key=lambda job_id: int(job_id[1:]))
        await wait_until(pilot, lambda: pane.jobs[mine]["state"] == "verified", timeout_s=60)

        # Break a byte on disk, verify again: a new job, and it says mismatch.
        path = os.path.join(local_dir, "config.json")
        with open(path, "r+b") as f:
            f.write(b"[")
        assert pane.selected_id == mine
        await pilot.press("v")
        await wait_until(pilot, lambda: len(pane.jobs) == 4, timeout_s=60)
        check = max(pane.jobs, key=lambda job_id: int(job_id[1:]))
        await wait_until(pilot, lambda: pane.jobs[check]["state"] == "mismatch", timeout_s=60)
        assert any(m.startswith(check + " mismatch") and "config.json" in m for m in notified(app))

        # r on the download (not the verify, whose r verifies) starts it again, which puts the file right.
        table = pane.query_one("#downloads-jobs", DataTable)
        table.move_cursor(row=table.get_row_index(mine))
        await wait_until(pilot, lambda: pane.selected_id == mine)
        await pilot.press("r")
        await wait_until(pilot, lambda: len(pane.jobs) == 5, timeout_s=60)
        again = max(pane.jobs, key=lambda job_id: int(job_id[1:]))
        await wait_until(pilot, lambda: pane.jobs[again]["state"] == "verified", timeout_s=60)
        with open(path, "rb") as f:
            assert json.loads(f.read())["architectures"] == ["LlamaForCausalLMEagle3"]


async def test_cancel_stops_a_running_download(client, hub, tmp_path):
    big = np.zeros(4 * 1024 * 1024, dtype=np.uint8)
    weights = tmp_path / "weights.safetensors"
    save_file({"w": big}, str(weights))
    hub.add_repo("team/slow", {"model.safetensors": str(weights)})
    hub.throttle(256 * 1024)
    app = DownloadsHost(client)
    async with app.run_test(size=(120, 40)) as pilot:
        pane = app.query_one(DownloadsPane)
        await pilot.press("n")
        await wait_until(pilot, lambda: isinstance(app.screen, DownloadForm))
        await fill_form(pilot, {"repo": "team/slow", "local_dir": str(tmp_path / "slow"), "endpoint": hub.url})
        await wait_until(pilot, lambda: len(pane.jobs) == 1, timeout_s=60)
        job_id = next(iter(pane.jobs))
        await wait_until(pilot, lambda: pane.jobs[job_id]["state"] == "downloading" and (pane.jobs[job_id]["progress"].get("bytes_done") or 0) > 0, timeout_s=30)
        # While running: rate and ETA are shown, and a second copy of the same download is not started.
        table = pane.query_one("#downloads-jobs", DataTable)
        await wait_until(pilot, lambda: str(table.get_cell(job_id, "rate")).endswith("/s") and ":" in str(table.get_cell(job_id, "eta")))
        table.focus()
        await pilot.press("r")
        assert "%s is still running" % job_id in text_of(pane.query_one("#downloads-status", Static))
        # x asks first; no leaves it running.
        await pilot.press("x")
        await wait_until(pilot, lambda: isinstance(app.screen, ConfirmScreen))
        assert "Cancel %s, the download of team/slow?" % job_id in str(app.screen.query_one(".dialog-text").render())
        await pilot.press("n")
        await wait_until(pilot, lambda: not isinstance(app.screen, ConfirmScreen))
        assert client.call("jobs.get", {"id": job_id})["process_state"] == "running"
        await pilot.press("x")
        await wait_until(pilot, lambda: isinstance(app.screen, ConfirmScreen))
        await pilot.press("y")
        await wait_until(pilot, lambda: pane.jobs[job_id]["state"] == "stopped", timeout_s=30)
        stopped_at = pane.jobs[job_id]["progress"]["bytes_done"]
        assert 0 < stopped_at < pane.jobs[job_id]["progress"]["bytes_total"]
        # Stopped, as asked: no error, and what is kept for r.
        assert state_cell(pane, job_id) == "stopped"
        verdict = text_of(pane.query_one("#downloads-verdict", Static))
        assert verdict.startswith("stopped: %s on disk kept for the next run" % fmt_size(stopped_at)), verdict
        assert "error" not in verdict and "SIGTERM" not in verdict
        assert not [m for m in notified(app) if m.startswith(job_id)]  # the user stopped it: nothing to announce

        # r starts it again: it continues from the partial file to its verdict.
        hub.throttle(None)
        await pilot.press("r")
        await wait_until(pilot, lambda: len(pane.jobs) == 2, timeout_s=60)
        again = max(pane.jobs, key=lambda key: int(key[1:]))
        await wait_until(pilot, lambda: pane.jobs[again]["state"] == "verified", timeout_s=60)
        assert pane.selected_id == again and table.cursor_row == table.get_row_index(again)
        assert hub.range_starts("team/slow", "model.safetensors")[-1] > 0


async def test_rows_say_whether_they_download_or_verify_with_sizes_in_one_unit(client, hub, tmp_path):
    hub.add_repo("team/weights", {"config.json": b"{}", "data.bin": blob(1_500_000, 3)})
    spec = {"repo": "team/weights", "local_dir": str(tmp_path / "weights"), "endpoint": hub.url}
    fetched = client.call("download.start", spec, timeout=120)
    wait_for(lambda: client.call("jobs.get", {"id": fetched["id"]})["state"] == "verified", 60)
    checked = client.call("download.verify", spec, timeout=120)
    wait_for(lambda: client.call("jobs.get", {"id": checked["id"]})["state"] == "verified", 60)
    app = DownloadsHost(client)
    async with app.run_test(size=(120, 40)) as pilot:
        pane = app.query_one(DownloadsPane)
        await wait_until(pilot, lambda: {fetched["id"], checked["id"]} <= set(pane.jobs))
        table = pane.query_one("#downloads-jobs", DataTable)
        assert [str(column.label) for column in table.columns.values()][:3] == ["id", "kind", "state"]
        assert str(table.get_cell(fetched["id"], "kind")) == "download"
        assert str(table.get_cell(checked["id"], "kind")) == "verify"
        # 1,500,002 bytes: decimal, one unit, as the hub lists it.
        assert str(table.get_cell(fetched["id"], "size")) == "1.50 MB"
        assert "verify" in text_of(pane.query_one("#downloads-summary", Static))  # the selected one, the newest


async def test_the_form_remembers_the_endpoint_only_when_asked(client, hub, tmp_path):
    hub.add_repo("team/tiny-eagle3", small_drafter_files(tmp_path))
    app = DownloadsHost(client)
    async with app.run_test(size=(120, 40)) as pilot:
        pane = app.query_one(DownloadsPane)
        await pilot.press("n")
        await wait_until(pilot, lambda: isinstance(app.screen, DownloadForm))
        form = app.screen
        assert form.query_one("#form-endpoint", Input).value == ""
        assert not form.query_one("#form-remember-endpoint", Checkbox).value  # off until ticked
        assert not form.query_one("#form-endpoint-note", Static).display  # nothing remembered to show
        await fill_form(pilot, {"repo": "team/tiny-eagle3", "local_dir": str(tmp_path / "tiny"), "endpoint": hub.url},
                        tick=["form-remember-endpoint"])
        await wait_until(pilot, lambda: not isinstance(app.screen, DownloadForm), timeout_s=60)
        await wait_until(pilot, lambda: len(pane.jobs) == 1)
        # The next form, for the same host, starts with the endpoint remembered, and says so.
        await pilot.press("n")
        await wait_until(pilot, lambda: isinstance(app.screen, DownloadForm))
        assert app.screen.query_one("#form-endpoint", Input).value == hub.url
        note = app.screen.query_one("#form-endpoint-note", Static)
        assert note.display and text_of(note).startswith("remembered for local")
        await pilot.press("escape")
    assert config.remembered("local", "hub_endpoint") == hub.url
    assert config.remembered("gpu01", "hub_endpoint") is None  # per host


async def test_an_unreachable_hub_points_at_the_endpoint_field(client, tmp_path):
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        closed = "http://127.0.0.1:%d" % sock.getsockname()[1]
    app = DownloadsHost(client)
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.press("n")
        await wait_until(pilot, lambda: isinstance(app.screen, DownloadForm))
        await fill_form(pilot, {"repo": "team/any", "local_dir": str(tmp_path / "any"), "endpoint": closed})
        error = app.screen.query_one("#form-error", Static)
        await wait_until(pilot, lambda: "cannot reach" in text_of(error), timeout_s=60)
        assert "put a hub mirror's URL in the endpoint field above" in text_of(error)
        assert "--endpoint" not in text_of(error)


async def test_r_on_a_verification_with_a_mismatch_repairs_the_files_it_found_wrong(client, hub, tmp_path):
    hub.add_repo("team/tiny-eagle3", small_drafter_files(tmp_path))
    local_dir = str(tmp_path / "tiny")
    spec = {"repo": "team/tiny-eagle3", "local_dir": local_dir, "endpoint": hub.url}
    first = client.call("download.start", spec, timeout=120)
    wait_for(lambda: client.call("jobs.get", {"id": first["id"]})["state"] == "verified", 60)
    os.remove(os.path.join(local_dir, "config.json"))
    check = client.call("download.verify", spec, timeout=120)
    wait_for(lambda: client.call("jobs.get", {"id": check["id"]})["state"] == "mismatch", 60)
    weights_served = hub.bytes_served("team/tiny-eagle3", "model.safetensors")
    app = DownloadsHost(client)
    async with app.run_test(size=(120, 40)) as pilot:
        pane = app.query_one(DownloadsPane)
        await wait_until(pilot, lambda: pane.selected_id == check["id"])
        pane.query_one("#downloads-jobs", DataTable).focus()
        await pilot.press("r")
        await wait_until(pilot, lambda: len(pane.jobs) == 3, timeout_s=60)
        repair = max(pane.jobs, key=lambda job_id: int(job_id[1:]))
        await wait_until(pilot, lambda: pane.jobs[repair]["state"] == "verified", timeout_s=60)
        assert str(pane.query_one("#downloads-jobs", DataTable).get_cell(repair, "kind")) == "download"
        assert pane.jobs[repair]["progress"]["file_counts"]["total"] == 1
        await wait_until(pilot, lambda: [bar.path for bar in pane.query(FileProgress)] == ["config.json"], timeout_s=30)
    assert os.path.exists(os.path.join(local_dir, "config.json"))
    assert hub.bytes_served("team/tiny-eagle3", "model.safetensors") == weights_served


async def test_a_host_that_does_not_resolve_is_named_in_the_header_and_in_the_panes(tmp_path, monkeypatch):
    from tui.app import SpecdeckApp
    from tui.telemetry.pane import GpusPane

    home = tmp_path / "home"
    (home / ".ssh").mkdir(parents=True)
    use_home(monkeypatch, home)
    app = SpecdeckApp(host="someone@no-such-host.invalid")
    async with app.run_test(size=(120, 40)) as pilot:
        await wait_until(pilot, lambda: app.connection_state == "failed", timeout_s=60)
        header = app.header.state_text
        assert "cannot resolve host 'no-such-host.invalid'" in header and "~/.ssh/config" in header and "HostName" in header
        for pane in (app.query_one(GpusPane), app.query_one(DownloadsPane)):
            status = text_of(pane.query_one(".pane-status", Static))
            assert status.startswith("not connected: cannot resolve host 'no-such-host.invalid'"), status
