"""The Training pane tells what `specdeck curves --json` tells, at the same moment: one predicted
accept length, saying whether it is the validation's or the training steps', the verdict against
break-even that the chart's line agrees with, each checkpoint at the step it was saved at, a
legend for the marks, and the live run opened rather than an older failed one.

On a replayed speculators log (fast: its training steps predict 3.10, above a 2.46 break-even,
its validation 1.90, below: the case where two figures disagreed) and on a real speculators
run on the CPU (needs the venv .ci/speculators-env builds, as tests/test_training_run.py)."""

import json
import re
import subprocess
from pathlib import Path

import pytest
from textual.widgets import DataTable, Static

from remote.training import logparse
from tests import checkpoint_fixtures
from tests.helpers.cli import run_cli
from tests.helpers.pilot import OnePane
from tests.helpers.snapshot import SnapshotApp, freeze
from tests.helpers.training import MAKER, PATCH
from tests.helpers.waits import wait_for, wait_until
from tui.app import PANES
from tui.training.pane import TrainingPane
from tui.widgets.chart import TimeChart

LOG = Path(__file__).parent / "data" / "speculators-train-200cols.log"
TRAIN_FULL_ACC = (0.895, 0.711, 0.494)  # 1 + sum: 3.10
VAL_FULL_ACC = (0.6, 0.2, 0.1)  # 1 + sum: 1.90
BREAK_EVEN = 2.46


def text_of(pane, selector):
    return str(pane.query_one(selector, Static).render())


def accept_line(pane):
    """(which prediction, its last value) of the accept-length chart's predicted line."""
    found = re.search(r"predicted \(([a-z ]+)\): \d+ points, last ([0-9.]+)", pane.query_one("#training-accept-chart", TimeChart).series_text())
    return (found.group(1), float(found.group(2))) if found else (None, None)


def curves_json(home, job_id):
    return json.loads(run_cli("curves", "local", job_id, "--json", home=home, check=0).stdout)


def assert_pane_tells_what_curves_tells(pane, reply):
    """The headline, chart, verdict and checkpoint rows against training.curves' reply."""
    summary = text_of(pane, "#training-summary")
    predicted = reply["prediction"]
    where = "epoch %d" % predicted["epoch"] if predicted["from"] == "validation" else "step %d" % predicted["step"]
    assert "predicted accept length %.2f (%s, %s)" % (predicted["accept_length"], predicted["from"], where) in summary, summary
    assert predicted["accept_length"] == reply["predicted_accept_length"]
    assert abs(predicted["accept_length"] - (1 + sum(predicted["full_acc"]))) < 1e-9  # the one definition
    verdict = reply["verdict"]["verdict"]
    assert " %s" % verdict in summary and ("BELOW" if verdict == "ABOVE" else "ABOVE") not in summary
    source, last = accept_line(pane)
    assert source == predicted["from"] and abs(last - predicted["accept_length"]) < 5e-3
    assert (last >= reply["break_even"]) == (verdict == "ABOVE")  # the line stands where the verdict says
    table = pane.query_one("#training-checkpoints", DataTable)
    assert [str(column.label) for column in table.columns.values()][0] == "ckpt (* best)"
    assert [table.get_row_at(i)[1] for i in range(table.row_count)] == [str(c["step"]) for c in reply["checkpoints"]]
    for index, checkpoint in enumerate(reply["checkpoints"]):
        short = {"validation": "val", "training steps": "train"}[checkpoint["predicted_from"]]
        assert table.get_row_at(index)[3] == "%.2f %s" % (checkpoint["predicted_accept_length"], short)
    legend = text_of(pane, "#training-legend")
    assert "* best (checkpoint_best)" in legend and "val = epoch's validation" in legend and "train = steps" in legend


def replayed_log():
    """The real 200-column speculators log, its accuracies set to a drafter that fits its
    training data (3.10) far better than held-out data (1.90)."""
    text = LOG.read_text()
    text = re.sub(r"train/full_acc_(\d)=[^,\s]+", lambda m: "train/full_acc_%s=%s" % (m.group(1), TRAIN_FULL_ACC[int(m.group(1))]), text)
    return re.sub(r"val/full_acc_(\d)_epoch=[^,\s]+", lambda m: "val/full_acc_%s_epoch=%s" % (m.group(1), VAL_FULL_ACC[int(m.group(1))]), text)


