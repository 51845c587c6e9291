"""A training run on several nodes is one run: its Slurm output file holds every task's lines,
labelled by rank (`srun --label`), and the curves are those of the rank that logs, rank 0, the
same numbers as a one-node run's log; data generation's progress is rank 0's bar. The other
ranks' lines, with other numbers, never reach the curves. The run is read by the training feed's
own reader (remote/training/run.py) from a log written as Slurm writes it."""

import re

import pytest

from remote.training import logparse
from remote.training.run import Run
from tests.helpers.cli import REPO_ROOT

LOG = REPO_ROOT / "tests" / "data" / "speculators-train-80cols.log"


def other_rank(text):
    """Rank 1's copy of the log: the same records with other losses, so a mix-up shows."""
    return re.sub(r"train/loss=([0-9.]+)", lambda m: "train/loss=%.3f" % (float(m.group(1)) + 7.0), text)


def interleaved(rank0, rank1, width):
    """Both ranks' lines as srun --label writes them to the job's output file: turns of a few
    lines each (a rank's record may be cut by the other's lines), the label padded to `width`."""
    lines0, lines1 = rank0.splitlines(), rank1.splitlines()
    out, i, j, turn = [], 0, 0, 0
    while i < len(lines0) or j < len(lines1):
        take = 1 + turn % 3
        out += ["%*d: %s" % (width, 0, line) for line in lines0[i:i + take]]
        out += ["%*d: %s" % (width, 1, line) for line in lines1[j:j + take + 1]]
        i, j, turn = i + take, j + take + 1, turn + 1
    return "\n".join(out) + "\n"


def read_run(tmp_path, kind, text, engine="slurm"):
    job_dir = tmp_path / engine / "j7"
    job_dir.mkdir(parents=True)
    log = job_dir / "output.log"
    log.write_text(text)
    published = []
    job = {"id": "j7", "kind": kind, "engine": engine, "process_state": "succeeded", "meta": {}, "started_at": 0.0}
    run = Run(job, str(job_dir), str(log), published.append)
    run.ended = True
    while run.read_log():
        pass
    run.read_log()  # the end: the last record is complete
    run.close()
    return run, published


@pytest.mark.parametrize("width", [1, 2])
def test_a_two_rank_log_gives_rank_zeros_curves(tmp_path, width):
    text = LOG.read_text()
    want = [r for r in logparse.parse_text(text) if r["kind"] == "step"]
    assert len(want) > 10
    _, published = read_run(tmp_path, "training", interleaved(text, other_rank(text), width))
    steps = [r for r in published if r.get("kind") == "step"]
    assert [s["step"] for s in steps] == [r["step"] for r in want]
    assert [s["loss"] for s in steps] == pytest.approx([r["loss"] for r in want])
    validations = [r for r in published if r.get("kind") == "validation"]
    assert len(validations) == len([r for r in logparse.parse_text(text) if r["kind"] == "validation"])
    # The same file read as one process's log (a local job) holds rank 1's records too: the
    # ranks are what keeps them out.
    _, mixed = read_run(tmp_path, "training", interleaved(text, other_rank(text), width), engine="local")
    assert max(r["loss"] for r in mixed if r.get("kind") == "step") > max(r["loss"] for r in want) + 5


def test_data_generation_progress_is_rank_zeros(tmp_path):
    rank0 = "Processing 1000 samples\n" + "".join("%d/1000 [00:%02d<00:10, 40.0it/s]\n" % (n, n // 10) for n in range(0, 501, 50))
    rank1 = "Processing 1000 samples\n" + "".join("%d/1000 [00:%02d<00:10, 90.0it/s]\n" % (n, n // 10) for n in range(0, 901, 100))
    run, _ = read_run(tmp_path, "datagen", interleaved(rank0, rank1, 1))
    assert (run.samples.done, run.samples.total, run.samples.rate) == (500, 1000, 40.0)
