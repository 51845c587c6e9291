"""A stopped download's files say stopped, with what each kept, never `downloading` (issue 40,
item 9): in `download.files` and in the Downloads pane's file rows, against the real local agent
and the fake hub over real HTTP, throttled so the stop comes mid-file."""

from textual.widgets import Label

from tests.helpers.pilot import DownloadsHost, text_of
from tests.helpers.waits import wait_for, wait_until
from tests.hub_fixtures import blob
from tui.display import format_bytes
from tui.downloads.file_progress import FileProgress
from tui.downloads.pane import DownloadsPane

MB = 1000 * 1000


async def test_a_stopped_downloads_files_say_stopped_and_what_they_kept(client, hub, tmp_path):
    # More files than the job's workers: some at work when it stops, one not yet begun.
    files = {"part-%d.bin" % n: blob(3 * MB, n) for n in range(12)}
    hub.add_repo("team/slow", files)
    hub.throttle(200 * 1000)
    job = client.call("download.start", {"repo": "team/slow", "local_dir": str(tmp_path / "slow"), "endpoint": hub.url}, timeout=120)
    wait_for(lambda: (client.call("jobs.get", {"id": job["id"]}).get("progress") or {}).get("bytes_done"), 60)
    client.call("jobs.stop", {"id": job["id"], "grace_s": 10})
    wait_for(lambda: client.call("jobs.get", {"id": job["id"]})["state"] == "stopped", 60)

    page = client.call("download.files", {"id": job["id"], "limit": 100})
    states = {entry["path"]: entry["state"] for entry in page["files"]}
    assert set(states.values()) == {"stopped"}, states
    kept = [entry for entry in page["files"] if entry["bytes_done"]]
    assert kept and all(0 < entry["bytes_done"] < entry["bytes_total"] for entry in kept)
    assert len(kept) < len(files)  # and files never begun: stopped, nothing kept

    app = DownloadsHost(client)
    async with app.run_test(size=(120, 40)) as pilot:
        pane = app.query_one(DownloadsPane)

        def rows():
            return {bar.path: text_of(bar.query_one(Label)) for bar in pane.query(FileProgress)}

        await wait_until(pilot, lambda: len(rows()) == len(files), timeout_s=30)
        shown = rows()
        assert not [text for text in shown.values() if "downloading" in text], shown
        for entry in page["files"]:
            said = "stopped  kept %s of %s" % (format_bytes(entry["bytes_done"]), format_bytes(entry["bytes_total"])) \
                if entry["bytes_done"] else "stopped  %s of %s" % (format_bytes(0), format_bytes(entry["bytes_total"]))
            assert shown[entry["path"]].endswith(said), (entry, shown[entry["path"]])
