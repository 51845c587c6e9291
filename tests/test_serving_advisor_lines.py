"""What `specdeck advise`, `bench --k LIST` and `coverage` print, from the host's own arithmetic
(remote/serving/advice.py, remote/checkpoints/coverage.py) on known figures: the K2 case of the
notes (30 ms cycle at K=2, 82 tok/s baseline, accept length 2.0) and a sweep around it, and sweeps
whose requests' tokens/s say how sure their best K is."""

import math
import statistics

import pytest

from remote.checkpoints import coverage
from remote.serving import advice, bench
from tui.serving import advisor

from tests.helpers.sweeps import known_sweep as sweep


def test_the_notes_k2_case_is_said_to_be_slower_at_every_k():
    result = sweep()
    lines = advisor.sweep_lines(result)
    assert lines[0] == "baseline      82.00 tok/s"
    # K=2 of the notes: 30 ms a cycle needs 2.46; 2.0 is 19% slower than no speculation.
    k2 = next(line for line in lines if line.startswith("   2"))
    assert "0.81x" in k2 and "2.46" in k2
    best = max(result["sweep"], key=lambda row: row["tokens_per_s"])
    assert result["best_k"] == best["k"] == 1 and lines[1 + best["k"]].endswith("best")
    assert "cycle time    18.0 ms + 6.0 ms per K" in "\n".join(lines)


def test_advice_marks_what_the_server_did_not_measure():
    text = "\n".join(advisor.advice_lines(advice.advise(2, [0.6, 0.4], None)))
    assert "K' > 2: beyond what this server measured" in text
    # Positions 0 and 1 were measured: the estimate speaks of position 1, the last of them.
    assert "estimate: the last measured position's (position 1) conditional acceptance 0.67 continued past the measured K=2" in text
    assert "no K sweep of this target and drafter" in text and "--k 1,2,3,4,5" in text


def test_a_drafter_accepted_nowhere_is_told_so_not_to_run_a_sweep():
    for result in (advice.advise(3, [0.0, 0.0, 0.0], None), advice.advise(3, [0.0, 0.0, 0.0], sweep(), "j12")):
        assert result["best_k"] is None
        assert result["reason"].startswith("this drafter is never accepted") and "serve without it" in result["reason"]
        assert "run a sweep" not in result["reason"]
    # One accepted token somewhere is a drafter that works, however badly.
    assert not advice.advise(3, [0.01, 0.0, 0.0], None)["reason"].startswith("this drafter is never accepted")


def test_advice_at_a_k_the_sweep_ran_gives_the_sweeps_own_speedup():
    result = sweep()
    live_at_sweep_lengths = [1.7 - 1.0, 2.0 - 1.7, 2.2 - 2.0]  # the live server's shares give the sweep's accept lengths
    rows = advice.advise(3, live_at_sweep_lengths, result, "j12")["per_k"]
    for row in rows:
        measured = next(r for r in result["sweep"] if r["k"] == row["k"])
        assert row["cycle_ms"] == measured["cycle_ms"] and row["speedup"] == pytest.approx(measured["speedup"])


def test_advice_with_a_sweep_says_no_k_pays_off():
    text = "\n".join(advisor.advice_lines(advice.advise(2, [0.6, 0.4], sweep(), "j12")))
    assert "advice: no K pays off: the best is K=1" in text
    assert "sweep j12 (its prompts)" in text  # K=3, 4: the sweep's accept lengths, not this server's


def test_coverage_lines_name_the_tokens_never_proposed():
    inside = {1, 2, 3}
    result = coverage.summarize([[1, 2, 9, 3, 9, 7]], inside, lambda token: "<%d>" % token,
                                {"source": "d2t", "draft_vocab_size": 3, "target_vocab_size": 10})
    lines = advisor.coverage_lines(result)
    assert lines[0].startswith("coverage      0.5000   3 of 6 target tokens")
    assert "K=1 1.50" in lines[1]  # 1,2 | 9 | 3,9 | 7: cycles of 2, 1, 2, 1 tokens
    assert lines[-2].strip().startswith("2  33.33%  id 9") and lines[-1].strip().endswith("'<7>'")
    full = coverage.summarize([[1, 2]], None, str, {})
    assert advisor.coverage_lines(full)[0].startswith("coverage      1 (the drafter has no d2t/t2d")


