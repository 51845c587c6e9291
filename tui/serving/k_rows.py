"""The Speculation pane's rows of K: the accept length every K' up to the server's K gives on the
same traffic (the host's per_k over the pane's window), the break-even each needs and whether it
pays off, and beyond the running K what the newest K sweep of the same target and drafter
measured, as `serving.advise` answers (`specdeck advise` prints the same lines)."""

from .advisor import advice_lines, line_text


def k_text(advice, window, k, line):
    """The rows as text. `advice`: serving.advise's reply (None before it came; the host judges
    each row against a sweep's break-even of that K, else the running K against the server's
    line, and says which); `window`: the pane's serving.stats figures; `k`: the server's K;
    `line`: the server's break-even line as the host gives it (`{accept_length, source, how}`)."""
    if advice and advice.get("per_k"):
        title = "accept length at each K (this server's counts over the window; K' > %s: not measured here)" % (k or "K")
        return "\n".join([title] + advice_lines(advice))
    rows = window.get("per_k") or []
    if not rows:
        return "accept length at each K: no drafts in the window yet"
    parts = []
    for row in rows:
        said = "K=%d %.2f" % (row["k"], row["accept_length"])
        if row["k"] == k and line:
            said += " (break-even %s: %s)" % (line_text(line), "pays off" if row["accept_length"] >= line["accept_length"] else "slower")
        parts.append(said)
    return "accept length at each K (this server's counts; K' > %s not measured): %s" % (k or "K", "   ".join(parts))
