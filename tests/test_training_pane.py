"""The Training pane over the real local agent: a training job replays a real speculators CPU
run's log (tests/data) in two parts, writes a checkpoint and exits 3. The pane shows the steps as
they come (the last step, its loss, the accept length the accuracies predict against the
break-even line), the checkpoint with its verdict, the non-zero exit as an alert; `c` turns the
curve to per-position accuracy; `m` on a checkpoint asks for the measure options and queues a
measurement, whose failure (a target that cannot serve the drafter) shows in the list."""

import shlex
from pathlib import Path

from textual.widgets import DataTable, Static

from remote.training import logparse
from tests import checkpoint_fixtures
from tests.helpers.pilot import OnePane
from tests.helpers.waits import wait_until
from tui.training.pane import TrainingPane
from tui.widgets.chart import TimeChart

LOG = Path(__file__).parent / "data" / "speculators-train-80cols.log"


def text_of(pane, selector):
    return str(pane.query_one(selector, Static).render())


async def test_pane_follows_a_run_its_checkpoint_and_its_end(client, tmp_path):
    staged = checkpoint_fixtures.write_drafter(tmp_path / "staged", layout="speculators")
    save = tmp_path / "save"
    lines = LOG.read_text().splitlines(keepends=True)
    (tmp_path / "part1.log").write_text("".join(lines[:200]))
    (tmp_path / "part2.log").write_text("".join(lines[200:]))
    script = "cat %s; sleep 2; cat %s; mkdir -p %s/0; cp %s/* %s/0/; sleep 4; exit 3" % (
        tmp_path / "part1.log", tmp_path / "part2.log", save, staged, save)
    records = logparse.parse_text(LOG.read_text())
    steps = [r for r in records if r["kind"] == "step"]
    app = OnePane(TrainingPane(), client=client)
    async with app.run_test(size=(120, 40)) as pilot:
        pane = app.query_one(TrainingPane)
        pane.focus()
        job = client.call("training.start", {"argv": ["sh", "-c", script], "save_dir": str(save), "break_even": 2.46,
                                             "name": "replayed speculators run"})
        await wait_until(pilot, lambda: pane.selected == job["id"])
        last = steps[-1]
        await wait_until(pilot, lambda: "step %d" % last["step"] in text_of(pane, "#training-summary"))
        # The run has validation records: its one prediction is the last validation's, said so.
        last_validation = [r for r in records if r["kind"] == "validation"][-1]
        said = "predicted accept length %.2f (validation, epoch %d)" % (1 + sum(last_validation["full_acc"]), last_validation["epoch"])
        await wait_until(pilot, lambda: said in text_of(pane, "#training-summary"))
        summary = text_of(pane, "#training-summary")
        assert "break-even 2.46" in summary and "BELOW" in summary  # a barely trained drafter: ~1.0 against 2.46
        chart = pane.query_one("#training-accept-chart", TimeChart)
        assert "threshold break-even 2.46" in chart.series_text()
        assert "predicted (validation): 2 points, last %.3g" % (1 + sum(last_validation["full_acc"])) in chart.series_text()
        metric = pane.query_one("#training-metric-chart", TimeChart)
        assert "loss: %d points, last %.3g" % (len(steps), last["loss"]) in metric.series_text()
        table = pane.query_one("#training-checkpoints", DataTable)
        await wait_until(pilot, lambda: table.row_count == 1 and "below break-even" in str(table.get_row_at(0)[-1]))
        assert table.get_row_at(0)[0] == "0"
        await wait_until(pilot, lambda: "the run ended with exit code 3" in text_of(pane, "#training-alerts"))
        assert any("exit code 3" in n.message for n in app._notifications)

        await pilot.press("c")
        assert "pos 0: %d points" % len(steps) in metric.series_text()

        # Measuring: the run has no measure options, so the pane asks for them.
        target = tmp_path / "not-a-target"
        target.mkdir()
        (target / "config.json").write_text('{"hidden_size": 8, "vocab_size": 10, "architectures": ["LlamaForCausalLM"]}')
        await pilot.press("m")
        await pilot.pause()
        app.screen.query_one("Input").value = "%s %s k=3" % (shlex.quote(str(target)), "python3")
        await pilot.press("enter")
        await wait_until(pilot, lambda: "measure failed" in str(table.get_row_at(0)[-1]), timeout_s=60)
        checkpoints = client.call("training.checkpoints", {"id": job["id"]})["checkpoints"]
        assert checkpoints[0]["measure"]["state"] == "failed"
        assert "DrafterMismatch" in checkpoints[0]["measure"]["error"]
