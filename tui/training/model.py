"""How a training run reads, the same in the Training pane and in `specdeck curves` and
`checkpoints`: its figures (step, loss, accept length, ETA) with their precision said once, a
checkpoint's line with its verdict and where its measurement and score stand, the trainer's best
beside the best by scored accept length, and the run's end when it failed. A run is a job: its states are the jobs' (tui/jobs/model.py)."""

from ..jobs import model as jobs

# Where a checkpoint's measurement (the A/B benchmark, remote/training/measure.py) stands, as a
# checkpoint's verdict is followed by it; a measurement done shows as the measured accept length.
MEASURE_WORDS = {"queued": "to measure", "failed": "measure failed", "skipped": "measure skipped"}


def number(value, pattern="%.2f"):
    """A figure as text (`%.2f` for accept lengths); `-` when there is none."""
    return "-" if value is None else pattern % value


def loss_text(value):
    """`0.0754`; a loss the log wrote as a word (`nan`) as it is."""
    if value is None:
        return "-"
    return value if isinstance(value, str) else "%.4g" % value


def measure_text(measure):
    """Where a checkpoint's measurement stands: `to measure`, `bench baseline` (running, in its
    phase), `measure failed`, `measure skipped`; None when none was asked for or it is done."""
    state = (measure or {}).get("state")
    if state == "running":
        return "bench %s" % (measure.get("phase") or "running")
    return MEASURE_WORDS.get(state)


def export_text(export):
    """Where a SpecForge checkpoint's `specforge export` job stands: `exporting to hf (j5)`,
    `exported to hf (j5)`, `export failed (j5)`; None when none was asked for."""
    export = export or {}
    to = export.get("to")
    words = {"running": "exporting to %s" % to, "done": "exported to %s" % to, "failed": "export failed"}.get(export.get("state"))
    return "%s (%s)" % (words, export.get("job")) if words else None


def score_text(score):
    """Where a checkpoint's score (remote/training/scores.py) stands: `to score`, `scoring 3/8`,
    `score failed`; None when none was asked for or it is done (its accept length shows)."""
    state = (score or {}).get("state")
    if state == "running":
        return score.get("phase") or "scoring"
    return {"queued": "to score", "failed": "score failed"}.get(state)


def marks(entry):
    """` *` on the trainer's best, ` ^` on the best by scored accept length (both may be one)."""
    return (" *" if entry.get("best") else "") + (" ^" if entry.get("best_by_accept_length") else "")


def checkpoint_figures(entry):
    """{key: text} of one checkpoint a run wrote: the pane's row and the command's line."""
    measure = entry.get("measure") or {}
    verdict = entry.get("verdict") or "-"
    measuring = measure_text(measure)
    exporting = export_text(entry.get("export"))
    if exporting:
        verdict = "%s, %s" % (verdict, exporting)
    scoring = score_text(entry.get("score"))
    if scoring:
        verdict = "%s, %s" % (verdict, scoring)
    return {
        "name": entry["name"] + marks(entry),
        "path": entry["path"],
        "step": number(entry.get("step"), "%d"),
        "format": entry.get("format") or "-",
        "validation_loss": loss_text((entry.get("validation") or {}).get("loss")),
        "predicted": number(entry.get("predicted_accept_length")),
        # What the prediction was made from (`validation`, `training steps`), when there is one.
        "predicted_from": entry.get("predicted_from") if entry.get("predicted_accept_length") is not None else None,
        "measured": number(entry.get("measured_accept_length")),
        # The accept length the score job predicts from the target's hidden states (`checkpoints --score`).
        "scored": number(entry.get("scored_accept_length")),
        "verdict": "%s, %s" % (verdict, measuring) if measuring else verdict,
        "measure_error": measure.get("error") if measuring else (entry.get("export") or {}).get("error")
        or (entry.get("score") or {}).get("error"),
    }


def best_line(checkpoints):
    """`best: 1 * by the trainer; 0 ^ by scored accept length 4.00 (K=3)`, once a checkpoint is
    scored (the trainer keeps its best by loss or its own metric); None before."""
    by_score = next((c for c in checkpoints if c.get("best_by_accept_length")), None)
    if by_score is None:
        return None
    by_trainer = next((c for c in checkpoints if c.get("best")), None)
    k = ((by_score.get("score") or {}).get("result") or {}).get("k")
    return "best: %s * by the trainer; %s ^ by scored accept length %s%s" % (
        by_trainer["name"] if by_trainer else "-", by_score["name"], number(by_score.get("scored_accept_length")),
        " (K=%d)" % k if k else "")


def step_figures(latest):
    """{key: text} of a run's latest step: step, epoch, loss, tokens/s."""
    return {
        "step": number(latest.get("step"), "%d"),
        "epoch": number(latest.get("epoch"), "%d"),
        "loss": loss_text(latest.get("loss")),
        "tokens_per_s": number(latest.get("tokens_per_s"), "%.0f"),
    }


def end_alert(job):
    """The alert a run's end raises (`the run ended with exit code 3`), or None: a run that still
    runs, was stopped, or exited 0 raises none."""
    if jobs.is_live(job) or jobs.process_state(job) == jobs.STOPPED or job.get("exit_code") in (0, None):
        return None
    return "the run ended with exit code %s" % job["exit_code"]


def run_failure(run):
    """One line when the run failed (`run j3 failed (exit code 3)`), else None. `run` is a job, or
    training.curves' reply (which carries the job's id, process state and exit code)."""
    if not jobs.has_failed(run):
        return None
    if jobs.process_state(run) == "lost":
        return "run %s was lost (its supervisor died without recording an exit)" % run["id"]
    return "run %s failed (exit code %s)" % (run["id"], run.get("exit_code"))
