"""The K advisor: which K (tokens drafted per cycle) to serve with, from the two sides of the
trade. The gain side is the accept length at each K' <= K, which a running vLLM's per-position
counts give (metrics.per_k); the cost side is the cycle time at each K (K draft passes and one
verification of K+1 tokens), which only a K sweep measures (bench.py, one server per K). A
least-squares line through the sweep's cycle times lets the live accept lengths predict tokens/s
at each K' while the server runs. Standard library only.
"""

import math
import os

# How many standard errors a figure's ± spans: about a 95% interval.
NOISE_STANDARD_ERRORS = 2.0


def spread(values):
    """The ± of the mean of per-request figures (each request's tokens/s) as a fraction of that
    mean (NOISE_STANDARD_ERRORS standard errors), or None with fewer than two requests."""
    values = [v for v in values or [] if isinstance(v, (int, float)) and not isinstance(v, bool) and v > 0]
    if len(values) < 2:
        return None
    mean = sum(values) / len(values)
    variance = sum((v - mean) ** 2 for v in values) / (len(values) - 1)
    return NOISE_STANDARD_ERRORS * math.sqrt(variance / len(values)) / mean


def margin_noise(row, other):
    """The ± of `row`'s tokens/s over `other`'s, as a fraction, or None when neither has the
    figures. Two sweep rows that ran the same prompts in the same order are compared request by
    request (the ratio of each prompt's tokens/s: what one prompt is harder than another cancels
    out); rows without them, by their own spreads (`noise`)."""
    mine, theirs = (row or {}).get("request_tps") or [], (other or {}).get("request_tps") or []
    if len(mine) == len(theirs) >= 2 and all(isinstance(v, (int, float)) and v > 0 for v in mine + theirs):
        logs = [math.log(a / b) for a, b in zip(mine, theirs)]
        mean = sum(logs) / len(logs)
        deviation = math.sqrt(sum((x - mean) ** 2 for x in logs) / (len(logs) - 1))
        return math.exp(NOISE_STANDARD_ERRORS * deviation / math.sqrt(len(logs))) - 1.0
    noises = [(r or {}).get("noise") for r in (row, other)]
    if all(isinstance(n, (int, float)) for n in noises):
        return math.sqrt(noises[0] ** 2 + noises[1] ** 2)
    return None


def margin_words(best_k, next_k, over_next_k, noise, requests=None):
    """What the best K's margin over the next is worth: None when nothing says (a sweep from
    before the per-request figures), else one phrase."""
    if noise is None:
        if requests == 1:
            return "one request per K gives no spread to tell the noise by: repeat with more --requests"
        return None
    if over_next_k is None or over_next_k <= noise:
        return "K=%d and K=%d are within the noise (±%.1f%%): repeat with more --requests" % (best_k, next_k, 100.0 * noise)
    return "outside the noise (±%.1f%%)" % (100.0 * noise)


def fit_cost_model(rows):
    """Cycle time against K, least squares through the sweep's measured rows:
    `{intercept_ms, slope_ms_per_k, points, max_residual_ms}`, or None with fewer than two Ks."""
    points = [(float(row["k"]), row["cycle_ms"]) for row in rows if row.get("cycle_ms")]
    if len({k for k, _ in points}) < 2:
        return None
    n = float(len(points))
    mean_k = sum(k for k, _ in points) / n
    mean_ms = sum(ms for _, ms in points) / n
    spread = sum((k - mean_k) ** 2 for k, _ in points)
    slope = sum((k - mean_k) * (ms - mean_ms) for k, ms in points) / spread
    intercept = mean_ms - slope * mean_k
    residual = max(abs(ms - (intercept + slope * k)) for k, ms in points)
    return {"intercept_ms": intercept, "slope_ms_per_k": slope, "points": len(points), "max_residual_ms": residual}


def cycle_ms_at(model, k):
    return model["intercept_ms"] + model["slope_ms_per_k"] * k if model else None


def sweep_result(rows, baseline_tps):
    """A K sweep's result: the best K's figures under the single benchmark's keys (spec_tps,
    speedup, accept_length, cycle_ms, break_even_accept_length, verdict, k), plus `sweep` (a row
    per K), `best_k`, `margin` {over_baseline, next_k, over_next_k, noise, within_noise} (fractions
    of tokens/s; `noise` the ± of over_next_k, margin_noise's, None when unknown) and `cost_model`.
    The best K is the one with the highest measured tokens/s."""
    ranked = sorted((row for row in rows if row.get("tokens_per_s")), key=lambda row: -row["tokens_per_s"])
    result = {"sweep": rows, "cost_model": fit_cost_model(rows), "best_k": None, "margin": None}
    if not ranked:
        return dict(result, spec_tps=None, speedup=None, accept_length=None, cycle_ms=None, break_even_accept_length=None,
                    verdict="no K gave tokens", k=None)
    best = ranked[0]
    result.update((key, best.get(key)) for key in ("accept_length", "per_position", "per_position_conditional", "cycle_ms", "speedup", "break_even_accept_length", "verdict", "k"))
    result.update(spec_tps=best["tokens_per_s"], best_k=best["k"])
    margin = {"over_baseline": best["speedup"] - 1.0 if best.get("speedup") else None, "next_k": None, "over_next_k": None,
              "noise": None, "within_noise": None}
    if len(ranked) > 1:
        over, noise = best["tokens_per_s"] / ranked[1]["tokens_per_s"] - 1.0, margin_noise(best, ranked[1])
        margin.update(next_k=ranked[1]["k"], over_next_k=over, noise=noise, within_noise=None if noise is None else over <= noise)
    result["margin"] = margin
    return result


