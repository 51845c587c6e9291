"""A disk filling under a running job, on the real agent: a job writing into a small tmpfs (its
working directory) at a steady rate until under 1% is left. `gpus --json` gives that disk's fill
rate and when it fills, with the job writing there; the GPUs pane shows the fill time beside the
disk; one `disk_filling` alert reaches a real loopback webhook with the console closed, naming the
disk and the job, then one `disk_nearly_full` under 2%."""

import json
import sys
import textwrap

import pytest
from textual.widgets import Static

from tests.helpers.cli import run_cli
from tests.helpers.pilot import GpusApp
from tests.helpers.tmpfs import small_tmpfs
from tests.helpers.waits import wait_for, wait_until
from tui.transport.connection import open_client
from tui.telemetry.pane import GpusPane

MIB = 1 << 20
SIZE = 8 * MIB
RATE = 2 * MIB  # bytes per second the writer aims at
WRITER = """\
    import os, time
    chunk = b"x" * (%d // 32)
    began, written = time.monotonic(), 0
    with open("fill.bin", "wb") as f:
        while True:
            st = os.statvfs(".")
            if st.f_bavail < st.f_blocks // 100:
                break
            f.write(chunk)
            f.flush()
            written += len(chunk)
            time.sleep(max(0.0, began + written / %d - time.monotonic()))
    print("under 1%% left", flush=True)
    time.sleep(600)
""" % (RATE, RATE)


@pytest.fixture
def tiny_fs(tmp_path):
    with small_tmpfs(tmp_path / "tiny", SIZE) as mnt:
        yield mnt


def disk_alerts(receiver):
    return [a for body in receiver.json_bodies() for a in body["alerts"] if a["categories"] == ["disks"]]


def the_disk(path):
    sample = json.loads(run_cli("gpus", "local", "--json", check=0).stdout)
    return next((d for d in sample["host"]["disks"] if d["path"] == str(path)), None)


async def test_a_job_filling_a_small_disk_is_forecast_shown_and_told_once_then_under_2_percent(client, receiver, tiny_fs):
    client.call("notify.add", {"url": receiver.url + "/hook", "format": "json", "on": "disks"})
    # A short window, so the rate follows a tmpfs that fills in seconds (the default is 10 min).
    settings = client.call("telemetry.configure", {"alerts": {"disk_filling": {"window_s": 20}}})
    assert settings["alerts"]["disk_filling"] == {"enabled": True, "horizon_s": 3600, "low_percent": 2, "window_s": 20}
    job_id = run_cli("run", "local", "--name", "filler", "--cwd", str(tiny_fs), "--",
                     sys.executable, "-c", textwrap.dedent(WRITER), check=0).stdout.strip()
    try:
        disk = wait_for(lambda: (lambda d: d if d and d["full_in_s"] is not None else None)(the_disk(tiny_fs)),
                        message="the tmpfs's fill rate in gpus --json")
        assert disk["role"] == "jobs" and disk["jobs"] == [job_id] and disk["total_bytes"] == SIZE
        assert RATE / 4 < disk["fill_rate_bytes_per_s"] < RATE * 1.5, disk
        # When it fills: its free bytes at its rate, no later than the writer's pace allows.
        assert abs(disk["full_in_s"] - disk["free_bytes"] / disk["fill_rate_bytes_per_s"]) <= 0.01 * disk["full_in_s"] + 0.1
        assert 0 < disk["full_in_s"] < 4 * SIZE / RATE
        assert "filling +" in run_cli("gpus", "local", check=0).stdout

        pane_client = open_client("local")
        app = GpusApp(client=pane_client)
        try:
            async with app.run_test(size=(80, 24)) as pilot:
                pane = app.query_one(GpusPane)
                await wait_until(pilot, lambda: "jobs " in str(app.query_one("#gpu-host", Static).render()), message="the disk in the pane")
                line = str(app.query_one("#gpu-host", Static).render()).splitlines()[-1]
                assert pane.sample is not None
                assert "jobs " in line and " free, full in " in line, line
        finally:
            pane_client.close()

        filling, low = wait_for(lambda: (lambda found: found if len(found) >= 2 else None)(disk_alerts(receiver)),
                                message="the disk's two alerts")
        assert filling["kind"] == "disk_filling" and filling["urgent"] and filling["disk"] == str(tiny_fs)
        assert filling["jobs"] == [job_id] and filling["job_id"] == job_id
        assert filling["message"].startswith("%s will be full at " % tiny_fs) and "filling at" in filling["message"]
        assert filling["message"].endswith("; written by %s (filler)" % job_id), filling["message"]
        assert filling["fill_rate_bytes_per_s"] > 0 and filling["full_at"] > filling["time"]
        assert low["kind"] == "disk_nearly_full" and low["disk"] == str(tiny_fs)
        assert "% left: " in low["message"] and low["free_bytes"] < SIZE * 0.02
        # Each once: the writer is still there, the disk still nearly full.
        wait_for(lambda: "under 1% left" in client.call("jobs.tail", {"id": job_id})["text"],
                 message="the writer done")
        kinds = [a["kind"] for a in client.call("notify.list")["recent"] if a["kind"].startswith("disk_")]
        assert kinds == ["disk_nearly_full", "disk_filling"]
        assert len(disk_alerts(receiver)) == 2
    finally:
        client.call("jobs.stop", {"id": job_id, "grace_s": 0})