async def test_pane_opens_on_the_live_run_and_tells_what_curves_tells(client, agent_home, tmp_path):
    failed = client.call("training.start", {"argv": ["sh", "-c", "echo out of memory; exit 3"], "name": "an older run that failed"})
    wait_for(lambda: client.call("jobs.get", {"id": failed["id"]})["process_state"] == "failed", 60)

    log = tmp_path / "train.log"
    log.write_text(replayed_log())
    save = tmp_path / "save"
    for epoch, steps_done in ((0, 11), (1, 22)):
        staged = Path(checkpoint_fixtures.write_drafter(tmp_path / ("staged%d" % epoch), layout="speculators"))
        (staged / "training_state.json").write_text(json.dumps({"epoch": epoch, "local_step": 0, "global_step": steps_done}))
    release = tmp_path / "release"
    # Both checkpoints appear together after the whole log: each must keep its own step.
    script = ("cat {log}; mkdir -p {save}; cp -r {tmp}/staged0 {save}/0; cp -r {tmp}/staged1 {save}/1; ln -s 1 {save}/checkpoint_best; "
              "while [ ! -e {release} ]; do sleep 0.2; done").format(log=log, save=save, tmp=tmp_path, release=release)
    live = client.call("training.start", {"argv": ["sh", "-c", script], "save_dir": str(save), "break_even": BREAK_EVEN,
                                          "name": "replayed speculators run"})
    records = logparse.parse_text(log.read_text())
    assert 1 + sum(records[-2]["full_acc"]) > BREAK_EVEN > 1 + sum(records[-1]["full_acc"])  # steps above, validation below
    try:
        app = OnePane(TrainingPane(), client=client)
        async with app.run_test(size=(120, 40)) as pilot:
            pane = app.query_one(TrainingPane)
            await wait_until(pilot, lambda: pane.selected is not None)
            assert pane.selected == live["id"]  # not the older, failed one
            table = pane.query_one("#training-checkpoints", DataTable)
            await wait_until(pilot, lambda: table.row_count == 2 and "val" in table.get_row_at(0)[3] and "val" in table.get_row_at(1)[3])
            await wait_until(pilot, lambda: "(validation, epoch 1)" in text_of(pane, "#training-summary"))
            reply = curves_json(agent_home, live["id"])
            await pilot.pause(0.6)  # a draw after the reply: the pane's figures at the same moment
            assert_pane_tells_what_curves_tells(pane, reply)
            assert reply["prediction"]["from"] == "validation" and round(reply["predicted_accept_length"], 2) == 1.90
            assert reply["verdict"] == {"verdict": "BELOW", "judged": "predicted", "accept_length": reply["predicted_accept_length"]}
            assert [c["step"] for c in reply["checkpoints"]] == [10, 21]  # global_step 11 and 22: the last steps they hold
            assert [table.get_row_at(i)[0] for i in range(2)] == ["0", "1 *"]

            text = run_cli("curves", "local", live["id"], home=agent_home, check=0).stdout
            assert "predicted accept length 1.90 (validation, epoch 1)" in text
            assert "full acc (validation) 0.600 0.200 0.100" in text
            assert "break-even 2.46 (run): BELOW (predicted 1.90)" in text
            assert re.search(r"checkpoint \S+/save/0  step 10 .* predicted 1\.90 \(validation\)", text), text
    finally:
        release.write_text("")


async def test_pane_on_a_real_speculators_run(speculators_python, client, agent_home, tmp_path):  # noqa: F811
    made = subprocess.run([str(speculators_python), str(MAKER), str(tmp_path / "run"), "24"], capture_output=True, text=True, timeout=120)
    assert made.returncode == 0, made.stderr
    paths = json.loads(made.stdout.strip().splitlines()[-1])
    save = tmp_path / "run" / "save"
    argv = [str(speculators_python.parent / "speculators"), "train", "--verifier-name-or-path", paths["target"],
            "--data-path", paths["data"], "--draft-vocab-size", "128", "--target-layer-ids", "0", "1", "2", "--total-seq-len", "96",
            "--num-workers", "0", "--loss-implementation", "eager", "--draft-attn-impl", "eager", "--epochs", "2", "--log-freq", "1",
            "--save-path", str(save), "--logger", "", "--hidden-states-dtype", "float32"]
    job = client.call("training.start", {"argv": argv, "save_dir": str(save), "break_even": BREAK_EVEN, "name": "real speculators",
                                         "env": {"SPECDECK_TEST_CPU_PATCH": "1", "PYTHONPATH": str(PATCH), "COLUMNS": "80"}})
    app = OnePane(TrainingPane(), client=client)
    async with app.run_test(size=(120, 40)) as pilot:
        pane = app.query_one(TrainingPane)
        await wait_until(pilot, lambda: pane.selected == job["id"])
        # While it runs, before any validation: the training steps' prediction, said so.
        await wait_until(pilot, lambda: "(training steps, step" in text_of(pane, "#training-summary"), timeout_s=240)
        table = pane.query_one("#training-checkpoints", DataTable)
        await wait_until(pilot, lambda: pane.held.run(job["id"]).job["process_state"] not in ("running", "starting"), timeout_s=300)
        assert pane.held.run(job["id"]).job.get("exit_code") == 0, run_cli("logs", "local", job["id"], home=agent_home).stdout[-3000:]
        await wait_until(pilot, lambda: table.row_count == 2 and "(validation, epoch 1)" in text_of(pane, "#training-summary"), timeout_s=60)
        await wait_until(pilot, lambda: all(table.get_row_at(i)[3].endswith(" val") for i in range(2)), timeout_s=60)
        reply = curves_json(agent_home, job["id"])
        await pilot.pause(0.6)
        assert_pane_tells_what_curves_tells(pane, reply)
        for checkpoint in reply["checkpoints"]:  # the step each was saved at, from speculators' own state file
            state = json.loads((Path(checkpoint["path"]) / "training_state.json").read_text())
            assert checkpoint["step"] == state["global_step"] - 1
        assert len(set(c["step"] for c in reply["checkpoints"])) == 2


@pytest.mark.parametrize("size", [(80, 24), (200, 50)], ids=["80x24", "200x50"])
def test_training_pane_snapshot(snap_compare, monkeypatch, size):
    """The Training pane of the snapshot console (tests/snapshot_app.py): the live run j11 (not the
    older failed j9), its validation's prediction said so, both checkpoints at their own steps,
    the legend under them."""
    freeze(monkeypatch)

    async def show_training(pilot):
        await pilot.pause()
        await pilot.press(str(next(n for n, pane in enumerate(PANES, 1) if pane is TrainingPane)))
        await pilot.pause(0.3)

    assert snap_compare(SnapshotApp(host="gpu01"), terminal_size=size, run_before=show_training)
