"""A real SpecForge 0.2.0 run (recorded as a specdeck job on an H200) replayed as a training job
over the real local agent: its log's `step N: {...}` lines become the curves (every step and
evaluation, the evaluation's predicted accept length 1 + eval/simulated_acc_len), and its save
directory, recreated from the recorded listing with its links and best_meta.json, becomes the
checkpoints with best and latest, each predicted from its step's evaluation and saying it needs
`specforge export` first (CLI --json and text), one exported by a job on request.
speculators' interrupted/ (a graceful stop) is listed saying how to resume from it."""

import json
import os
import sys
import textwrap
from pathlib import Path

import pytest

from remote.core.protocol import RemoteError
from remote.training import checkpoints as training_checkpoints, logparse
from tests import checkpoint_fixtures
from tests.helpers.cli import run_cli
from tests.helpers.waits import wait_for

DATA = Path(__file__).parent / "data" / "specforge-0.2.0-h200"
STEPS = [8 * i for i in range(1, 17)]
EVALUATED = [32, 64, 96, 128]
BEST_SCORE = 0.7582533687306313  # eval/simulated_acc_len at step 128 (summary.txt)

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


JOB_RECORDING = Path(__file__).parent / "data" / "specforge-0.2.0-h200-job"
# eval/simulated_acc_len at each evaluated step of the H200 job's log: predicted = 1 + it
SIMULATED = {32: 0.6524526771516045, 64: 0.7477661146027924, 96: 0.7561120581112449, 128: BEST_SCORE}

# The H200 job as it happened: its save directory held an earlier attempt's step directories
# before the run logged a line (they were listed with `predicted -`), then SpecForge rewrote them
# and logged its steps and evaluations. The run waits for the test's word before its log.
LEFT_BEFORE_THE_LOG = """
    import os, shutil, sys, time
    save = {save!r}
    for step in (32, 64, 96, 128):
        d = os.path.join(save, "tiny-eagle3-step%d" % step)
        os.mkdir(d)
        for name in ("training_state.pt", "training_state_rank0.pt"):
            with open(os.path.join(d, name), "wb") as f:
                f.write(b"state of step %d" % step)
    while not os.path.exists({go!r}):
        time.sleep(0.05)
    sys.stdout.write(open({log!r}).read())
    sys.stdout.flush()
    os.symlink("tiny-eagle3-step128", os.path.join(save, "tiny-eagle3-best"))
    os.symlink("tiny-eagle3-step128", os.path.join(save, "tiny-eagle3-latest"))
    shutil.copy({meta!r}, save)
"""

# A stand-in for SpecForge 0.2.0's `specforge` command (its export needs torch and SpecForge's
# models, which CI does not have): the same export arguments as its cli.py, and what its
# save_pretrained leaves in --output-dir, config.json and model.safetensors of the EAGLE-3 drafter
# in SpecForge's layout (midlayer.*, fc, d2t, t2d; no embed_tokens).
STAND_IN = """#!{python}
import argparse, json, sys
sys.path.insert(0, {root!r})
from tests import checkpoint_fixtures
parser = argparse.ArgumentParser(prog="specforge")
export = parser.add_subparsers(dest="command", required=True).add_parser("export")
export.add_argument("--to", choices=("hf", "sglang"), required=True)
for name in ("--checkpoint", "--draft-config", "--output-dir"):
    export.add_argument(name, required=True)
for name in ("--vocab-mapping", "--embedding-source"):
    export.add_argument(name)
args = parser.parse_args()
if args.to == "sglang":  # as SpecForge fails on a draft config that is not there
    sys.exit("FileNotFoundError: [Errno 2] No such file or directory: " + repr(args.draft_config))
with open({said!r}, "w") as f:
    json.dump(sys.argv[1:], f)
checkpoint_fixtures.write_drafter(args.output_dir, layout="specforge")
"""


