"""A real SpecForge 0.2.0 run (recorded on an H200) replayed as a training job over the real local
agent: its log's `step N: {...}` lines become the curves (every step and evaluation, the
evaluation's predicted accept length 1 + eval/simulated_acc_len), and its save directory,
recreated from the recorded listing with its links and best_meta.json, becomes the checkpoints
with best and latest, each saying it needs `specforge export` first (CLI --json and text).
speculators' interrupted/ (a graceful stop) is listed saying how to resume from it."""

import json
from pathlib import Path

from remote.training import checkpoints as training_checkpoints, logparse
from tests import checkpoint_fixtures
from tests.helpers.cli import run_cli
from tests.helpers.waits import wait_for
from tests.helpers.training import curves, start

DATA = Path(__file__).parent / "data" / "specforge-0.2.0-h200"
STEPS = [8 * i for i in range(1, 17)]
EVALUATED = [32, 64, 96, 128]
BEST_SCORE = 0.7582533687306313  # eval/simulated_acc_len at step 128 (summary.txt)

# Replays the recorded log, then leaves the save directory as the listing shows it.
REPLAY = """
    import os, shutil, sys
    sys.stdout.write(open({log!r}).read())
    sys.stdout.flush()
    save = {save!r}
    for step in (32, 64, 96, 128):
        d = os.path.join(save, "tiny-eagle3-step%d" % step)
        os.mkdir(d)
        for name in ("training_state.pt", "training_state_rank0.pt"):
            with open(os.path.join(d, name), "wb") as f:
                f.write(b"state of step %d" % step)
    os.symlink("tiny-eagle3-step128", os.path.join(save, "tiny-eagle3-best"))
    os.symlink("tiny-eagle3-step128", os.path.join(save, "tiny-eagle3-latest"))
    shutil.copy({meta!r}, save)
"""


def test_a_specforge_run_gives_its_curves_and_checkpoints_needing_export(agent_home, tmp_path):
    save = tmp_path / "sfout"
    save.mkdir()
    body = REPLAY.format(log=str(DATA / "specforge-train.log"), save=str(save), meta=str(DATA / "tiny-eagle3.best_meta.json"))
    job_id = start(agent_home, tmp_path, "specforge", body, "--save-dir", str(save))

    def complete():
        reply = curves(agent_home, job_id)
        return reply if reply and len(reply["checkpoints"]) == 4 and len(reply.get("validation", [])) == 4 else None

    reply = wait_for(complete, 60)
    assert [s["step"] for s in reply["steps"]] == STEPS
    assert [v["step"] for v in reply["validation"]] == EVALUATED
    assert reply["prediction"]["from"] == "validation" and reply["prediction"]["step"] == 128
    assert abs(reply["prediction"]["accept_length"] - (1 + BEST_SCORE)) < 1e-9
    assert reply["validation"][0]["predicted_accept_length"] > 1.65  # 1 + 0.6524526771516045

    listed = json.loads(run_cli("checkpoints", "local", job_id, "--json", home=agent_home).stdout)["checkpoints"]
    by_name = {c["name"]: c for c in listed}
    assert sorted(by_name) == ["tiny-eagle3-step%d" % s for s in (128, 32, 64, 96)]
    newest = by_name["tiny-eagle3-step128"]
    assert newest["best"] and newest["latest"] and newest["step"] == 128
    assert newest["best_meta"] == {"step": 128, "metric": "eval/simulated_acc_len", "score": BEST_SCORE}
    assert abs(newest["predicted_accept_length"] - (1 + BEST_SCORE)) < 1e-9 and newest["predicted_from"] == "validation"
    assert not any(by_name[n]["best"] or by_name[n]["latest"] for n in by_name if n != "tiny-eagle3-step128")
    assert all(c["verdict"] == "needs export" and "specforge export" in c["hint"] for c in listed)

    text = run_cli("checkpoints", "local", job_id, home=agent_home).stdout
    line = next(l for l in text.splitlines() if "tiny-eagle3-step128" in l)
    assert "(best)" in line and "(latest)" in line and "needs `specforge export --to hf|sglang`" in line
    said = run_cli("curves", "local", job_id, home=agent_home).stdout
    assert "predicted accept length 1.76 (validation, step 128)" in said


def test_speculators_interrupted_checkpoint_says_how_to_resume(tmp_path):
    save = tmp_path / "save"
    save.mkdir()
    checkpoint_fixtures.write_drafter(save / "0", layout="speculators")
    checkpoint_fixtures.write_drafter(save / "interrupted", layout="speculators")
    watcher = training_checkpoints.Watcher(str(tmp_path), str(save))
    found = {e["name"]: e for e in watcher.look(final=True)}
    assert sorted(found) == ["0", "interrupted"]
    hint = found["interrupted"]["hint"]
    assert "mv interrupted N" in hint and "--no-resume-from-checkpoint" in hint
    assert "hint" not in found["0"] and found["interrupted"]["verdict"] == found["0"]["verdict"]


def test_specforge_lines_are_read_safely():
    records = logparse.parse_text((DATA / "specforge-train.log").read_text())
    assert [r["step"] for r in records if r["kind"] == "step"] == STEPS  # the recording's 16 logged steps
    assert [r["step"] for r in records if r["kind"] == "validation"] == EVALUATED
    hostile = ["step 1: {'loss': __import__('os').system('touch %s')}" % (DATA / "pwned"),  # literal_eval: no call
               "step 1: {'loss': 1.0, 'x': " + "[" * 100 + "]" * 100 + "}",  # deeper than any metrics line
               "step 1: {'loss': 1" + "0" * 100 + "}",  # no number is that long
               "step 1: {'loss': " + "1.0, 'a': 1.0, " * 20000 + "}"]  # longer than a metrics line is
    assert logparse.parse_text("\n".join(hostile)) == []
    assert not (DATA / "pwned").exists()


def test_the_h200_job_recording_agrees_with_the_log_it_came_from():
    """A real SpecForge run as a specdeck job on an H200 (benchmarks/record_specforge.sh): the
    curves and checkpoints the agent gave there are what its log and save directory say."""
    job = Path(__file__).parent / "data" / "specforge-0.2.0-h200-job"
    records = logparse.parse_text((job / "specforge-train.log").read_text())
    curves_there = json.loads((job / "curves.json").read_text())
    assert [s["step"] for s in curves_there["steps"]] == [r["step"] for r in records if r["kind"] == "step"] == STEPS
    assert curves_there["process_state"] == "succeeded" and curves_there["exit_code"] == 0
    assert abs(curves_there["predicted_accept_length"] - (1 + BEST_SCORE)) < 1e-9  # 1 + eval/simulated_acc_len
    listed = json.loads((job / "checkpoints.json").read_text())["checkpoints"]
    assert sorted(c["name"] for c in listed) == ["tiny-eagle3-step%d" % n for n in (128, 32, 64, 96)]
    assert all(c["verdict"] == "needs export" for c in listed)
    assert [c["name"] for c in listed if c["best"] and c["latest"]] == ["tiny-eagle3-step128"]
    assert "needs `specforge export" in (job / "checkpoints.txt").read_text()