def find_sweep(jobs, target, drafter):
    """(job id, result) of the newest finished K sweep of this target and drafter among `jobs`
    (as jobs.list gives them, oldest first), or (None, None)."""
    def same(a, b):
        return bool(a) and bool(b) and os.path.normpath(a) == os.path.normpath(b)

    for job in reversed(jobs):
        meta = job.get("meta") or {}
        result = (job.get("progress") or {}).get("result") or {}
        if result.get("sweep") and same(meta.get("target"), target) and same(meta.get("drafter"), drafter):
            return job["id"], result
    return None, None


def _estimate(per_position, k):
    """Accept length at k beyond the measured positions: the last position's conditional
    acceptance (its share over the one before) continued, the only thing a K run says about
    positions it never drafted. (accept length, the words saying so)."""
    shares = list(per_position)
    if len(shares) >= 2 and shares[-2] > 0:
        conditional = min(1.0, shares[-1] / shares[-2])
    else:
        conditional = shares[-1]
    while len(shares) < k:
        shares.append(shares[-1] * conditional)
    # Positions are numbered from 0, as `spec` and the panes show them.
    words = "estimate: the last measured position's (position %d) conditional acceptance %.2f continued past the measured K=%d" % (
        len(per_position) - 1, conditional, len(per_position))
    return 1.0 + sum(shares[:k]), words


NO_SWEEP = "no K sweep of this target and drafter"
SWEEP_KS = (1, 2, 3, 4, 5)  # the Ks a sweep is advised over when none was run


def advise(k_current, per_position, sweep, sweep_id=None, extra_ks=2, target=None, drafter=None):
    """The advice for a server running at `k_current` with live `per_position` shares (either
    may be None: advising from a sweep alone) and a sweep result (or None); `target` and
    `drafter` are the server's, where known. Reply of `serving.advise`: `{k_current, per_k:
    [{k, accept_length, cycle_ms, tokens_per_s, speedup, break_even_accept_length, measured,
    source, estimate_from?}], best_k, reason, sweep, cost_model, baseline_tps, sweep_to_run}`
    (`sweep_to_run`: `{target, drafter, ks}`, the sweep that would let K be chosen, each path
    null where not known; null when a sweep is not what is missing). `measured` says whether the accept length was measured at that
    K (source live: this server's counts; sweep: the sweep's prompts) or estimated (source
    estimate, K' beyond the server's K with no sweep row). Tokens/s for live rows are the
    accept length over the cost model's cycle time; for sweep rows with no live figure they are
    what the sweep measured. best_k is chosen among measured rows only."""
    per_position = list(per_position or [])
    sweep_rows = dict((row["k"], row) for row in (sweep or {}).get("sweep") or [])
    model = (sweep or {}).get("cost_model")
    baseline_tps = (sweep or {}).get("baseline_tps")
    k_top = max([k_current or 0] + list(sweep_rows))
    if per_position and not sweep_rows:
        k_top = max(k_top, len(per_position) + extra_ks)
    rows = []
    for k in range(1, k_top + 1):
        row = {"k": k, "accept_length": None, "cycle_ms": cycle_ms_at(model, k), "tokens_per_s": None, "speedup": None,
               "break_even_accept_length": None, "measured": True, "source": None}
        measured_row = sweep_rows.get(k)
        if measured_row and measured_row.get("cycle_ms"):
            # A K the sweep ran: its own cycle time, so one sweep gives one speedup (bench's) at that K.
            row.update(cycle_ms=measured_row["cycle_ms"], cycle_measured=True)
        if k <= len(per_position):
            row.update(accept_length=1.0 + sum(per_position[:k]), source="live")
        elif measured_row and measured_row.get("accept_length"):
            row.update(accept_length=measured_row["accept_length"], source="sweep")
            if not per_position:
                row.update(tokens_per_s=measured_row.get("tokens_per_s"))
        elif per_position:
            length, words = _estimate(per_position, k)
            row.update(accept_length=length, source="estimate", measured=False, estimate_from=words)
        else:
            continue
        if row["tokens_per_s"] is None and row["cycle_ms"] and row["cycle_ms"] > 0:
            row["tokens_per_s"] = 1000.0 * row["accept_length"] / row["cycle_ms"]
        if baseline_tps and row["tokens_per_s"]:
            row["speedup"] = row["tokens_per_s"] / baseline_tps
        if baseline_tps and row["cycle_ms"]:
            row["break_even_accept_length"] = row["cycle_ms"] / 1000.0 * baseline_tps
        rows.append(row)
    best_k, reason = _choose(rows, k_current, sweep, sweep_id)
    to_run = None
    if reason.startswith(NO_SWEEP):
        to_run = {"target": target, "drafter": drafter, "ks": list(SWEEP_KS)}
    return {"k_current": k_current, "per_k": rows, "best_k": best_k, "reason": reason, "sweep": sweep_id,
            "cost_model": model, "baseline_tps": baseline_tps, "sweep_to_run": to_run}


