"""Slowdowns and a data generation's disk forecast, told while no console watches, to a real
loopback webhook, on one daemon replaying the recorded H200 (its GPU 0 the training job's, by
CUDA_VISIBLE_DEVICES):

- a real training job that prints speculators' step lines at a steady pace, then at a quarter
  of it (`train --slowdown 0.5/2s/60s` from `config local`, the limits in seconds): one
  `slowdown` alert with both figures and GPU 0's figures, then one `pace_back` when it is fast
  again; beside it a run whose steps keep their pace while its tokens/s (speculators'
  `profile/tokens_per_s`) fall to a quarter: its `slowdown` names both figures in tokens/s;
- at the same time a data generation (training.start, kind datagen) replaying a real one: the
  log of speculators 0.9.0's generate_offline_data (vLLM 0.32 on the CPU, 48 samples) written
  as it was, each sample's hidden states written at its recorded size, into a small tmpfs (its
  working directory) that holds about 14 of them: its progress reads 12 of 48 from the real
  bar, from its first samples' size `gpus --json` gives that disk's forecast (the sample it
  fills at) and one `datagen_disk_full` alert comes, before the disk's own fill rate says it
  fills;
- and a data generation that does not say how many samples it will write (a tqdm bar with no
  total), writing into a second tmpfs and then stopping with its process alive (`stall_after_s`
  3 s): its forecast in `gpus --json` is the disk's fill rate alone, the `disk_filling` alert
  says its total is not known, and it is told as `job_stalled` once its progress stops."""

import json
import re
import sys
import textwrap
import time
from pathlib import Path

import pytest

from tests.helpers.cli import run_cli
from tests.helpers.training import STEP_LINE
from tests.helpers.tmpfs import small_tmpfs
from tests.helpers.waits import wait_for
from tui.transport.connection import open_client

RECORDING = Path(__file__).resolve().parent / "data" / "nvml-h200.json.gz"
MIB = 1 << 20
SAMPLE = 128 * 1000
TRAINER = """\
    import os, sys, time
    n = 0
    def step(pause):
        global n
        print(%r %% (1.0 / (n + 1), n), flush=True)
        n += 1
        time.sleep(pause)
    for _ in range(30):  # 10 steps/s for 3 s
        step(0.1)
    while not os.path.exists(sys.argv[1]):  # a quarter of it, until the test lets it go
        step(0.4)
    while True:  # fast again, until the test ends it
        step(0.1)
""" % STEP_LINE
TOKENS_LINE = STEP_LINE.replace("epoch=0,", "epoch=0, profile/tokens_per_s=%.1f,")
TOKENS_TRAINER = """\
    import os, sys, time
    n = 0
    def step(tokens):
        global n
        print(%r %% (1.0 / (n + 1), tokens, n), flush=True)
        n += 1
        time.sleep(0.1)
    for _ in range(30):  # 10 steps/s at 4000 tokens/s for 3 s
        step(4000.0)
    while not os.path.exists(sys.argv[1]):  # the same steps, a quarter of the tokens (shorter sequences, a slow packer)
        step(1000.0)
    while True:
        step(4000.0)
""" % TOKENS_LINE


DATAGEN = Path(__file__).resolve().parent / "data" / "speculators-0.9.0-cpu-datagen"
REPLAY_UNTIL = 12  # samples: what a 16 MiB disk holds of the recording's, less one or two
# The recorded speculators 0.9.0 data generation (48 samples, 54.3 MB of hidden states), replayed:
# its log as it was written (the bar redrawn after each "\r"), each sample's file written at its
# recorded size as the bar counts it, two samples a second; then it waits (the test ends it).
REPLAY = """\
    import re, sys, time
    log, listing = open(sys.argv[1], "rb").read().decode(), open(sys.argv[2]).read().split()
    sizes = dict(zip(listing[1::2], map(int, listing[0::2])))
    written = 0
    for chunk in log.split("\\r"):
        found = re.search(r" (\\d+)/48 ", chunk)
        done = int(found.group(1)) if found else 0
        for n in range(written, done):
            with open("hs_%%d.safetensors" %% n, "wb") as f:
                f.write(b"h" * sizes["hs_%%d.safetensors" %% n])
        written = max(written, done)
        sys.stdout.write(chunk + "\\r")
        sys.stdout.flush()
        if done >= %d:
            time.sleep(600)
        time.sleep(0.5 if found else 0.05)
""" % REPLAY_UNTIL


