"""Checkpoints ranked by the accept length they will reach, not by the trainer's loss: a run whose
epoch directories are real drafters (tests/serving_fixtures.py's agreeing one as epoch 0, its
random one as epoch 1, which the trainer links as checkpoint_best) is scored for real by the
local agent's score job under the speculators venv's python, on the tiny target's hidden states
that vLLM captured (tests/data/score-tiny): `checkpoints --score` prints each checkpoint's
predicted accept length beside the trainer's figures and marks the agreeing one best by it
beside the trainer's best; `train --score-data` scores each checkpoint as it lands; `curves
--json` and the Training pane (Pilot) carry the column and both marks."""

import json
import os
import shutil
import struct
from pathlib import Path

import pytest
from textual.widgets import DataTable, Static

from tests import serving_fixtures
from tests.helpers.cli import run_cli
from tests.helpers.pilot import OnePane
from tests.helpers.waits import wait_for, wait_until
from tui.training.pane import TrainingPane

pytestmark = pytest.mark.timeout(600)
DATA = Path(__file__).resolve().parent / "data" / "score-tiny"
LOG = Path(__file__).resolve().parent / "data" / "speculators-train-200cols.log"
K = 3
ANSWER = 24  # each recorded row ends in the target's 24-token answer (the loss mask's part)
HELD_OUT_ROW = 7  # speculators validates on the last 10% of rows: row 7 of 8, which ends in a spoiler