def test_the_h200_job_replayed_predicts_every_checkpoint_and_exports_one(agent_home, client, tmp_path):
    """The H200 job's log over the save directory it found: each checkpoint's predicted accept
    length is 1 + eval/simulated_acc_len of its step (CLI, --json, the Training pane's rows), even
    though the checkpoints were listed before a line was logged; then `checkpoints --export` starts
    `specforge export` as a job with SpecForge 0.2.0's arguments, and its output is listed as an
    inspectable checkpoint of the same step."""
    from tui.training.series import checkpoint_row

    save, go, said, bin_dir = tmp_path / "sfout", tmp_path / "go", tmp_path / "export-argv.json", tmp_path / "bin"
    save.mkdir()
    bin_dir.mkdir()
    stand_in = bin_dir / "specforge"
    stand_in.write_text(STAND_IN.format(python=sys.executable, root=str(Path(__file__).parent.parent), said=str(said)))
    stand_in.chmod(0o755)
    script = tmp_path / "h200-job.py"
    script.write_text(textwrap.dedent(LEFT_BEFORE_THE_LOG.format(
        save=str(save), go=str(go), log=str(JOB_RECORDING / "specforge-train.log"), meta=str(DATA / "tiny-eagle3.best_meta.json"))))
    overrides = ["model.draft_model_config=/tmp/sfdata/draft_config.json", "model.vocab_mapping_path=/tmp/sfdata/vocab_mapping.pt"]
    started = run_cli("train", "local", "--name", "specforge-h200", "--save-dir", str(save), "--env",
                      "PATH=%s:%s" % (bin_dir, os.environ["PATH"]), "--json", "--", sys.executable, "-u", str(script), *overrides,
                      home=agent_home)
    job_id = json.loads(started.stdout)["id"]

    def listed():
        return {c["name"]: c for c in client.call("training.checkpoints", {"id": job_id})["checkpoints"]}

    before = wait_for(lambda: (lambda found: found if len(found) == 4 else None)(listed()), 60)
    assert all(c["predicted_accept_length"] is None for c in before.values())  # the H200's `predicted -`
    go.touch()
    wait_for(lambda: all(c["predicted_from"] == "validation" for c in listed().values()) and listed()["tiny-eagle3-step128"]["best"], 60)
    by_name = {c["name"]: c for c in json.loads(run_cli("checkpoints", "local", job_id, "--json", home=agent_home).stdout)["checkpoints"]}
    run = client.call("training.curves", {"id": job_id})
    assert [s["step"] for s in run["steps"]] == STEPS and [v["step"] for v in run["validation"]] == EVALUATED
    assert run["prediction"]["from"] == "validation" and run["prediction"]["step"] == 128
    assert abs(run["prediction"]["accept_length"] - (1 + BEST_SCORE)) < 1e-9
    assert "predicted accept length 1.76 (validation, step 128)" in run_cli("curves", "local", job_id, home=agent_home).stdout
    for step, simulated in SIMULATED.items():
        entry = by_name["tiny-eagle3-step%d" % step]
        assert entry["step"] == step and abs(entry["predicted_accept_length"] - (1 + simulated)) < 1e-9
    assert by_name["tiny-eagle3-step128"]["latest"] and by_name["tiny-eagle3-step128"]["best_meta"]["score"] == BEST_SCORE
    assert all(c["verdict"] == "needs export" for c in by_name.values())
    assert not any(c["best"] or c["latest"] for name, c in by_name.items() if name != "tiny-eagle3-step128")
    rows = {row[0]: row for row in (checkpoint_row(entry) for entry in by_name.values())}
    assert rows["tiny-eagle3-step64"][3] == "1.75 val" and rows["tiny-eagle3-step128 *"][3] == "1.76 val"

    started = json.loads(run_cli("checkpoints", "local", job_id, "--export", "tiny-eagle3-step128", "--json", home=agent_home).stdout)
    output = str(save / "tiny-eagle3-step128-hf")
    expected = ["export", "--to", "hf", "--checkpoint", str(save / "tiny-eagle3-step128"), "--draft-config",
                "/tmp/sfdata/draft_config.json", "--output-dir", output, "--vocab-mapping", "/tmp/sfdata/vocab_mapping.pt"]
    assert started["argv"] == ["specforge"] + expected and started["output_dir"] == output
    exported = wait_for(lambda: listed().get("tiny-eagle3-step128-hf"), 60)
    assert json.loads(said.read_text()) == expected  # the job ran SpecForge's command with those words
    assert exported["verdict"] == "ok" and exported["format"] == "specforge" and exported["exported_from"] == "tiny-eagle3-step128"
    assert exported["step"] == 128 and abs(exported["predicted_accept_length"] - (1 + BEST_SCORE)) < 1e-9
    source_entry = listed()["tiny-eagle3-step128"]
    assert source_entry["export"]["state"] == "done" and source_entry["export"]["job"] == started["job"]
    lines = {l.split()[1].rsplit("/", 1)[1]: l for l in run_cli("checkpoints", "local", job_id, home=agent_home).stdout.splitlines()}
    assert "predicted 1.65 (validation)" in lines["tiny-eagle3-step32"] and "needs `specforge export --to hf|sglang`" in lines["tiny-eagle3-step32"]
    assert "needs export, exported to hf (%s)" % started["job"] in lines["tiny-eagle3-step128"]
    assert "predicted 1.76 (validation)  measured -  ok  (exported from tiny-eagle3-step128)" in lines["tiny-eagle3-step128-hf"]
    assert checkpoint_row(source_entry)[-1] == "needs export, exported to hf (%s)" % started["job"]  # the pane's verdict cell
    with pytest.raises(RemoteError) as refused:
        client.call("training.export", {"id": job_id, "checkpoint": "tiny-eagle3-step128-hf"})
    assert "not a SpecForge training state" in refused.value.message

    # An export that fails: the source says so with SpecForge's last words, and nothing is listed.
    failing = json.loads(run_cli("checkpoints", "local", job_id, "--export", "tiny-eagle3-step64", "--to", "sglang", "--json",
                                 home=agent_home).stdout)
    failed = wait_for(lambda: (lambda e: e if e["export"]["state"] == "failed" else None)(listed()["tiny-eagle3-step64"]), 60)["export"]
    assert failed["job"] == failing["job"] and failed["to"] == "sglang"
    assert failed["error"] == ("specforge export ended (failed, exit 1) without writing config.json: FileNotFoundError: [Errno 2] "
                               "No such file or directory: '/tmp/sfdata/draft_config.json'; see `specdeck logs HOST %s`" % failing["job"])
    assert "tiny-eagle3-step64-sglang" not in listed()
    line = next(l for l in run_cli("checkpoints", "local", job_id, home=agent_home).stdout.splitlines() if "tiny-eagle3-step64 " in l)
    assert "export failed (%s)" % failing["job"] in line
