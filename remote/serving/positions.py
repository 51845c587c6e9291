"""Per-position acceptance both ways, and the K a server drafted with.

vLLM's per-position counter gives the unconditional share: of all drafts, the share whose token at
position i was accepted (which needs every token before it accepted too). The conditional rate is
the chance position i is accepted given i-1 was: share_i / share_{i-1}, with share_{-1} = 1. It is
undefined (None) where the position before was never accepted: no draft reached i to be judged.

With dynamic K (`num_speculative_tokens_per_batch_size`) the counters divide by every draft,
including those that never drafted position i, so the shares they give are not the shares of
drafts that reached the position. The per-request histograms with per-step drafted counts
(`--per-request-spec-decode-metrics detailed`) can say it; without them the per-position figures
are marked as not knowable."""

import json

# The keys both_ways gives, which every reply with per-position figures passes on.
FIGURE_KEYS = ("per_position", "per_position_conditional", "per_position_note", "per_position_counter", "k_schedule", "k_in_force")
UNDEFINED_WORDS = "undefined: no draft reached it (the position before was never accepted)"
NOT_KNOWABLE_WORDS = ("not knowable: K changes with the batch size (%s) and vLLM's per-position counter divides by every draft; "
                      "per-request metrics at the detailed level can say it")


def conditional(shares):
    """The conditional rate at every position from the unconditional shares: share_i / share_{i-1}
    (share_{-1} = 1), None where share_{i-1} is 0. Clamped to 1 (counters read a moment apart can
    put a share a hair above the one before)."""
    result, before = [], 1.0
    for share in shares or ():
        result.append(None if before is None or before <= 0 else min(1.0, share / before))
        before = share
    return result


def from_histograms(histograms):
    """Unconditional shares from summed acceptance histograms (bucket j: verify steps that accepted
    exactly j drafts; K+1 buckets): the share of steps that accepted more than i, at each i < K."""
    total = [0] * max((len(h) for h in histograms), default=0)
    for histogram in histograms:
        for index, count in enumerate(histogram):
            total[index] += count
    steps = sum(total)
    if not steps:
        return []
    return [sum(total[i + 1:]) / steps for i in range(len(total) - 1)]


def from_steps(per_step_accepted, per_step_drafted):
    """Per position, over only the steps that drafted it (a step that drafted fewer tokens under a
    smaller K is left out of the positions it never drafted): (shares, conditional, drafted_at) where
    shares[i] = steps that accepted more than i / steps that drafted more than i, conditional[i] =
    steps that accepted more than i / steps that accepted more than i-1 among those that drafted i."""
    width = max(per_step_drafted, default=0)
    shares, rates, drafted_at = [], [], []
    for i in range(width):
        drafted = [(a, d) for a, d in zip(per_step_accepted, per_step_drafted) if d > i]
        reached = [a for a, _ in drafted if a >= i]  # position i was judged: all before it accepted
        drafted_at.append(len(drafted))
        shares.append(sum(1 for a, _ in drafted if a > i) / len(drafted) if drafted else None)
        rates.append(sum(1 for a in reached if a > i) / len(reached) if reached else None)
    return shares, rates, drafted_at


def dynamic_schedule(speculative_config):
    """`(schedule, k)` from a `--speculative-config` (text or dict) when K changes with the batch
    size: schedule `[[start_bs, end_bs, K], ...]`, k its `num_speculative_tokens` (the most any
    row drafts: vLLM caps each row's K at it); else (None, None)."""
    if isinstance(speculative_config, str):
        try:
            speculative_config = json.loads(speculative_config)
        except ValueError:
            return None, None
    if not isinstance(speculative_config, dict):
        return None, None
    schedule = speculative_config.get("num_speculative_tokens_per_batch_size")
    if not isinstance(schedule, list) or not schedule:
        return None, None
    rows = []
    for row in schedule[:64]:
        if isinstance(row, (list, tuple)) and len(row) == 3 and all(isinstance(v, int) and not isinstance(v, bool) for v in row):
            rows.append(list(row))
    k = speculative_config.get("num_speculative_tokens")
    k = k if isinstance(k, int) and not isinstance(k, bool) and k > 0 else max((row[2] for row in rows), default=None)
    return (rows, k) if rows else (None, None)