OPEN_GENERATOR = """\
    import time
    began = time.monotonic()
    for n in range(1, 61):  # 5 samples a second for 12 s, no total said; then it hangs (the test ends it)
        with open("sample_%%04d.bin" %% n, "wb") as f:
            f.write(b"h" * %d)
        print("Generating: %%dit [00:01, 5.00it/s]" %% n, flush=True)
        time.sleep(max(0.0, began + n / 5.0 - time.monotonic()))
    print("waiting on the tokenizer pool", flush=True)
    time.sleep(600)
""" % (SAMPLE // 2)


@pytest.fixture
def gpu_client(agent_home, monkeypatch):
    monkeypatch.setenv("SPECDECK_NVML_REPLAY", "%s:1" % RECORDING)
    client = open_client("local")
    yield client
    client.close()


def alerts_of(receiver, job_id, kinds=("slowdown", "pace_back", "datagen_disk_full")):
    """The receiver's alerts about the job of these kinds (the host's own disk may fill under a
    run's working directory while it runs: told too, and not what these assert)."""
    return [a for body in receiver.json_bodies() for a in body["alerts"] if a["job_id"] == job_id and a["kind"] in kinds]


def test_a_run_at_a_quarter_of_its_pace_and_a_datagen_that_will_not_fit_are_told_once_each(gpu_client, receiver, tmp_path):
    client = gpu_client
    # A channel per category: each stays within the five single messages a minute that a channel
    # sends before it holds the rest for a digest.
    for path, categories in (("/hook", "slowdown"), ("/disks", "disks"), ("/stalls", "stalled")):
        client.call("notify.add", {"url": receiver.url + path, "format": "json", "on": categories})
    with small_tmpfs(tmp_path / "tiny", 16 * MIB) as disk, small_tmpfs(tmp_path / "open", 32 * MIB) as open_disk:
        datagen = client.call("training.start", {"kind": "datagen", "name": "hidden states", "cwd": str(disk), "argv": [
            sys.executable, "-c", textwrap.dedent(REPLAY), str(DATAGEN / "generate-offline-data.log"), str(DATAGEN / "output-listing.txt")]})["id"]
        open_ended = client.call("training.start", {"kind": "datagen", "name": "stream shards", "cwd": str(open_disk),
                                                    "stall_after_s": 3,
                                                    "argv": [sys.executable, "-c", textwrap.dedent(OPEN_GENERATOR)]})["id"]
        try:
            slowed_down_and_back(client, receiver, tmp_path)
            forecast_told_and_shown(client, receiver, datagen, disk)
            rate_alone_and_stalled(client, receiver, open_ended, open_disk)
        finally:
            for job_id in (datagen, open_ended):
                client.call("jobs.stop", {"id": job_id, "grace_s": 0})
                wait_for(lambda: client.call("jobs.get", {"id": job_id})["process_state"] != "running", message="the job's end")
    kinds = [a["kind"] for a in client.call("notify.list")["recent"] if a["job_id"] == datagen][::-1]
    assert kinds[0] == "datagen_disk_full" and kinds.count("datagen_disk_full") == 1, kinds  # before the disk's own rate said so


def slowed_down_and_back(client, receiver, tmp_path):
    bad = run_cli("config", "local", "--slowdown", "half", check=2)
    assert "--slowdown: the fraction is a number from 0 to 1" in bad.stderr
    run_cli("config", "local", "--slowdown", "0.5/2s/60s", check=0)  # the host's default: train sends it
    script, tokens_script, go = tmp_path / "trainer.py", tmp_path / "tokens_trainer.py", tmp_path / "go"
    script.write_text(textwrap.dedent(TRAINER))
    tokens_script.write_text(textwrap.dedent(TOKENS_TRAINER))
    job_id = run_cli("train", "local", "--name", "eagle3 slow", "--env", "CUDA_VISIBLE_DEVICES=0", "--",
                     sys.executable, "-u", str(script), str(go), check=0).stdout.strip()
    tokens_job = run_cli("train", "local", "--name", "eagle3 short seqs", "--", sys.executable, "-u", str(tokens_script), str(go),
                         check=0).stdout.strip()
    assert client.call("jobs.get", {"id": job_id})["meta"]["slowdown"] == {"fraction": 0.5, "for_s": 2.0, "median_s": 60.0}

    slow, = wait_for(lambda: alerts_of(receiver, job_id) or None, message="the slowdown's alert")
    assert slow["kind"] == "slowdown" and slow["categories"] == ["slowdown", "training"] and not slow["urgent"]
    found = re.match(r"%s \(eagle3 slow\) at ([\d.]+) steps/s, its hour's median ([\d.]+) steps/s, for \d+ s; GPU 0: " % job_id,
                     slow["message"])
    assert found, slow["message"]
    pace, median = float(found.group(1)), float(found.group(2))
    assert pace < 0.5 * median and 6 <= median <= 14, slow["message"]  # ~2.5 against ~10
    gpu, = slow["gpus"]
    assert gpu["index"] == 0 and gpu["utilization_percent"] is not None and "%d%% busy" % gpu["utilization_percent"] in slow["message"]
    assert re.search(r"GPU 0: .*(not throttled|throttled \(.+\))", slow["message"]), slow["message"]
    assert slow["gpu_figures_age_s"] is not None and "global_step" in slow["log_tail"][-1]

    tokens_slow, = wait_for(lambda: alerts_of(receiver, tokens_job) or None, message="the tokens/s slowdown's alert")
    found = re.match(r"%s \(eagle3 short seqs\) at ([\d.]+) tokens/s, its hour's median ([\d.]+) tokens/s, for \d+ s; "
                     % tokens_job, tokens_slow["message"])
    assert found and tokens_slow["kind"] == "slowdown" and tokens_slow["unit"] == "tokens/s", tokens_slow["message"]
    assert 900 <= float(found.group(1)) < 2000 and 3000 <= float(found.group(2)) <= 4000, tokens_slow["message"]  # ~1000 against 4000
    assert round(tokens_slow["pace"]) == float(found.group(1)) and round(tokens_slow["median_pace"]) == float(found.group(2))

    go.write_text("")
    _, tokens_back = wait_for(lambda: (lambda found: found if len(found) >= 2 else None)(alerts_of(receiver, tokens_job)),
                              message="the tokens/s follow-up")
    assert tokens_back["kind"] == "pace_back" and " tokens/s (its median " in tokens_back["message"]
    client.call("jobs.stop", {"id": tokens_job, "grace_s": 0})
    # Its steps kept their pace: told once, by its tokens/s alone.
    assert [a["kind"] for a in client.call("notify.list")["recent"] if a["job_id"] == tokens_job and a["kind"] != "disk_filling"] == ["pace_back", "slowdown"]
    _, back = wait_for(lambda: (lambda found: found if len(found) >= 2 else None)(alerts_of(receiver, job_id)),
                       message="the follow-up")
    assert back["kind"] == "pace_back" and not back["urgent"] and back["categories"] == ["slowdown", "training"]
    assert re.match(r"%s \(eagle3 slow\) back to pace after \d+ s: [\d.]+ steps/s \(its median [\d.]+ steps/s, at its slowest [\d.]+\)"
                    % job_id, back["message"]), back["message"]
    client.call("jobs.stop", {"id": job_id, "grace_s": 0})
    assert [a["kind"] for a in client.call("notify.list")["recent"] if a["job_id"] == job_id and a["kind"] != "disk_filling"] == ["pace_back", "slowdown"]
    assert len(alerts_of(receiver, job_id)) == 2


def forecast_told_and_shown(client, receiver, datagen, disk):
    told = wait_for(lambda: [a for a in alerts_of(receiver, datagen) if a["kind"] == "datagen_disk_full"] or None,
                    message="the forecast's alert")
    alert, = told
    assert alert["kind"] == "datagen_disk_full" and alert["categories"] == ["disks"] and alert["urgent"]
    found = re.match(r"%s \(hidden states\) will not fit on %s: its first (\d+) samples took ([\d.]+) MB each, its (\d+) "
                     r"samples left need ([\d.]+) MB, ([\d.]+) MB is free: full at about sample (\d+) of 48"
                     % (datagen, re.escape(str(disk))), alert["message"])
    assert found, alert["message"]
    size_mb, left, needed_mb, free_mb, full_at = (float(found.group(i)) for i in range(2, 7))
    # The recording's samples weigh 0.41-1.23 MB (its first twelve 0.72-1.23 MB; 1.13 MB on average).
    assert 0.7 <= size_mb <= 1.3 and 36 <= left < 48 and needed_mb > 40 and free_mb < 16.8, alert["message"]
    assert 12 <= full_at <= 17, alert["message"]  # 16 MiB of ~1.2 MB samples: ~14
    forecast = alert["forecast"]
    assert forecast["job_id"] == datagen and forecast["full_at_sample"] == int(full_at)

    def shown():
        sample = json.loads(run_cli("gpus", "local", "--json", check=0).stdout)
        entry = next((d for d in sample["host"]["disks"] if d["path"] == str(disk)), None)
        return entry if entry and entry.get("datagen") else None

    entry = wait_for(shown, message="the forecast in gpus --json")
    shown_forecast, = entry["datagen"]
    # The bar it stops at ends in "\r" with nothing after (it may yet be "\r\n"): read up to the one before.
    progress = wait_for(lambda: (lambda p: p if (p.get("done") or 0) >= REPLAY_UNTIL - 1 else None)(
        client.call("jobs.get", {"id": datagen})["progress"] or {}), message="the replay's bars read")
    assert progress["total"] == 48 and progress["state"] == "generating" and progress["rate"] > 0
    assert shown_forecast["job_id"] == datagen and shown_forecast["full_at_sample"] is not None
    # Read while the last bar is a sample behind (see above), the bytes of n+1 samples are divided
    # by n: at twelve samples of up to 1.23 MB, up to ~1.4 MB a sample.
    assert 700000 <= shown_forecast["bytes_per_sample"] <= 1450000


def rate_alone_and_stalled(client, receiver, job_id, disk):
    def filling():
        told = [a for a in alerts_of(receiver, job_id, ("disk_filling",)) if a["disk"] == str(disk)]
        return told or None

    told, = wait_for(filling, message="the open-ended generation's disk_filling alert")
    found = re.match(r"%s will be full at (\d\d:\d\d) \(in .+\): .+ free, filling at .+/s; written by %s \(stream shards\); "
                     r"%s \(stream shards\) does not say how many samples it will write: the time is the fill rate's alone$"
                     % (re.escape(str(disk)), job_id, job_id), told["message"])
    assert found and told["totals_unknown"] == [job_id] and told["jobs"] == [job_id], told["message"]
    assert time.strftime("%H:%M", time.localtime(told["full_at"])) == found.group(1)

    def shown():
        sample = json.loads(run_cli("gpus", "local", "--json", check=0).stdout)
        entry = next((d for d in sample["host"]["disks"] if d["path"] == str(disk)), None)
        return entry if entry and entry.get("datagen") else None

    entry = wait_for(shown, message="the rate-alone forecast in gpus --json")
    forecast, = entry["datagen"]
    assert forecast["job_id"] == job_id and forecast["total_known"] is False and forecast["full_at_sample"] is None
    # The disk's own figures (those of the check before this sample at most a second older).
    full_at = entry["read_at"] + entry["full_in_s"]
    assert forecast["full_in_s"] > 0 and abs(forecast["full_at"] - full_at) <= 0.1 * entry["full_in_s"] + 2, (forecast, entry)

    stalled, = wait_for(lambda: alerts_of(receiver, job_id, ("job_stalled",)) or None, message="the generation's stall")
    assert stalled["categories"] == ["stalled", "training"] and stalled["urgent"]
    assert re.match(r"%s \(stream shards\): its progress has not moved for \d+ s \(stall limit 3 s\); before: 60 samples"
                    % job_id, stalled["message"]), stalled["message"]
    assert stalled["log_tail"][-1] == "waiting on the tokenizer pool"
    progress = client.call("jobs.get", {"id": job_id})["progress"]
    assert progress["done"] == 60 and progress["total"] is None and progress["rate"] == 5.0
