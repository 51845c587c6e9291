"""What the Training pane draws, from a run's records: the curves against steps, the run's one
predicted accept length (remote/training/curves.py's `prediction`, the same `specdeck curves`
prints), where it stands against break-even, a checkpoint's row."""

from remote.training import curves as run_curves

from ..display import safe_text
from . import model

SHORT_FROM = {"validation": "val", "training steps": "train"}  # a checkpoint row's predicted cell
CHECKPOINT_COLUMNS = ("ckpt (* best)", "step", "val loss", "predicted", "scored", "measured", "verdict")
LEGEND = "* best (checkpoint_best)  ^ top score  val = epoch's validation, train = steps"  # fits 80 columns


def metric_series(steps, metric):
    """{label: [[step, value], ...]} of one metric against steps (per position for accuracies)."""
    if metric in ("full acc", "cond acc", "loss per position"):
        key = {"full acc": "full_acc", "cond acc": "cond_acc", "loss per position": "loss_k"}[metric]
        series = {}
        for entry in steps:
            for position, value in enumerate(entry.get(key) or []):
                if entry.get("step") is not None and value is not None:
                    series.setdefault("pos %d" % position, []).append([entry["step"], value])
        return series
    key = {"loss": "loss", "step ms": "step_ms", "tokens/s": "tokens_per_s"}[metric]
    series = {metric: [[e["step"], e[key]] for e in steps if e.get("step") is not None and isinstance(e.get(key), (int, float))]}
    if metric == "loss" and any((e.get("count") or 1) > 1 for e in steps):
        # Buckets of steps (a long run): the spikes a mean hides, as the bucket's min and max.
        for bound in ("min", "max"):
            series["loss " + bound] = [[e["step"], e["loss_" + bound]] for e in steps
                                       if e.get("step") is not None and isinstance(e.get("loss_" + bound), (int, float))]
    return series


def run_prediction(curves, progress):
    """The run's one predicted accept length (`{accept_length, from, step, epoch, full_acc}`),
    from its loaded and live records, else from its progress before they are loaded."""
    steps, validation = curves.get("steps") or [], curves.get("validation") or []
    latest = curves.get("latest") or (steps[-1] if steps else None)
    last_validation = validation[-1] if validation else None
    if latest is None and last_validation is None and progress:
        latest = {"predicted_accept_length": progress.get("predicted_accept_length"), "step": progress.get("step"),
                  "epoch": progress.get("epoch")}
        if progress.get("validation_predicted_accept_length") is not None:
            last_validation = {"predicted_accept_length": progress["validation_predicted_accept_length"]}
    return run_curves.prediction(latest, last_validation)


def accept_series(steps, validation, checkpoints, predicted):
    """The run's one predicted accept length over steps (validation per epoch, or the training
    steps' when the run has no validation yet: `predicted["from"]` says which), ending at the
    value the headline shows, and the measured one per checkpoint, against steps."""
    records = validation if predicted["from"] == "validation" else steps
    line = [[e["step"], e["predicted_accept_length"]] for e in records
            if e.get("step") is not None and e.get("predicted_accept_length") is not None]
    if predicted["accept_length"] is not None and predicted["step"] is not None:
        # A long run's steps come in buckets (their mean): its last point is the newest step itself.
        if line and line[-1][0] >= predicted["step"]:
            line[-1] = [line[-1][0], predicted["accept_length"]]
        else:
            line.append([predicted["step"], predicted["accept_length"]])
    series = {
        "predicted (%s)" % predicted["from"]: line,
        "measured": [[c["step"], c["measured_accept_length"]] for c in checkpoints
                     if c.get("step") is not None and c.get("measured_accept_length") is not None],
    }
    return {label: points for label, points in series.items() if points}


def checkpoint_row(entry):
    """The cells of one checkpoint in CHECKPOINT_COLUMNS' order: its figures (model.py), where the
    prediction comes from cut short to fit 80 columns."""
    shown = model.checkpoint_figures(entry)
    predicted = shown["predicted"]
    if shown["predicted_from"] in SHORT_FROM:
        predicted += " " + SHORT_FROM[shown["predicted_from"]]
    return (safe_text(shown["name"]), shown["step"], shown["validation_loss"], predicted, shown["scored"], shown["measured"],
            shown["verdict"])
