"""Training curves: a parsed record as the wire shows it, the points it adds to the history
store, and the curves of a run recorded before runs had a step store (read back by time).

A run's curves come from its step store (stepstore.py, indexed by step). The history store
keeps a sample of each run over time: the newest step and validation of each read, source
"training", labels {"job": id} (and {"position": k} for per-position series). Step series:
step, epoch, loss, lr, step_ms, tokens_per_s, predicted_accept_length, full_acc/cond_acc/loss_k
per position, loss_nan (1 when the loss was not a number: the store keeps finite values only).
Validation: val_step, val_epoch, val_loss, val_predicted_accept_length, val_full_acc/val_cond_acc
per position. Data generation: samples_done, samples_total, samples_per_s.

Predicted accept length, one definition for every place that shows it (the Training pane's
headline, chart and checkpoint rows, `specdeck curves`, the checkpoints' verdicts): 1 + the sum
over positions k of full_acc_k, the chance that drafts 0..k are all right, so a greedy chain of
K drafts yields that many tokens per cycle. speculators logs `full_acc_k` (cumulative) beside
`cond_acc_k`: its full accuracies are summed as they are. SpecForge logs `acc_k` per position
(each position's accuracy given the ones before it, as its training unrolls the draft), and a log
with only `cond_acc_k` gives the same: full_acc_k is then the product of the conditional
accuracies of positions 0..k (`full_acc`).

A run has ONE predicted accept length (`prediction`): its newest validation's when it has
validation records (accuracies on held-out data, what serving will see), else its newest training
step's, always said with which it is ("validation" or "training steps").
"""

import math

STEP_SERIES = ("step", "epoch", "loss", "lr", "step_ms", "tokens_per_s", "predicted_accept_length")
POSITION_SERIES = ("full_acc", "cond_acc", "loss_k")
VALIDATION_SERIES = ("val_step", "val_epoch", "val_loss", "val_predicted_accept_length")
VALIDATION_POSITION_SERIES = ("val_full_acc", "val_cond_acc")


PREDICTED_FROM = ("validation", "training steps")


def full_acc(record):
    """P(drafts 0..k all right) per position k, from whichever form the record has: cumulative
    `full_acc` as it is, else the running product of the conditional `acc` (or `cond_acc`)."""
    if record.get("full_acc"):
        return list(record["full_acc"])
    chain, product = [], 1.0
    for accuracy in record.get("acc") or record.get("cond_acc") or []:
        product *= accuracy
        chain.append(product)
    return chain


def predicted_accept_length(record, chain=None):
    """1 + sum_k full_acc_k, or None when the record has no accuracies (or one is not a chance:
    not a number, or outside 0..1, so the length would leave 1..K+1). A SpecForge evaluation
    says its own: 1 + eval/simulated_acc_len (which counts no bonus token; bounded where read)."""
    if record.get("simulated_acc_len") is not None:
        return 1.0 + record["simulated_acc_len"]
    chain = full_acc(record) if chain is None else chain
    if not chain or any(not 0.0 <= v <= 1.0 for v in chain):
        return None
    return 1.0 + sum(chain)


def prediction(latest, validation):
    """The run's one predicted accept length from its newest step record and newest validation
    record (either may be None; each as public_record gives it, its prediction computed by
    predicted_accept_length): `{accept_length, from: "validation" | "training steps" | None, step,
    epoch, full_acc}`, `full_acc` being the accuracies it was computed from."""
    for source, record in zip(PREDICTED_FROM, (validation, latest)):
        if record and isinstance(record.get("predicted_accept_length"), (int, float)):
            return {"accept_length": record["predicted_accept_length"], "from": source, "step": record.get("step"),
                    "epoch": record.get("epoch"), "full_acc": list(record.get("full_acc") or [])}
    return {"accept_length": None, "from": None, "step": None, "epoch": None, "full_acc": []}


def against_break_even(predicted, checkpoints, break_even):
    """Where the run stands against break-even: `{verdict: "ABOVE" | "BELOW", judged: "measured"
    | "predicted", accept_length}` of the newest measured checkpoint, else the run's prediction
    (`prediction`'s reply); None when either side is unknown."""
    measured = [c for c in checkpoints if c.get("measured_accept_length") is not None]
    judged, what = (measured[-1]["measured_accept_length"], "measured") if measured else (predicted["accept_length"], "predicted")
    if judged is None or break_even is None:
        return None
    return {"verdict": "ABOVE" if judged >= break_even else "BELOW", "judged": what, "accept_length": judged}


def history_points(job_id, record, time_s):
    """[(source, name, labels, value, time)] one record adds to the history store."""
    labels = {"job": job_id}
    points = []

    def add(name, value, extra=None):
        if value is not None and math.isfinite(value):
            points.append(("training", name, dict(labels, **extra) if extra else labels, float(value), time_s))

    predicted = predicted_accept_length(record)
    chain = full_acc(record)
    if record["kind"] == "validation":
        add("val_step", record.get("step"))
        add("val_epoch", record.get("epoch"))
        add("val_loss", record.get("loss"))
        add("val_predicted_accept_length", predicted)
        for position, value in enumerate(chain):
            add("val_full_acc", value, {"position": str(position)})
        for position, value in enumerate(record.get("cond_acc") or record.get("acc") or []):
            add("val_cond_acc", value, {"position": str(position)})
        return points
    for name in ("step", "epoch", "loss", "lr", "step_ms", "tokens_per_s"):
        add(name, record.get(name))
    add("predicted_accept_length", predicted)
    if record.get("loss") is not None and not math.isfinite(record["loss"]):
        add("loss_nan", 1.0)
    for position, value in enumerate(chain):
        add("full_acc", value, {"position": str(position)})
    for position, value in enumerate(record.get("cond_acc") or record.get("acc") or []):
        add("cond_acc", value, {"position": str(position)})
    for position, value in enumerate(record.get("loss_k") or []):
        add("loss_k", value, {"position": str(position)})
    return points


