"""Measured accept length per checkpoint, end to end over a real vLLM on the CPU: a training job
(replaying a real speculators log, then writing a checkpoint: the serving fixtures' `agree`
drafter, which the tiny target accepts every draft of) started with `specdeck train --measure-...`;
the checkpoint is inspected, the A/B benchmark job runs it against the target, and the checkpoint
list shows the measured accept length (exactly K+1 = 4.00) beside the predicted one (~1.0 from
the log of a barely trained drafter), judged against break-even by the measured one.

One benchmark job (a baseline and a speculative vLLM start, ~55 s each when the machine is idle)
with two short requests per server."""

import json
import os
import shlex
from pathlib import Path

import pytest

from remote.training import logparse
from tests import serving_fixtures
from tests.helpers.cli import run_cli
from tests.helpers.waits import wait_for
from tests.helpers.vllm import free_port

pytestmark = pytest.mark.timeout(900)
LOG = Path(__file__).parent / "data" / "speculators-train-80cols.log"


def test_checkpoint_measured_against_the_target(agent_home, tmp_path):
    python = serving_fixtures.require_vllm()
    models = serving_fixtures.models(os.path.dirname(serving_fixtures.VLLM_VENV), python)
    save = tmp_path / "save"
    drafter = models["drafter_agree"]
    # The run: its log as speculators printed it, then epoch 0's checkpoint, written the way a
    # trainer writes one (weights first, config last), and a while before it exits.
    script = "cat %s; mkdir -p %s/0; cp %s/model.safetensors %s/0/; cp %s/config.json %s/0/; sleep 5" % (
        shlex.quote(str(LOG)), save, drafter, save, drafter, save)
    measure = ["--measure-target", models["target"], "--measure-python", python, "--measure-k", "3",
               "--measure-requests", "2", "--measure-max-tokens", "24", "--measure-port", str(free_port())]
    for key, value in serving_fixtures.SERVER_ENV.items():
        measure += ["--measure-env", "%s=%s" % (key, value)]
    measure += ["--measure-arg=%s" % arg for arg in serving_fixtures.ENGINE_ARGS]
    started = run_cli("train", "local", "--save-dir", str(save), "--target", models["target"], "--break-even", "2.46",
                      *measure, "--json", "--", "sh", "-c", script, home=agent_home, check=0)
    job_id = json.loads(started.stdout)["id"]

    def measured():
        answered = run_cli("checkpoints", "local", job_id, "--json", home=agent_home)
        if answered.returncode != 0:
            return None
        entries = json.loads(answered.stdout)["checkpoints"]
        if entries and (entries[0].get("measure") or {}).get("state") in ("done", "failed"):
            return entries
        return None

    entries = wait_for(measured, 840, interval_s=2.0)
    assert len(entries) == 1
    entry = entries[0]
    assert entry["measure"]["state"] == "done", entry["measure"]
    # Every draft of the agree drafter is accepted: K+1 tokens per cycle.
    assert entry["measured_accept_length"] == pytest.approx(4.0)
    assert entry["measure"]["result"]["k"] == 3 and entry["measure"]["result"]["spec_tps"] > 0
    # The predicted length is its epoch's validation's (the run's one rule, said so), its step the
    # epoch's last: the log went on to epoch 1 before the checkpoint came.
    records = logparse.parse_text(LOG.read_text())
    validation = next(r for r in records if r["kind"] == "validation" and r["epoch"] == 0)
    assert entry["predicted_accept_length"] == pytest.approx(1 + sum(validation["full_acc"]))
    assert entry["predicted_from"] == "validation"
    assert entry["step"] == max(r["step"] for r in records if r["kind"] == "step" and r["epoch"] == 0)
    assert entry["predicted_accept_length"] < 2.46
    # Judged by what was measured, not by the prediction.
    assert entry["verdict"] == "above break-even"
    benchmark = json.loads(run_cli("jobs", "local", "--json", home=agent_home).stdout)
    bench_job = next(j for j in benchmark if j["id"] == entry["measure"]["job"])
    assert bench_job["kind"] == "benchmark" and bench_job["meta"]["drafter"] == str(save / "0")
    text = run_cli("checkpoints", "local", job_id, home=agent_home).stdout
    assert "measured 4.00" in text and "above break-even" in text
