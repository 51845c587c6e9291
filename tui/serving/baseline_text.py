"""How a server's accept length reads against its pair's saved baseline, the same in the
Speculation pane, `spec` and `bench`: `accept length 2.41, baseline 3.10 (-22%)`."""

import time


def change(accept_length, baseline):
    """The live figure's change from the baseline as a fraction (-0.22), or None."""
    if accept_length is None or not isinstance(baseline, dict) or not baseline.get("accept_length"):
        return None
    return accept_length / baseline["accept_length"] - 1.0


def against_text(accept_length, baseline):
    """`accept length 2.41, baseline 3.10 (-22%)`; without a figure `accept length -, baseline 3.10`."""
    shown = "-" if accept_length is None else "%.2f" % accept_length
    moved = change(accept_length, baseline)
    return "accept length %s, baseline %.2f%s" % (shown, baseline["accept_length"], "" if moved is None else " (%+.0f%%)" % (100.0 * moved))


def positions_against(baseline):
    """`   (baseline 0.80 0.60 0.44)`: the saved per-position rates, to read beside the live ones."""
    rates = (baseline or {}).get("per_position") or []
    return "   (baseline %s)" % " ".join("%.2f" % rate for rate in rates) if rates else ""


def under(accept_length, baseline):
    """Whether a figure is under the baseline by more than its margin (a regression once it lasts)."""
    moved = change(accept_length, baseline)
    return moved is not None and moved < -baseline.get("margin", 0.0)


def rule_text(baseline):
    """`alert under 2.79 (10% margin) for 10 min; saved 2026-12-03 10:40`."""
    from remote.core.words import minutes

    floor = baseline["accept_length"] * (1.0 - baseline["margin"])
    saved = time.strftime("%Y-%m-%d %H:%M", time.localtime(baseline["saved_at"])) if baseline.get("saved_at") else "?"
    return "alert under %.2f (%.0f%% margin) for %s; saved %s" % (floor, 100.0 * baseline["margin"], minutes(baseline["for_s"]), saved)
