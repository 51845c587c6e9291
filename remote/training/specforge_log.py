"""SpecForge's training log lines: `step N: {...}`, a Python dict's repr on one line.

Training steps: `step 8: {'acc_0': 0.05, ..., 'ploss_0': 4.6, ..., 'acc': 0.07, 'loss': 32.1, 'lr': 1e-4,
'grad_norm': 3.2, 'perf/...': ...}`; `acc_k` is position k's accuracy as SpecForge's unrolled
training measures it. Evaluation: `step 32: {'eval/avg_loss': 19.0, 'eval/per_position_acc': [...],
'eval/simulated_acc_len': 0.65, 'eval/ploss_0': ...}`; `eval/simulated_acc_len` counts accepted
drafts without the bonus token, so the accept length it predicts is 1 + it: a figure outside 0..K
(K the positions evaluated) is refused, and the record says so (`refused`).

A line is read by ast.literal_eval (never eval) only once it is bounded: at most MAX_LINE_CHARS,
no more than MAX_BRACKETS brackets (literal_eval recurses per nesting level), no digit run
longer than a float's worth (a 60,000-digit literal costs quadratic time to convert). Only
numbers and lists of numbers are kept, at most MAX_KEYS values.
"""

import ast
import math
import re

MAX_LINE_CHARS = 256 << 10
MAX_BRACKETS = 64
MAX_KEYS = 1000
MAX_DRAFTS = 64  # drafted positions, when a line does not say how many
_LINE = re.compile(r"step (?P<step>\d{1,12}): (?P<body>\{.*\})[ \t]*$")
_LONG_DIGITS = re.compile(r"\d{65}")
_POSITIONS = {"eval/per_position_acc": "eval/acc_%d"}


def values_of(line):
    """(step, {key: float}) of a SpecForge metrics line, or None for any other line."""
    if len(line) > MAX_LINE_CHARS or not line.startswith("step "):
        return None
    match = _LINE.match(line)
    if match is None:
        return None
    body = match.group("body")
    if body.count("[") + body.count("{") + body.count("(") > MAX_BRACKETS or _LONG_DIGITS.search(body):
        return None
    try:
        parsed = ast.literal_eval(body)
    except (ValueError, SyntaxError, MemoryError, RecursionError, TypeError):
        return None
    if not isinstance(parsed, dict):
        return None
    values = {}
    for key, value in parsed.items():
        if len(values) >= MAX_KEYS:
            break
        if not isinstance(key, str):
            continue
        if _is_number(value):
            values[key] = float(value)
        elif isinstance(value, list):
            name = _POSITIONS.get(key, key + "_%d")
            for i, item in enumerate(value[:MAX_KEYS]):
                if _is_number(item):
                    values[name % i] = float(item)
    return int(match.group("step")), values


def _is_number(value):
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def record(step, values):
    """A record (logparse's form) of one SpecForge line, or None when it says nothing of training."""
    validation = any(key.startswith("eval/") for key in values)
    prefix = "eval/" if validation else ""
    acc = _indexed(values, prefix + "acc_")
    loss_k = _indexed(values, prefix + "ploss_")
    loss = values.get("eval/avg_loss" if validation else "loss")
    if loss is None and not acc:
        return None
    simulated = values.get("eval/simulated_acc_len")
    refused = None
    drafts = len(acc) or len(loss_k) or None  # the positions it evaluates: accepted drafts lie within 0..that
    if simulated is not None and not (math.isfinite(simulated) and 0 <= simulated <= (drafts or MAX_DRAFTS)):
        refused = "eval/simulated_acc_len %.4g at step %d is outside 0..%d (the drafts it evaluates): not shown as a " \
                  "predicted accept length" % (simulated, step, drafts or MAX_DRAFTS)
        simulated = None
    perf_s = values.get("perf/optimizer_step_time_s")
    return {"kind": "validation" if validation else "step", "source": "specforge", "step": step, "epoch": None,
            "epochs_total": None, "loss": loss, "loss_k": loss_k, "full_acc": [], "cond_acc": [], "acc": acc,
            "lr": values.get("lr"), "step_ms": perf_s * 1000.0 if perf_s is not None else None, "tokens_per_s": None,
            "time": None, "values": values,
            "simulated_acc_len": simulated, "refused": refused}


def _indexed(values, prefix):
    found, i = [], 0
    while prefix + str(i) in values:
        found.append(values[prefix + str(i)])
        i += 1
    return found
