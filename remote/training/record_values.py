"""A training record out of flat {key: float} values, whichever log form they were read from:
which keys name the step, the loss, the learning rate and the per-position losses and
accuracies (`train/full_acc_0`, `val/loss_2_epoch`, ...). The record's fields are described in
logparse.py."""

import math
import re

_STEP_KEYS = ("global_step", "step", "iter", "iteration")
_LOSS_KEYS = ("loss", "train/loss", "train_loss")
_INDEXED = re.compile(r"^(?:train/|val/|eval/)?(?P<name>loss|full_acc|cond_acc|acc|ploss)_(?P<index>\d+)(?:_epoch)?$")


def _all_positions(values, prefix):
    """{name: [value per position]} of the indexed keys (`train/full_acc_0`, ...) under prefix,
    in one pass over the keys."""
    found = {}
    for key, value in values.items():
        if "_" not in key or not key.startswith(prefix):
            continue
        m = _INDEXED.match(key)
        if m:
            found.setdefault(m.group("name"), {})[int(m.group("index"))] = value
    return {name: [by_index[i] for i in sorted(by_index)] for name, by_index in found.items()}


def _first(values, keys):
    for key in keys:
        if key in values:
            return values[key]
    return None


def _lr(values):
    if "lr" in values:
        return values["lr"]
    for key in ("train/lr", "learning_rate"):
        if key in values:
            return values[key]
    for key, value in values.items():
        if key.startswith("lr/"):
            return value  # several optimizers: the first one's
    return None


def _integer(value):
    return int(value) if value is not None and math.isfinite(value) else None


def record_from_values(values, source, time=None):
    """A record from flat {key: float}, or None when the keys say nothing about training."""
    validation = any(k.startswith(("val/", "eval/")) for k in values)
    if validation and not any(k.startswith(("train/", "profile/")) for k in values):
        prefix = "val/" if any(k.startswith("val/") for k in values) else "eval/"
        kind, loss = "validation", _first(values, (prefix + "loss_epoch", prefix + "loss"))
    else:
        prefix = "train/" if any(k.startswith("train/") for k in values) else ""
        kind, loss = "step", _first(values, _LOSS_KEYS)
    positions = _all_positions(values, prefix)
    record = {"kind": kind, "loss": loss, "loss_k": positions.get("loss") or positions.get("ploss") or [],
              "full_acc": positions.get("full_acc", []), "cond_acc": positions.get("cond_acc", []), "acc": positions.get("acc", [])}
    record.update(source=source, step=_integer(_first(values, _STEP_KEYS)), epoch=_integer(values.get("epoch")),
                  epochs_total=None, lr=_lr(values), step_ms=values.get("profile/step_ms"),
                  tokens_per_s=values.get("profile/tokens_per_s"), time=time, values=values)
    if record["loss"] is None and record["loss_k"]:
        record["loss"] = sum(v for v in record["loss_k"])  # a script that logs only per-position losses
    useful = record["loss"] is not None or record["full_acc"] or record["cond_acc"] or record["acc"]
    if not useful:
        return None
    if record["kind"] == "step" and record["step"] is None and source == "generic" and record["epoch"] is None:
        return None  # no x to draw it against
    return record
