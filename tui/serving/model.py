"""How a server's speculation reads, the same in the Speculation pane and in `specdeck spec`:
each figure with its precision said once (accept length to two places, acceptance to three,
tokens/s to one), the keys `spec --json` answers with, whether a server still runs, and how one
ended. A server started by specdeck is a job: its states are the jobs' (tui/jobs/model.py)."""

import time

from .. import display
from ..jobs import model as jobs

# A server's state as serving.status gives it: starting (also while Slurm holds it in its queue),
# ready (it answers), died (its job ended).
SERVER_STARTING, SERVER_READY, SERVER_DIED = "starting", "ready", "died"
RECENT_S = 10  # the host's `recent` window: its figures of "now" (remote/serving/sampler.py RECENT_S)

# What `specdeck spec --json` answers with: the host's figures over the window, their age, and the
# server's break-even line as the host keeps it ({accept_length, source, how}).
# `predicted`: what the served drafter's speculation profile predicts (remote/serving/served_profile.py),
# `identity`: whether accept length is 1 + the sum of the per-position shares (remote/serving/identity.py).
SPEC_KEYS = ("accept_length", "per_position", "per_k", "draft_acceptance_rate", "num_drafts", "accepted_tps", "drafted_tps",
             "generation_tps", "window_s", "source", "time", "age_s", "stale", "error", "break_even", "predicted", "identity")

# How each figure is written, wherever it is shown.
FORMATS = {
    "accept_length": "%.2f",
    "draft_acceptance_rate": "%.3f",
    "num_drafts": "%d",
    "accepted_tps": "%.1f",
    "drafted_tps": "%.1f",
    "generation_tps": "%.1f",
    "running": "%d",
    "waiting": "%d",
    "window_s": "%.0f s",
}


def figure(figures, key):
    """One figure as text: `2.31`, `412.5`; `-` when the host has none (no drafts yet, say)."""
    value = figures.get(key)
    if value is None:
        return "-"
    if key == "kv_cache_usage":
        return "%.0f%%" % (100.0 * value)
    return FORMATS[key] % value


def per_position(figures):
    """`0.81 0.62 0.44`: the share of drafts whose token at each position was accepted."""
    return " ".join("%.2f" % rate for rate in figures.get("per_position") or []) or "-"


def per_k(figures):
    """`K=1 1.81  K=2 2.43  K=3 2.87`: the accept length each K' up to the server's K would give
    on the same traffic (the host's per_k, from the per-position counts)."""
    return "  ".join("K=%d %.2f" % (row["k"], row["accept_length"]) for row in figures.get("per_k") or []) or "-"


def is_live(info):
    """True while a server's job runs; a server attached by URL (no job: `info` None) counts as running."""
    return info is None or jobs.is_live(info)


def is_dead(info):
    """True for a server whose job ended badly (a non-zero exit, or lost), not one that was stopped."""
    return info is not None and jobs.has_failed(info)


def how_it_ended(info):
    """`exited 1: CUDA out of memory`: how the server's job ended (the host's own line if it gave
    one), with the engine's first error line when that is not already said."""
    ended = info.get("ended") or jobs.how_it_ended(info)
    first = info.get("first_error")
    # The engine's line and the host's are a server's text: one line, its controls as escapes.
    return display.safe_text(ended if not first or first in ended else "%s: %s" % (ended, first))


def target_key(target):
    """A target's key as the host keeps its break-even (remote/serving/break_even_store.py)."""
    key = target.rstrip("/") if isinstance(target, str) else None
    return key or None


def parse_break_even(text):
    """The parameters of `serving.set_break_even` for what a user typed: an accept length
    (`2.46`) or CYCLE_MS@BASELINE_TPS (`30@82`, the host multiplies them); ValueError else."""
    text = text.strip()
    if "@" in text:
        cycle_ms, baseline_tps = (float(part) for part in text.split("@", 1))
        if not (cycle_ms > 0 and baseline_tps > 0):
            raise ValueError(text)
        return {"cycle_ms": cycle_ms, "baseline_tps": baseline_tps}
    value = float(text)
    if not value > 0 or value != value or value == float("inf"):
        raise ValueError(text)
    return {"accept_length": value}


def line_of(value):
    """A break-even line from the host, `{accept_length, source, how}`, or None when it is not one."""
    if not isinstance(value, dict):
        return None
    length = value.get("accept_length")
    if isinstance(length, bool) or not isinstance(length, (int, float)) or length != length or length in (float("inf"), float("-inf")):
        return None
    return {"accept_length": float(length), "source": value.get("source") if isinstance(value.get("source"), str) else None,
            "how": value.get("how") if isinstance(value.get("how"), str) else None}


# An SGLang server's own keys in `spec --json` (remote/serving/sglang.py figures): its engine,
# whether the figures are a window of its decode lines or its gauges' latest value (`reading`),
# the gauges with their age, the windows, and its speculative settings.
SGLANG_KEYS = ("engine", "reading", "gauges", "windows", "speculative")
SETTING_NAMES = (("algorithm", "algorithm"), ("num_steps", "num_steps"), ("eagle_topk", "eagle_topk"),
                 ("num_draft_tokens", "num_draft_tokens"), ("draft_model_path", "draft model"))