def public_record(record, time_s):
    """A record as the wire shows it (curves, follow): the parse plus its prediction."""
    chain = full_acc(record)
    return {
        "kind": record["kind"], "time": time_s, "step": record.get("step"), "epoch": record.get("epoch"),
        "loss": _finite_or_text(record.get("loss")), "loss_k": record.get("loss_k") or [], "full_acc": chain,
        "cond_acc": record.get("cond_acc") or record.get("acc") or [], "lr": record.get("lr"),
        "step_ms": record.get("step_ms"), "tokens_per_s": record.get("tokens_per_s"),
        "predicted_accept_length": predicted_accept_length(record, chain), "source": record.get("source"),
    }


def _finite_or_text(value):
    if value is None or math.isfinite(value):
        return value
    return "nan" if math.isnan(value) else ("inf" if value > 0 else "-inf")


# ---------------------------------------------------------------------------- reading back


def _by_time(series_list):
    """{time: mean} of a query's single series (or {} when absent)."""
    if not series_list:
        return {}
    return {round(p[0], 3): p[2] for p in series_list[0]["points"]}


def _positioned(series_list):
    """{time: [value per position]} from per-position series."""
    per_position = {}
    for series in series_list:
        position = int(series["labels"].get("position", 0))
        for p in series["points"]:
            per_position.setdefault(round(p[0], 3), {})[position] = p[2]
    return {t: [values[i] for i in sorted(values)] for t, values in per_position.items()}


def read_curves(store, job_id, start, end, resolution_s=None):
    """(steps, validation, resolution_s) from the history store over [start, end]."""
    labels = {"job": job_id}

    def query(name):
        return store.query("training", name, labels, start, end, resolution_s)

    step_series, resolution = query("step")
    steps_at = _by_time(step_series)
    columns = {name: _by_time(query(name)[0]) for name in STEP_SERIES if name != "step"}
    positions = {name: _positioned(query(name)[0]) for name in POSITION_SERIES}
    nan_at = _by_time(query("loss_nan")[0])
    steps = []
    for t in sorted(steps_at):
        entry = {"time": t, "step": _int(steps_at[t])}
        for name, values in columns.items():
            entry[name] = values.get(t)
        entry["epoch"] = _int(entry["epoch"])
        for name, values in positions.items():
            entry[name] = values.get(t, [])
        if nan_at.get(t):
            entry["loss"] = "nan"
        steps.append(entry)
    validation = []
    val_epoch_at = _by_time(query("val_epoch")[0])
    val_columns = {name: _by_time(query(name)[0]) for name in VALIDATION_SERIES}
    val_positions = {name: _positioned(query(name)[0]) for name in VALIDATION_POSITION_SERIES}
    for t in sorted(set(val_epoch_at) | set(val_columns["val_loss"])):
        validation.append({
            "time": t, "epoch": _int(val_epoch_at.get(t)), "step": _int(val_columns["val_step"].get(t)),
            "loss": val_columns["val_loss"].get(t), "predicted_accept_length": val_columns["val_predicted_accept_length"].get(t),
            "full_acc": val_positions["val_full_acc"].get(t, []), "cond_acc": val_positions["val_cond_acc"].get(t, []),
        })
    return steps, validation, resolution


def _int(value):
    return int(round(value)) if value is not None else None


def rate_and_eta(steps, steps_total=None, epochs_total=None):
    """(steps per second over the last stretch of steps, ETA in seconds or None)."""
    # The last 50 distinct times: records that came in one burst share one, its last step counts.
    recent = []
    for entry in reversed(steps):
        if recent and entry["time"] == recent[-1]["time"]:
            continue
        recent.append(entry)
        if len(recent) >= 50:
            break
    if len(recent) < 2:
        return None, None
    last, first = recent[0], recent[-1]
    if last["step"] is None or first["step"] is None or last["time"] <= first["time"] or last["step"] <= first["step"]:
        return None, None
    rate = (last["step"] - first["step"]) / (last["time"] - first["time"])
    total = steps_total
    if total is None and epochs_total:
        per_epoch = steps_per_epoch(steps)
        if per_epoch:
            total = per_epoch * epochs_total
    if total is None:
        return rate, None
    return rate, max(0.0, (total - 1 - last["step"]) / rate)


def steps_per_epoch(steps):
    """Steps in one epoch, from where the epoch number changed (None before the first change)."""
    for before, after in zip(steps, steps[1:]):
        if before.get("epoch") is not None and after.get("epoch") is not None and after["epoch"] > before["epoch"] \
                and after["step"] is not None:
            return after["step"] // after["epoch"] if after["epoch"] else None
    return None
