"""A K sweep of known figures, as the host's arithmetic (remote/serving/advice.py) makes it: for
the tests of what `advise` and `bench` print and of the Speculation pane's K rows."""

from remote.serving import advice

BASELINE_TPS = 82.0


def known_sweep():
    """A sweep whose cycle grows 6 ms a K from 18 ms, and whose accept length grows less and less
    (the K2 case of the notes at K=2: 30 ms a cycle, accept length 2.0, an 82 tok/s baseline)."""
    rows = []
    for k, accept_length in ((1, 1.7), (2, 2.0), (3, 2.2), (4, 2.3)):
        cycle_ms = 18.0 + 6.0 * k
        tokens_per_s = 1000.0 * accept_length / cycle_ms
        rows.append({"k": k, "tokens_per_s": tokens_per_s, "accept_length": accept_length, "cycle_ms": cycle_ms,
                     "speedup": tokens_per_s / BASELINE_TPS, "break_even_accept_length": cycle_ms / 1000.0 * BASELINE_TPS})
    return dict(advice.sweep_result(rows, BASELINE_TPS), baseline_tps=BASELINE_TPS)