def engine_lines(figures):
    """An SGLang server's lines: `engine: sglang   speculative: {algorithm: EAGLE3, ...}` and, for
    figures read from its gauges, that each is the latest value and how old; none for vLLM."""
    if figures.get("engine") != "sglang":
        return []
    settings = figures.get("speculative")
    if isinstance(settings, dict):
        said = "{%s}" % ", ".join("%s: %s" % (label, settings.get(key)) for key, label in SETTING_NAMES if settings.get(key) is not None) \
            if settings.get("algorithm") else "off"
    else:
        said = "not known yet (its /get_server_info has not answered)"
    lines = [display.safe_text("engine: sglang   speculative: %s" % said)]
    gauges = figures.get("gauges") if isinstance(figures.get("gauges"), dict) else {}
    if figures.get("reading") == "latest":
        age = gauges.get("age_s")
        lines.append("figures: the latest value of its gauges (%s old), not a window: no decode lines of its log in the window"
                     % ("?" if not isinstance(age, (int, float)) else "%.0f s" % age))
    elif figures.get("reading") == "window":
        lines.append("figures: over %s decode lines of its log" % figures.get("lines"))
    return lines


def _number(value):
    return isinstance(value, (int, float)) and not isinstance(value, bool) and value == value


def identity_line(figures):
    """`the engine's figures disagree: 1 + Σ shares = 3.42, accept length = 3.90` when the host
    found the engine's accept length is not 1 + the sum of its per-position shares; else None."""
    identity = figures.get("identity")
    if not isinstance(identity, dict) or identity.get("holds") is not False:
        return None
    if not (_number(identity.get("one_plus_shares")) and _number(identity.get("accept_length"))):
        return None
    return "the engine's figures disagree: 1 + \u03a3 shares = %.2f, accept length = %.2f" % (identity["one_plus_shares"], identity["accept_length"])


def predicted_of(figures):
    """The served drafter's profile as the host read it ({accept_length, per_position, ...,
    error}), or None when the server's drafter has none."""
    predicted = figures.get("predicted")
    return predicted if isinstance(predicted, dict) else None


def predicted_figure(predicted, live):
    """`3.65 at K=3 (live 3.90: +7%)`: the profile's accept length at the served K beside the live one."""
    if not _number(predicted.get("accept_length")):
        return "none at the served K"
    k = predicted.get("served_k") or predicted.get("k")
    said = "%.2f at K=%s" % (predicted["accept_length"], k)
    if _number(live):
        said += " (live %.2f: %+.0f%%)" % (live, 100.0 * (live / predicted["accept_length"] - 1.0))
    return said


def conditions_text(predicted, now_s=None):
    """`scored on DATA (val, held out), 8 samples, temperature 0; profile written 2h ago`."""
    conditions = predicted.get("conditions") if isinstance(predicted.get("conditions"), dict) else {}
    how = [str(conditions["split"])] if isinstance(conditions.get("split"), str) else []
    if conditions.get("held_out") is True:
        how.append("held out")
    elif conditions.get("held_out") is False:
        how.append("the drafter's own training data")
    said = "scored on %s%s" % (conditions.get("dataset") or "data not named", " (%s)" % ", ".join(how) if how else "")
    if _number(conditions.get("num_samples")):
        said += ", %d samples" % conditions["num_samples"]
    if _number(conditions.get("temperature")):
        said += ", temperature %g" % conditions["temperature"]
    if _number(predicted.get("written_at")):
        said += "; profile written %s ago" % display.format_age((now_s or time.time()) - predicted["written_at"])
    return display.safe_text(said)


def predicted_lines(figures, label_width=18):
    """The profile's lines under the live figures: its accept length beside the live one, its
    per-position shares, its conditions and age, its notes; or why it was refused."""
    predicted = predicted_of(figures)
    if predicted is None:
        return []
    label, pad = "predicted".ljust(label_width), " " * label_width
    if predicted.get("error"):
        return [display.safe_text("%snone: %s" % (label, predicted["error"]))]
    lines = ["%s%s" % (label, predicted_figure(predicted, figures.get("accept_length")))]
    shares = [v for v in predicted.get("per_position") or [] if _number(v)]
    if shares:
        lines.append("%s%s  unconditional, the profile's" % (pad, " ".join("%.2f" % v for v in shares)))
    lines.append(pad + conditions_text(predicted))
    lines.extend(display.safe_text(pad + note) for note in predicted.get("notes") or [] if isinstance(note, str))
    return lines


def predicted_summary(predicted, live):
    """The Speculation pane's line of the profile: `predicted 3.65 at K=3 (live 3.90: +7%)   scored
    on ...`, or `predicted: none: speculation_profile.json refused: ...`."""
    if predicted.get("error"):
        return display.safe_text("predicted: none: %s" % predicted["error"])
    notes = "".join("; " + note for note in predicted.get("notes") or [] if isinstance(note, str))
    return display.safe_text("predicted %s   %s%s" % (predicted_figure(predicted, live), conditions_text(predicted), notes))


def predicted_shares(predicted):
    """`0.95 0.90 0.80`: the profile's unconditional share per position, or None."""
    shares = [v for v in (predicted or {}).get("per_position") or [] if _number(v)]
    return " ".join("%.2f" % v for v in shares) if shares and not predicted.get("error") else None
