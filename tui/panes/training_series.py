"""What the Training pane draws, from a run's records: the curves against steps, a checkpoint's row."""


def number(value, pattern="%.2f"):
    return "-" if value is None else pattern % value


def loss_text(value):
    if value is None:
        return "-"
    return value if isinstance(value, str) else "%.4g" % value


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


def accept_series(steps, validation, checkpoints):
    """Predicted accept length per step and per validation epoch, measured per checkpoint, against steps."""
    series = {
        "predicted": [[e["step"], e["predicted_accept_length"]] for e in steps
                      if e.get("step") is not None and e.get("predicted_accept_length") is not None],
        "validation": [[e["step"], e["predicted_accept_length"]] for e in validation
                       if e.get("step") is not None and e.get("predicted_accept_length") is not None],
        "measured": [[c["step"], c["measured_accept_length"]] for c in checkpoints
                     if c.get("step") is not None and c.get("measured_accept_length") is not None],
    }
    return {label: points for label, points in series.items() if points}


def checkpoint_row(entry):
    validation = entry.get("validation") or {}
    measure = entry.get("measure") or {}
    verdict = entry.get("verdict") or "-"
    if measure.get("state") == "queued":
        verdict += ", to measure"
    elif measure.get("state") == "running":
        verdict += ", bench %s" % (measure.get("phase") or "running")
    elif measure.get("state") == "failed":
        verdict += ", measure failed"
    return (entry["name"] + (" *" if entry.get("best") else ""), number(entry.get("step"), "%d"), loss_text(validation.get("loss")),
            number(entry.get("predicted_accept_length")), number(entry.get("measured_accept_length")), verdict)

