"""A download of thousands of tiny files through the real local agent and the fake hub: the job's
record (what `jobs.list`, `jobs.get` and job events carry) stays a small summary whatever the file
count, `download.files` pages give every file once with its state, `specdeck download --wait` and
`specdeck jobs` read the summary, and the Downloads pane shows the files a page at a time."""

import json
import os
import subprocess
import sys

import pytest
from textual.widgets import DataTable, Static

from remote.core.protocol import RemoteError
from tests.helpers.cli import REPO_ROOT
from tests.helpers.pilot import DownloadsHost, text_of
from tests.helpers.waits import wait_for, wait_until
from tui.downloads.file_progress import FileProgress
from tui.downloads.files_view import FILES_PAGE
from tui.downloads.pane import DownloadsPane

MANY = 1200  # enough for a record that carried every file to be 100 KB
RECORD_MAX_BYTES = 16 * 1024  # one job's record, whatever the number of its files


@pytest.fixture(autouse=True)
def private_config(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    monkeypatch.delenv("HF_ENDPOINT", raising=False)


def tiny_files(n):
    """n files of 16 bytes in a few folders, as a dataset of many shards would have them."""
    return {"part%02d/f%05d.txt" % (i // 500, i): b"%015d\n" % i for i in range(n)}


def every_file(client, job_id):
    """The job's files through download.files, page after page of the largest size."""
    files, offset = [], 0
    while True:
        page = client.call("download.files", {"id": job_id, "offset": offset, "limit": 1000})
        assert page["id"] == job_id and page["offset"] == offset
        files.extend(page["files"])
        offset += len(page["files"])
        if not page["files"] or offset >= page["total"]:
            return page["total"], files


def record_of(client, job_id):
    """The job as `jobs.list` carries it, and its size on the wire."""
    job = next(job for job in client.call("jobs.list")["jobs"] if job["id"] == job_id)
    return job, len(json.dumps(job))


def cli(*args):
    """`specdeck ARGS` as a user runs it, against this test's local agent."""
    env = {k: v for k, v in os.environ.items() if k != "SSH_AUTH_SOCK"}
    env["PYTHONPATH"] = str(REPO_ROOT)
    return subprocess.Popen([sys.executable, "-m", "tui.cli", *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=env, cwd=str(REPO_ROOT))


def test_a_thousand_files_keep_the_record_small_and_page_every_file(client, hub, tmp_path):
    files = tiny_files(MANY)
    hub.add_repo("org/many", files)
    local_dir = tmp_path / "many"
    waiting = cli("download", "local", "org/many", "--local-dir", str(local_dir), "--endpoint", hub.url, "--wait")
    job_id = wait_for(lambda: next((job["id"] for job in client.call("jobs.list")["jobs"] if job["kind"] == "download"), None), 120)

    # While it runs, and once it has ended, the record is the same small summary.
    sizes = []

    def ended():
        job, size = record_of(client, job_id)
        sizes.append(size)
        return job["process_state"] not in ("running", "starting") and job

    job = wait_for(ended, 300)
    out, err = waiting.communicate(timeout=120)
    assert waiting.returncode == 0, err + out
    assert out.strip().splitlines()[-1].startswith("verified: verified %d files" % MANY)
    assert "1,200 of 1,200 files" in err  # --wait's progress line counts the files from the summary
    assert max(sizes) < RECORD_MAX_BYTES, sizes
    assert job["state"] == "verified"
    counts = job["progress"]["file_counts"]
    assert counts == {"total": MANY, "done": MANY, "verified": MANY, "failed": 0, "working": 0}
    assert job["progress"]["bytes_done"] == job["progress"]["bytes_total"] == 16 * MANY

    # Every file, once, with its state and bytes; a page past the end is empty.
    total, listed = every_file(client, job_id)
    assert total == MANY and len(listed) == MANY
    assert sorted(entry["path"] for entry in listed) == sorted(files)
    assert {(entry["state"], entry["bytes_done"], entry["bytes_total"]) for entry in listed} == {("verified", 16, 16)}
    assert client.call("download.files", {"id": job_id, "offset": MANY, "limit": 10})["files"] == []
    with pytest.raises(RemoteError) as refused:
        client.call("download.files", {"id": job_id, "limit": 5000})
    assert refused.value.type == "BadRequest"

    # 30 files damaged on disk: the verification counts them all, names a bounded few.
    damaged = sorted(files)[100:130]
    for path in damaged:
        (local_dir / path).write_bytes(b"not the hub's 16")
    check = client.call("download.verify", {"local_dir": str(local_dir)}, timeout=120)
    check = wait_for(lambda: (lambda job: job["process_state"] not in ("running", "starting") and job)(record_of(client, check["id"])[0]), 120)
    assert check["state"] == "mismatch" and record_of(client, check["id"])[1] < RECORD_MAX_BYTES
    summary = check["progress"]
    assert summary["file_counts"]["failed"] == 30 and summary["file_counts"]["verified"] == MANY - 30
    assert len(summary["verdict"]["files"]) + summary["verdict"]["files_more"] == 30
    assert set(summary["verdict"]["files"]) <= set(damaged) and [f["path"] for f in summary["failed_files"]] == damaged[:5]
    _, checked = every_file(client, check["id"])
    assert sorted(entry["path"] for entry in checked if entry["state"] == "mismatch") == damaged

    # `specdeck jobs` lists both, as a table and as JSON.
    listing = cli("jobs", "local", "--json")
    out, err = listing.communicate(timeout=120)
    assert listing.returncode == 0, err
    assert {job["id"]: job["state"] for job in json.loads(out)} == {job_id: "verified", check["id"]: "mismatch"}
    table = cli("jobs", "local")
    out, err = table.communicate(timeout=120)
    assert table.returncode == 0, err
    assert job_id in out and check["id"] in out and "org/many" in out


async def test_the_downloads_pane_shows_the_files_a_page_at_a_time(client, hub, tmp_path):
    count = 2 * FILES_PAGE + 5
    hub.add_repo("org/pages", tiny_files(count))
    job = client.call("download.start", {"repo": "org/pages", "local_dir": str(tmp_path / "pages"), "endpoint": hub.url}, timeout=120)
    wait_for(lambda: client.call("jobs.get", {"id": job["id"]})["process_state"] not in ("running", "starting"), 120)
    _, in_order = every_file(client, job["id"])
    pages = [[entry["path"] for entry in in_order[start:start + FILES_PAGE]] for start in range(0, count, FILES_PAGE)]
    app = DownloadsHost(client)
    async with app.run_test(size=(120, 40)) as pilot:
        pane = app.query_one(DownloadsPane)
        head = pane.query_one("#downloads-files-head", Static)

        def shown():
            return [bar.path for bar in pane.query(FileProgress)]

        await wait_until(pilot, lambda: shown() == pages[0], timeout_s=30)
        assert text_of(head).startswith("files 1-%d of %d" % (FILES_PAGE, count))
        pane.query_one("#downloads-jobs", DataTable).focus()
        await pilot.press("full_stop")
        await wait_until(pilot, lambda: shown() == pages[1], timeout_s=30)
        assert text_of(head).startswith("files %d-%d of %d" % (FILES_PAGE + 1, 2 * FILES_PAGE, count))
        await pilot.press("full_stop")
        await wait_until(pilot, lambda: shown() == pages[2], timeout_s=30)
        await pilot.press("full_stop")  # no page after the last: it stays, and says so
        await wait_until(pilot, lambda: "no next page" in text_of(pane.query_one("#downloads-status", Static)), timeout_s=10)
        assert shown() == pages[2]
        await pilot.press("comma")
        await wait_until(pilot, lambda: shown() == pages[1], timeout_s=30)
        assert {bar.entry["state"] for bar in pane.query(FileProgress)} == {"verified"}