def expected_agreeing_score():
    """The agreeing drafter's accept length on the held-out row, from the row's own tokens: every
    chain accepts K drafts (K+1 tokens) but the one that starts at the spoiler (its first draft
    rejected: 1 token)."""
    from remote.scoring import tensors

    spans = tensors.header_spans(str(DATA / "hidden_states" / ("hs_%d.safetensors" % HELD_OUT_ROW)))
    raw = bytes(tensors.read_span(spans["token_ids"]))
    tokens = list(struct.unpack("<%dq" % (len(raw) // 8), raw))
    mask = [0] * (len(tokens) - ANSWER) + [1] * ANSWER
    starts = [a for a in range(len(tokens) - K) if mask[a + 1]]
    spoiled = sum(1 for a in starts if tokens[a] in serving_fixtures.SPOILER_TOKENS)
    assert spoiled == 1
    return ((len(starts) - spoiled) * (K + 1) + spoiled) / float(len(starts))


@pytest.fixture
def run_parts(speculators_python, agent_home, tmp_path):
    """The tiny target, the agreeing and random drafters, the script of a run that writes them as
    epochs 0 and 1 (the trainer's best: 1) after replaying a speculators log, and the ML
    interpreter remembered for `local`."""
    models = serving_fixtures.models(os.path.dirname(serving_fixtures.VLLM_VENV), str(speculators_python))
    save = tmp_path / "save"
    script = ("cat {log}; mkdir -p {save}; cp -r {agree} {save}/0; cp -r {random} {save}/1; ln -s 1 {save}/checkpoint_best"
              .format(log=LOG, save=save, agree=models["drafter_agree"], random=models["drafter_random"]))
    run_cli("config", "local", "--ml-python", str(speculators_python), home=agent_home, check=0)
    return {"target": models["target"], "save": save, "argv": ["sh", "-c", script]}


def curves(home, job_id):
    answered = run_cli("curves", "local", job_id, "--json", home=home)
    return json.loads(answered.stdout) if answered.returncode == 0 else None


def by_name(reply):
    return {c["name"]: c for c in reply["checkpoints"]}


def test_checkpoints_score_ranks_the_agreeing_epoch_best_where_the_trainer_kept_the_other(run_parts, agent_home):
    started = run_cli("train", "local", "--save-dir", str(run_parts["save"]), "--target", run_parts["target"], "--name", "two epochs",
                      "--json", "--", *run_parts["argv"], home=agent_home, check=0)
    job_id = json.loads(started.stdout)["id"]
    listed = wait_for(lambda: (lambda r: r if r and len(r["checkpoints"]) == 2 and r["process_state"] not in ("running", "starting") else None)(
        curves(agent_home, job_id)), 120)
    assert [c["verdict"] for c in listed["checkpoints"]] == ["ok", "ok"] and listed["best"] == "1"

    reply = json.loads(run_cli("checkpoints", "local", job_id, "--score", "--data", str(DATA), "--k", K, "--json",
                               home=agent_home, timeout=600, check=0).stdout)
    scored = by_name(reply)
    assert scored["0"]["scored_accept_length"] == pytest.approx(expected_agreeing_score(), abs=1e-12)
    assert scored["1"]["scored_accept_length"] == 1.0
    assert reply["best"] == "1" and reply["best_by_accept_length"] == "0"  # the trainer's pick, and the score's
    assert scored["0"]["best_by_accept_length"] and not scored["1"]["best_by_accept_length"] and scored["1"]["best"]
    assert reply["k"] == K and reply["split"] == "val" and reply["held_out"] is True and reply["samples_scored"] == 1
    # One job for the whole set: both checkpoints name the same one.
    jobs = [j for j in json.loads(run_cli("jobs", "local", "--json", home=agent_home, check=0).stdout) if j["kind"] == "score"]
    assert len(jobs) == 1 and scored["0"]["score"]["job"] == scored["1"]["score"]["job"] == jobs[0]["id"] == reply["job"]
    # Each checkpoint's speculation profile lies beside it.
    for name in ("0", "1"):
        profile = json.loads((run_parts["save"] / name / "speculation_profile.json").read_text())
        assert profile["mean_accept_length"] == round(scored[name]["scored_accept_length"], 6)

    # The run keeps the result: curves carries the column and both marks once its feed has read the job's end.
    kept = wait_for(lambda: (lambda r: r if r and all(c["scored_accept_length"] is not None for c in r["checkpoints"]) else None)(
        curves(agent_home, job_id)), 60)
    assert {n: c["scored_accept_length"] for n, c in by_name(kept).items()} == {n: c["scored_accept_length"] for n, c in scored.items()}
    assert kept["best"] == "1" and kept["best_by_accept_length"] == "0"
    assert by_name(kept)["0"]["score"]["state"] == "done" and by_name(kept)["0"]["score"]["result"]["k"] == K

    text = run_cli("checkpoints", "local", job_id, home=agent_home, check=0).stdout.splitlines()
    line_of = {name: next(line for line in text if "/save/%s " % name in line) for name in ("0", "1")}
    assert "scored %.2f" % scored["0"]["scored_accept_length"] in line_of["0"] and "(best by accept length)" in line_of["0"]
    assert "scored 1.00" in line_of["1"] and "(best)" in line_of["1"] and "best by accept length" not in line_of["1"]
    said = run_cli("curves", "local", job_id, home=agent_home, check=0).stdout
    assert "best: 1 * by the trainer; 0 ^ by scored accept length %.2f (K=3)" % scored["0"]["scored_accept_length"] in said


def test_checkpoints_score_refuses_in_one_line_before_any_job(run_parts, agent_home, tmp_path):
    missing = tmp_path / "no-such-data"
    refused = run_cli("train", "local", "--save-dir", str(run_parts["save"]), "--target", run_parts["target"], "--score-data",
                      str(missing), "--json", "--", *run_parts["argv"], home=agent_home)
    assert refused.returncode != 0 and "no data directory %s on the host" % missing in refused.stderr
    assert json.loads(run_cli("jobs", "local", "--json", home=agent_home, check=0).stdout) == []  # the run did not start
    started = run_cli("train", "local", "--save-dir", str(run_parts["save"]), "--target", run_parts["target"], "--json", "--",
                      *run_parts["argv"], home=agent_home, check=0)
    job_id = json.loads(started.stdout)["id"]
    wait_for(lambda: (lambda r: r if r and len(r["checkpoints"]) == 2 else None)(curves(agent_home, job_id)), 120)
    aux_only = tmp_path / "aux-only"
    shutil.copytree(str(DATA), str(aux_only))
    for hs in (aux_only / "hidden_states").iterdir():  # three layers per token: the final one missing
        from remote.scoring import tensors

        spans = tensors.header_spans(str(hs))
        seq, layers, hidden = spans["hidden_states"].shape
        states, tokens = bytes(tensors.read_span(spans["hidden_states"])), bytes(tensors.read_span(spans["token_ids"]))
        row = layers * hidden * 4
        aux = b"".join(states[i * row:i * row + 3 * hidden * 4] for i in range(seq))
        header = {"hidden_states": {"dtype": "F32", "shape": [seq, 3, hidden], "data_offsets": [0, len(aux)]},
                  "token_ids": {"dtype": "I64", "shape": [seq], "data_offsets": [len(aux), len(aux) + len(tokens)]}}
        text = json.dumps(header).encode()
        hs.write_bytes(struct.pack("<Q", len(text)) + text + aux + tokens)
    refused = run_cli("checkpoints", "local", job_id, "--score", "--data", str(aux_only), home=agent_home, timeout=120, check=2)
    assert "--include-last-layer" in refused.stderr and refused.stderr.count("\n") == 1
    jobs = json.loads(run_cli("jobs", "local", "--json", home=agent_home, check=0).stdout)
    assert not any(job["kind"] == "score" for job in jobs)  # nothing started
    reply = curves(agent_home, job_id)
    assert all(c["score"] is None and c["scored_accept_length"] is None for c in reply["checkpoints"])


async def test_train_score_data_scores_each_checkpoint_as_it_lands_and_the_pane_marks_both_bests(run_parts, agent_home, client):
    started = run_cli("train", "local", "--save-dir", str(run_parts["save"]), "--target", run_parts["target"], "--name", "scored run",
                      "--score-data", str(DATA), "--score-k", K, "--json", "--", *run_parts["argv"], home=agent_home, check=0)
    job_id = json.loads(started.stdout)["id"]
    reply = wait_for(lambda: (lambda r: r if r and len(r["checkpoints"]) == 2 and all(
        (c["score"] or {}).get("state") in ("done", "failed") for c in r["checkpoints"]) else None)(curves(agent_home, job_id)), 300)
    scored = by_name(reply)
    assert [scored[n]["score"]["state"] for n in ("0", "1")] == ["done", "done"], [scored[n]["score"] for n in ("0", "1")]
    assert scored["0"]["scored_accept_length"] == pytest.approx(expected_agreeing_score(), abs=1e-12)
    assert scored["1"]["scored_accept_length"] == 1.0
    assert reply["best"] == "1" and reply["best_by_accept_length"] == "0"
    assert scored["0"]["score"]["result"]["held_out"] is True and scored["0"]["score"]["result"]["k"] == K

    app = OnePane(TrainingPane(), client=client)
    async with app.run_test(size=(120, 40)) as pilot:
        pane = app.query_one(TrainingPane)
        await wait_until(pilot, lambda: pane.selected == job_id)
        table = pane.query_one("#training-checkpoints", DataTable)
        await wait_until(pilot, lambda: table.row_count == 2 and table.get_row_at(0)[4] != "-")
        labels = [str(column.label) for column in table.columns.values()]
        assert labels[4] == "scored"
        rows = [table.get_row_at(i) for i in range(2)]
        assert [row[0] for row in rows] == ["0 ^", "1 *"]  # the score's best, the trainer's best
        assert [row[4] for row in rows] == ["%.2f" % scored["0"]["scored_accept_length"], "1.00"]
        summary = str(pane.query_one("#training-summary", Static).render())
        assert "best: 1 * by the trainer; 0 ^ by scored accept length %.2f (K=3)" % scored["0"]["scored_accept_length"] in summary
        assert "^ top score" in str(pane.query_one("#training-legend", Static).render())
