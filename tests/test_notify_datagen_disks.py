"""A data generation that will not fit, on the real agent: a job started as a data generation
(training.start, kind datagen) that says it will write 1000 samples and writes 128 kB each into a small tmpfs (its working
directory) that holds about 60 of them. From its first samples' size `gpus --json` gives that
disk's forecast (the sample it fills at) and one `datagen_disk_full` alert reaches a real
loopback webhook, once and before the disk's own fill rate says it fills."""

import json
import re
import sys
import textwrap

import pytest

from tests.conftest import run_cli
from tests.helpers.tmpfs import small_tmpfs
from tests.helpers.waits import wait_for
from tests.notify_receiver import Receiver

MIB = 1 << 20
SAMPLE = 128 * 1000
GENERATOR = """\
    import time
    print("Processing 1000 samples", flush=True)
    began = time.monotonic()
    for n in range(1, 51):  # 10 samples a second, then it waits (the test ends it)
        with open("sample_%%04d.bin" %% n, "wb") as f:
            f.write(b"h" * %d)
        print("%%d/1000 [00:01<01:39, 10.0it/s]" %% n, flush=True)
        time.sleep(max(0.0, began + n / 10.0 - time.monotonic()))
    time.sleep(600)
""" % SAMPLE


@pytest.fixture
def receiver():
    found = Receiver()
    yield found
    found.close()


def test_a_data_generation_whose_first_samples_say_it_will_not_fit_is_forecast_and_told_once(client, receiver, tmp_path):
    client.call("notify.add", {"url": receiver.url + "/hook", "format": "json", "on": "disks"})
    with small_tmpfs(tmp_path / "tiny", 8 * MIB) as disk:
        job_id = client.call("training.start", {"kind": "datagen", "name": "hidden states", "cwd": str(disk),
                                                "argv": [sys.executable, "-c", textwrap.dedent(GENERATOR)]})["id"]
        try:
            told = wait_for(lambda: [a for body in receiver.json_bodies() for a in body["alerts"] if a["job_id"] == job_id] or None,
                            message="the forecast's alert")
            alert, = told
            assert alert["kind"] == "datagen_disk_full" and alert["categories"] == ["disks"] and alert["urgent"]
            found = re.match(r"%s \(hidden states\) will not fit on %s: its first (\d+) samples took ([\d.]+) kB each, its (\d+) "
                             r"samples left need ([\d.]+) MB, ([\d.]+) MB is free: full at about sample (\d+) of 1000"
                             % (job_id, re.escape(str(disk))), alert["message"])
            assert found, alert["message"]
            size_kb, left, needed_mb, free_mb, full_at = (float(found.group(i)) for i in range(2, 7))
            assert 100 <= size_kb <= 160 and 900 <= left < 1000 and needed_mb > 100 and free_mb < 8.4, alert["message"]
            assert 40 <= full_at <= 90, alert["message"]  # 8 MiB of 128 kB samples: ~65
            forecast = alert["forecast"]
            assert forecast["job_id"] == job_id and forecast["full_at_sample"] == int(full_at)

            def shown():
                sample = json.loads(run_cli("gpus", "local", "--json", check=0).stdout)
                entry = next((d for d in sample["host"]["disks"] if d["path"] == str(disk)), None)
                return entry if entry and entry.get("datagen") else None

            entry = wait_for(shown, message="the forecast in gpus --json")
            shown_forecast, = entry["datagen"]
            assert shown_forecast["job_id"] == job_id and shown_forecast["full_at_sample"] is not None
            assert 100000 <= shown_forecast["bytes_per_sample"] <= 160000
        finally:
            client.call("jobs.stop", {"id": job_id, "grace_s": 0})
            wait_for(lambda: client.call("jobs.get", {"id": job_id})["process_state"] != "running", message="the job's end")
    kinds = [a["kind"] for a in client.call("notify.list")["recent"] if a["job_id"] == job_id][::-1]
    assert kinds[0] == "datagen_disk_full" and kinds.count("datagen_disk_full") == 1, kinds  # before the disk's own rate said so
