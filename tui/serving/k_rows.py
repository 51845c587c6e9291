"""The Speculation pane's rows of K: the accept length every K' up to the server's K gives on the
same traffic (the host's per_k over the pane's window), the break-even each needs and whether it
pays off, and beyond the running K what the newest K sweep of the same target and drafter
measured, as `serving.advise` answers (`specdeck advise` prints the same lines)."""

from .advisor import advice_lines


def k_text(advice, window, k, line, line_source):
    """The rows as text. `advice`: serving.advise's reply (None before it came); `window`: the
    pane's serving.stats figures; `k`: the server's K; `line`: the pane's break-even, which holds
    for the running K's cycle only (a hand-set line, or a single-K benchmark's)."""
    if advice and advice.get("per_k"):
        advice = dict(advice, per_k=[dict(row) for row in advice["per_k"]])
        for row in advice["per_k"]:
            if row["k"] == k and row.get("break_even_accept_length") is None and line is not None:
                row["break_even_accept_length"] = line  # no sweep: the pane's line is this K's
        title = "accept length at each K (this server's counts over the window; K' > %s: not measured here)" % (k or "K")
        return "\n".join([title] + advice_lines(advice))
    rows = window.get("per_k") or []
    if not rows:
        return "accept length at each K: no drafts in the window yet"
    parts = []
    for row in rows:
        said = "K=%d %.2f" % (row["k"], row["accept_length"])
        if row["k"] == k and line is not None:
            said += " (break-even %.2f, %s: %s)" % (line, line_source, "pays off" if row["accept_length"] >= line else "slower")
        parts.append(said)
    return "accept length at each K (this server's counts; K' > %s not measured): %s" % (k or "K", "   ".join(parts))