def busy_sweep(k1_rates, k2_rates, baseline_tps=40.0):
    """A two-K sweep as bench.run makes it from each request's tokens/s (the same prompts, in the
    same order, at both Ks; every request the same number of tokens, so a K's tokens/s is the
    harmonic mean of its requests')."""
    rows = []
    for k, rates, accept_length in ((1, k1_rates, 1.6), (2, k2_rates, 1.9)):
        tokens_per_s = len(rates) / sum(1.0 / r for r in rates)
        rows.append(bench.measured_k(k, tokens_per_s, {"accept_length": accept_length}, baseline_tps, rates))
    return dict(advice.sweep_result(rows, baseline_tps), baseline_tps=baseline_tps, requests=len(k1_rates))


def paired_noise(rates, others):
    logs = [math.log(a / b) for a, b in zip(rates, others)]
    return math.exp(2.0 * statistics.stdev(logs) / math.sqrt(len(logs))) - 1.0


def test_a_sweep_on_a_busy_host_says_its_best_k_is_within_the_noise():
    # Another process took the GPU now and then: K=2 came out a little slower than K=1, by less than
    # the requests of one prompt differ from one K to the other.
    k1 = [52.0, 31.0, 49.0, 50.0, 30.0, 51.0, 47.0, 33.0]
    k2 = [33.0, 50.0, 47.0, 31.0, 49.0, 50.0, 30.0, 52.0]
    result = busy_sweep(k1, k2)
    assert result["best_k"] == 1 and result["margin"]["next_k"] == 2 and result["margin"]["within_noise"] is True
    noise = paired_noise(k1, k2)
    assert result["margin"]["noise"] == pytest.approx(noise)
    said = "K=1 and K=2 are within the noise (±%.1f%%): repeat with more --requests" % (100.0 * noise)
    lines = advisor.sweep_lines(result)
    assert said in lines
    # Each K's tokens/s with its spread across the requests: two standard errors of their mean.
    k1_row = next(line for line in lines if line.startswith("   1"))
    assert "%.1f%%" % (100.0 * 2.0 * statistics.stdev(k1) / math.sqrt(len(k1)) / statistics.mean(k1)) in k1_row
    reason = advice.advise(None, None, result, "j7")["reason"]
    assert reason.startswith("K=1: ") and reason.endswith("; " + said)


def test_a_clear_margin_is_said_to_be_outside_the_noise():
    k1 = [40.0, 30.0, 44.0, 36.0, 41.0, 33.0]
    k2 = [rate * 1.25 + (0.2 if i % 2 else -0.2) for i, rate in enumerate(k1)]  # 25% faster on every prompt
    result = busy_sweep(k1, k2)
    assert result["best_k"] == 2 and result["margin"]["within_noise"] is False
    best = next(line for line in advisor.sweep_lines(result) if line.startswith("best K=2"))
    assert best.endswith("over the next best (K=1), outside the noise (±%.1f%%)" % (100.0 * paired_noise(k2, k1)))
    assert "noise" not in advice.advise(None, None, result, "j7")["reason"]


def test_one_request_per_k_says_it_cannot_tell_the_noise():
    result = busy_sweep([40.0], [41.0])
    assert result["margin"]["noise"] is None and result["margin"]["within_noise"] is None
    assert "one request per K gives no spread to tell the noise by: repeat with more --requests" in advisor.sweep_lines(result)
    assert "one request per K" in advice.advise(None, None, result, "j7")["reason"]