def _choose(rows, k_current, sweep, sweep_id):
    """(best K or None, one line saying why)."""
    # This server's own counts say more of it than a sweep's prompts; with none, the sweep's rows.
    measured = [row for row in rows if row["source"] == "live"] or [row for row in rows if row["measured"] and row["accept_length"] is not None]
    if measured and all(row["accept_length"] <= 1.0 + 1e-9 for row in measured):
        return None, ("this drafter is never accepted (accept length 1.00 at every K measured): check that it was "
                      "trained for this target and shares its tokenizer, or serve without it")
    if not sweep:
        lengths = ", ".join("K=%d %.2f" % (row["k"], row["accept_length"]) for row in rows if row["measured"])
        return None, ("%s: accept length alone cannot choose K, since each K costs a longer cycle (%s); "
                      "run a sweep of K %s" % (NO_SWEEP, lengths or "no accept length yet", ",".join(map(str, SWEEP_KS))))
    candidates = [row for row in rows if row["measured"] and row["tokens_per_s"]]
    if not candidates:
        return None, "no accept length measured yet: send the server requests"
    best = max(candidates, key=lambda row: row["tokens_per_s"])
    noise_said = _noise_said(best, candidates, sweep)
    cost = "cycle %.1f ms (%s sweep %s)" % (best["cycle_ms"], "measured by" if best.get("cycle_measured") else "cost model of", sweep_id)
    said = "K=%d: accept length %.2f (%s), %s: %.1f tok/s" % (best["k"], best["accept_length"], best["source"], cost, best["tokens_per_s"])
    if best["speedup"] is not None:
        said += ", %.2fx the baseline" % best["speedup"]
        if best["speedup"] < 1.0:
            said = "no K pays off: the best is " + said + "; serve without speculation, or train the drafter further"
    current = next((row for row in candidates if row["k"] == k_current), None)
    if current is not None and current is not best:
        said += "; the running K=%d gives %.1f tok/s" % (k_current, current["tokens_per_s"])
        if current["speedup"] is not None:
            said += " (%.2fx)" % current["speedup"]
    elif current is best:
        said += " (the running K)"
    better = [row for row in rows if not row["measured"] and row["tokens_per_s"] and row["tokens_per_s"] > best["tokens_per_s"]]
    if better:
        said += "; K=%d might give more (%s), unmeasured: sweep up to it" % (better[0]["k"], better[0]["estimate_from"])
    if noise_said:
        said += "; " + noise_said
    return best["k"], said


def _noise_said(best, candidates, sweep):
    """margin_words for the best K against the next, with the sweep's noise of those two Ks
    (what their cycle times, and so their tokens/s, can be trusted to); None when the sweep did
    not run both or says nothing of its noise, or when the margin is clear of it."""
    others = [row for row in candidates if row is not best]
    if not others:
        return None
    runner_up = max(others, key=lambda row: row["tokens_per_s"])
    sweep_rows = dict((row.get("k"), row) for row in (sweep or {}).get("sweep") or [])
    if best["k"] not in sweep_rows or runner_up["k"] not in sweep_rows:
        return None
    noise = margin_noise(sweep_rows[best["k"]], sweep_rows[runner_up["k"]])
    over = best["tokens_per_s"] / runner_up["tokens_per_s"] - 1.0
    if noise is not None and over > noise:
        return None  # the advice stands as said
    return margin_words(best["k"], runner_up["k"], over, noise, (sweep or {}).get("requests"))


def judge_against(reply, line, sweep_id):
    """Say in each row of `advise`'s reply which break-even it is judged against
    (`break_even_source`): a sweep row's own (that K's cycle time x the baseline: `sweep jN`),
    else for the running K the server's line (`{accept_length, source}`, filled in), else none."""
    for row in reply["per_k"]:
        if row.get("break_even_accept_length") is not None and sweep_id:
            row["break_even_source"] = "sweep %s" % sweep_id
        elif row["k"] == reply.get("k_current") and line is not None:
            row.update(break_even_accept_length=line["accept_length"], break_even_source=line["source"])
        else:
            row["break_even_source"] = None
    reply["break_even"] = line
    return reply
