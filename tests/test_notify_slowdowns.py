"""Slowdowns told while no console watches, to a real loopback webhook: a real training job that
prints speculators' step lines at a steady pace, then at a quarter of it (started with `train
--slowdown 0.5/2s/60s`, the limits in seconds), on a daemon replaying the recorded H200 (its GPU
0 the job's, by CUDA_VISIBLE_DEVICES): one `slowdown` alert with both figures and GPU 0's
figures, then one `pace_back` when it is fast again."""

import re
import sys
import textwrap
from pathlib import Path

import pytest

from tests.conftest import run_cli
from tests.helpers.waits import wait_for
from tests.notify_receiver import Receiver
from tui.connection import open_client

RECORDING = Path(__file__).resolve().parent / "data" / "nvml-h200.json.gz"
STEP_LINE = ("[17:21:37] INFO     train/loss_0=0.025, train/full_acc_0=0.00e+00, train/loss=%.3f, epoch=0, "
             "lr/AdamW=9.09e-04, global_step=%d                     trainer.py:587")
TRAINER = """\
    import os, sys, time
    n = 0
    def step(pause):
        global n
        print(%r %% (1.0 / (n + 1), n), flush=True)
        n += 1
        time.sleep(pause)
    for _ in range(40):  # 10 steps/s for 4 s
        step(0.1)
    while not os.path.exists(sys.argv[1]):  # a quarter of it, until the test lets it go
        step(0.4)
    for _ in range(30):
        step(0.1)
""" % STEP_LINE


@pytest.fixture
def gpu_client(agent_home, monkeypatch):
    monkeypatch.setenv("SPECDECK_NVML_REPLAY", "%s:1" % RECORDING)
    client = open_client("local")
    yield client
    client.close()


@pytest.fixture
def receiver():
    found = Receiver()
    yield found
    found.close()


def alerts_of(receiver, job_id):
    return [a for body in receiver.json_bodies() for a in body["alerts"] if a["job_id"] == job_id]


def test_a_run_at_a_quarter_of_its_pace_is_told_once_with_both_figures_and_its_gpu_then_when_back(gpu_client, receiver, tmp_path):
    client = gpu_client
    client.call("notify.add", {"url": receiver.url + "/hook", "format": "json", "on": "slowdown"})
    bad = run_cli("config", "local", "--slowdown", "half", check=2)
    assert "--slowdown: the fraction is a number from 0 to 1" in bad.stderr
    run_cli("config", "local", "--slowdown", "0.5/2s/60s", check=0)  # the host's default: train sends it
    script, go = tmp_path / "trainer.py", tmp_path / "go"
    script.write_text(textwrap.dedent(TRAINER))
    job_id = run_cli("train", "local", "--name", "eagle3 slow", "--env", "CUDA_VISIBLE_DEVICES=0", "--",
                     sys.executable, "-u", str(script), str(go), check=0).stdout.strip()
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

    go.write_text("")
    _, back = wait_for(lambda: (lambda found: found if len(found) >= 2 else None)(alerts_of(receiver, job_id)),
                       message="the follow-up")
    assert back["kind"] == "pace_back" and not back["urgent"] and back["categories"] == ["slowdown", "training"]
    assert re.match(r"%s \(eagle3 slow\) back to pace after \d+ s: [\d.]+ steps/s \(its median [\d.]+ steps/s, at its slowest [\d.]+\)"
                    % job_id, back["message"]), back["message"]
    wait_for(lambda: client.call("jobs.get", {"id": job_id})["state"] == "succeeded", message="the run's end")
    assert [a["kind"] for a in client.call("notify.list")["recent"] if a["job_id"] == job_id] == ["pace_back", "slowdown"]
    assert len(alerts_of(receiver, job_id)) == 2
