"""Break-even arithmetic of speculative decoding, aware of K (tokens drafted per cycle).

One cycle of a speculative server (draft K tokens, verify them in one target pass) takes
`cycle_s` and yields `accept_length` tokens per sequence, so it serves accept_length / cycle_s
tokens/s against the baseline's `baseline_tps`. It breaks even at accept_length =
cycle_s x baseline_tps (0.030 s x 82 tok/s = 2.46). A chain of K drafts, each accepted with
probability p while all before it were, yields on average 1 + p + ... + p^K =
(1 - p^(K+1)) / (1 - p) tokens, at most K+1: a target beyond K+1 cannot be reached.
"""


def expected_accept_length(p, k):
    """Mean tokens per cycle for per-step acceptance `p` and K drafts."""
    if p >= 1.0:
        return float(k + 1)
    return (1.0 - p ** (k + 1)) / (1.0 - p)


def required_acceptance_rate(accept_length, k):
    """The per-step acceptance p whose chain of K drafts yields `accept_length` on average;
    None when no p does (above K+1). Bisection: the expectation grows with p."""
    if accept_length is None or accept_length > k + 1 + 1e-12:
        return None
    if accept_length <= 1.0:
        return 0.0
    if accept_length >= k + 1:
        return 1.0  # every draft accepted: the bisection would only approach it
    low, high = 0.0, 1.0
    for _ in range(100):
        middle = (low + high) / 2.0
        if expected_accept_length(middle, k) < accept_length:
            low = middle
        else:
            high = middle
    return (low + high) / 2.0


def break_even(cycle_ms, baseline_tps, k=None, target_tps=None):
    """The reply of `specdeck breakeven --json`: the accept length that breaks even, the one a
    target throughput needs, the most K allows, whether the target (else break-even) is
    reachable, and the per-step acceptance rate it requires."""
    if cycle_ms is None or cycle_ms <= 0 or baseline_tps is None or baseline_tps <= 0:
        raise ValueError("cycle time and baseline tokens/s must be positive numbers")
    if k is not None and k < 1:
        raise ValueError("K (tokens drafted per cycle) must be at least 1")
    if target_tps is not None and target_tps <= 0:
        raise ValueError("the target tokens/s must be a positive number")
    cycle_s = cycle_ms / 1000.0
    break_even_length = cycle_s * baseline_tps
    target_length = cycle_s * target_tps if target_tps is not None else None
    needed = target_length if target_length is not None else break_even_length
    max_length = float(k + 1) if k is not None else None
    reachable = True if max_length is None else needed <= max_length + 1e-12
    return {
        "break_even_accept_length": break_even_length,
        "target_accept_length": target_length,
        "max_accept_length": max_length,
        "reachable": reachable,
        "required_acceptance_rate": required_acceptance_rate(needed, k) if k is not None else None,
    }


def verdict(accept_length, break_even_length):
    """One line on where a drafter stands against break-even."""
    if accept_length is None or break_even_length is None:
        return "no accept length yet"
    margin = accept_length - break_even_length
    if margin >= 0:
        return "above break-even by %.2f (accept length %.2f vs %.2f)" % (margin, accept_length, break_even_length)
    return "below break-even by %.2f: speculation is slower (accept length %.2f vs %.2f)" % (-margin, accept_length, break_even_length)
