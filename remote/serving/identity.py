"""Whether an engine's figures agree with themselves: the mean accept length it reports is 1 + the
sum of its per-position shares (of all drafts, the share whose token at position i was accepted),
since a draft's accepted tokens are the positions it got through, and the verified token is the 1.
vLLM's counters give both sides exactly; its log line gives both rounded; SGLang gives no
per-position figure, so its figures are not checked. A violation is carried with both figures
(an engine has shipped one), never folded into either. Standard library only.
"""

# Counters: exact counts over the same drafts; a difference that shows at the two places accept
# length is written to (half its last digit) is a disagreement. A log line rounds the mean to two
# places and each rate to three: its sides may differ by those roundings.
COUNTER_TOLERANCE = 0.005
LOG_MEAN_ROUNDING = 0.005
LOG_RATE_ROUNDING = 0.0005


def log_tolerance(positions):
    """How far a log line's two sides may differ by its roundings alone."""
    return LOG_MEAN_ROUNDING + LOG_RATE_ROUNDING * positions + 1e-9


def message(one_plus_shares, accept_length):
    return "the engine's figures disagree: 1 + \u03a3 shares = %.2f, accept length = %.2f" % (one_plus_shares, accept_length)


def check(accept_length, shares, tolerance=COUNTER_TOLERANCE):
    """`{holds, one_plus_shares, accept_length, message}` for figures that can be checked (an
    accept length and at least one per-position share), `message` None when they agree; None when
    there is nothing to check."""
    if accept_length is None or not shares or any(share is None for share in shares):
        return None
    one_plus_shares = 1.0 + sum(shares)
    holds = abs(one_plus_shares - accept_length) <= tolerance
    return {"holds": holds, "one_plus_shares": round(one_plus_shares, 6), "accept_length": round(accept_length, 6),
            "message": None if holds else message(one_plus_shares, accept_length)}