def schedule_from_argv(argv):
    """`(schedule, k)` of the dynamic K in a server's command line (its `--speculative-config`),
    or (None, None)."""
    argv, found = [str(a) for a in argv or ()], None
    for index, arg in enumerate(argv):  # the last one given is the one the engine's parser keeps
        if arg == "--speculative-config" and index + 1 < len(argv):
            found = argv[index + 1]
        elif arg.startswith("--speculative-config="):
            found = arg.split("=", 1)[1]
    return dynamic_schedule(found) if found is not None else (None, None)


def k_words(k, schedule):
    """The K in force as words: `K=3`, or `K by batch size: 1-1 K=3, 2-8 K=2 (at most 3)`."""
    if not schedule:
        return "K=%s" % k if k is not None else "K not known"
    rows = ", ".join("%d-%d K=%d" % (start, end, min(row_k, k or row_k)) for start, end, row_k in schedule)
    return "K by batch size: %s (at most %s)" % (rows, k)


def not_knowable(k, schedule):
    """Why the counters' per-position figures are not knowable under this schedule."""
    return NOT_KNOWABLE_WORDS % k_words(k, schedule).split(": ", 1)[1]


def both_ways(figures, schedule=None, k=None):
    """`figures` (with its unconditional `per_position`) given `per_position_conditional` beside it.
    With K changing by batch size (`schedule`, at most `k`) it names the K (`k_in_force`): when
    every draft of the window drafted all k positions (its draft tokens are k x its drafts) the
    counters' shares are over drafts that reached each position and stand; otherwise they are
    moved to `per_position_counter` and marked not knowable (`per_position_note`)."""
    result = dict(figures)
    if schedule:
        result.update(k_schedule=schedule, k_in_force=k_words(k, schedule))
        drafts, tokens = result.get("num_drafts"), result.get("num_draft_tokens")
        if drafts and not (k and tokens == k * drafts):
            result["k_in_force"] += "; fewer than %s drafted in this window" % k
            result["per_position_counter"] = result.get("per_position")
            result["per_position"], result["per_position_conditional"] = [], []
            result["per_position_note"] = not_knowable(k, schedule)
            return result
    result["per_position_conditional"] = conditional(result.get("per_position") or [])
    return result


def over_requests(decodings):
    """Per-position figures over the drafts of many requests, from each reply's
    `metrics.speculative_decoding` (None for a request without them is left out): `{per_position,
    per_position_conditional, ks_used, drafted_at?, per_position_note?}`. A request's per-step
    counts (detailed level) give each position over the steps that drafted it; a request whose
    every step drafted its full K (its drafted tokens = K x its steps) is read from its histogram;
    with neither, a K that changed makes the positions not knowable."""
    accepted, drafted, unknown, ks = [], [], 0, set()
    for decoding in decodings:
        if not isinstance(decoding, dict):
            continue
        k, steps = decoding.get("num_spec_tokens") or 0, decoding.get("num_spec_steps") or 0
        per_accepted, per_drafted = decoding.get("per_step_accepted"), decoding.get("per_step_drafted")
        if isinstance(per_accepted, list) and isinstance(per_drafted, list) and len(per_accepted) == len(per_drafted):
            accepted += per_accepted
            drafted += per_drafted
            ks.update(per_drafted)
        elif steps and decoding.get("num_draft_tokens") == k * steps:
            for count_accepted, count in enumerate(decoding.get("acceptance_histogram") or ()):
                accepted += [count_accepted] * count
                drafted += [k] * count
            ks.add(k)
        elif steps:
            unknown += 1
    result = {"ks_used": sorted(ks)}
    if unknown:
        result.update(per_position=[], per_position_conditional=[], per_position_note=(
            "not knowable: %d request(s) drafted fewer than their K at some steps and gave no per-step counts "
            "(--per-request-spec-decode-metrics detailed gives them)" % unknown))
        return result
    shares, rates, drafted_at = from_steps(accepted, drafted)
    result.update(per_position=shares, per_position_conditional=rates)
    if len(ks) > 1:
        result["drafted_at"] = drafted_at
    return result
