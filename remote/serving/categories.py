"""Acceptance by kind of prompt and by prompt length, from vLLM's per-request speculation metrics
(`--per-request-spec-decode-metrics summary|detailed`: each reply's `metrics.speculative_decoding`
with `mean_acceptance_length` and an `acceptance_histogram` of K+1 buckets, bucket j counting the
verify steps that accepted exactly j drafts). A benchmark whose prompts carry categories sends each
prompt to the baseline and the speculative server alike; this module groups the replies.

Per category and per length bucket: accept length (over the group's verify steps), the summed
histogram, tokens/s (the group's tokens over its seconds, one request at a time) and the speedup
against the baseline on the same prompts. The requests that accept least are named; a request
with acceptance near 0 (or every draft accepted) is flagged with its first words, a prompt the
drafter cannot follow at all (or one so repetitive it tells little)."""

from . import engines, positions, request_metrics

PER_REQUEST_FLAG = "--per-request-spec-decode-metrics"
DEFAULT_CATEGORY = "default"
MAX_CATEGORIES = 32
MAX_CATEGORY_CHARS = 40
WORST_SHOWN = 3
FLAGS_SHOWN = 10
REFUSED_SHOWN = 10
NEAR_ZERO = 0.05  # draft acceptance at or under this is "near 0"
FIRST_WORDS = 8
FIRST_WORDS_CHARS = 80
# Prompt-length buckets, in prompt tokens as the server counted them: [low, high) each.
LENGTH_BUCKETS = ((0, 64), (64, 256), (256, 1024), (1024, 4096), (4096, None))

_LONG_CONTEXT = " ".join([
    "The verify step of speculative decoding scores every drafted token in one forward pass of the target.",
    "A drafter proposes a chain of K tokens from the target's hidden states; the target keeps the longest prefix it agrees with",
    "and adds one token of its own, so a cycle yields between one and K+1 tokens.",
    "How many it yields depends on how predictable the text is: boilerplate and code repeat, open conversation does not.",
] * 6) + "\nIn one sentence: why does the number of tokens a cycle yields vary with the text?"
BUILTIN_SET = (
    ("code", "Write a Python function that reverses a linked list."),
    ("code", "Write a SQL query that lists the ten customers with the most orders."),
    ("maths", "What is 17 multiplied by 23? Show the steps."),
    ("maths", "Solve for x: 3x + 7 = 25."),
    ("chat", "Hi! Can you suggest a name for a grey cat?"),
    ("chat", "Give three tips for writing clear commit messages."),
    ("long context", _LONG_CONTEXT),
    ("long context", _LONG_CONTEXT.replace("In one sentence", "In two sentences")),
)


def per_request_args(engine, interpreter, engine_args):
    """What turns per-request metrics on (summary) for the speculative server: nothing when the
    user asked for a level already, for another engine, or for a vLLM without the option (then the
    replies carry none and the result says how many)."""
    if engine != "vllm" or any(str(a).startswith(PER_REQUEST_FLAG) for a in engine_args):
        return []
    if not engines.vllm_declares(interpreter, "per_request_spec_decode_metrics", ("config/observability.py", "engine/arg_utils.py")):
        return []
    return [PER_REQUEST_FLAG, "summary"]


def first_words(prompt):
    """The first words of a prompt (text, or token ids shown as ids), bounded."""
    if isinstance(prompt, list):
        text = "token ids " + " ".join(str(t) for t in prompt[:FIRST_WORDS])
    else:
        text = " ".join(str(prompt).split()[:FIRST_WORDS])
    return text[:FIRST_WORDS_CHARS]


def length_bucket(prompt_tokens):
    for low, high in LENGTH_BUCKETS:
        if prompt_tokens is not None and prompt_tokens >= low and (high is None or prompt_tokens < high):
            return "%d-%d tokens" % (low, high - 1) if high else "%d+ tokens" % low
    return "unknown length"


def request_record(category, prompt, reply, seconds, refused=None):
    """What one reply says, kept for grouping: `{category, first_words, prompt_tokens, tokens,
    seconds, decoding, refused}` (decoding: the reply's `metrics.speculative_decoding` as
    request_metrics.py checked it, or None). A reply whose usage cannot be read, or that could
    not be read at all (`refused` given), counts no tokens and no seconds; one whose metrics fail
    their checks keeps its tokens and seconds; either says why in `refused`."""
    record = {"category": category, "first_words": first_words(prompt), "prompt_tokens": None, "tokens": 0, "seconds": 0.0,
              "decoding": None, "refused": refused}
    if refused is not None:
        return record
    try:
        record["tokens"], record["prompt_tokens"] = request_metrics.usage(reply)
        record["seconds"] = seconds
        record["decoding"] = request_metrics.speculation_of(reply)
    except request_metrics.BadReply as exc:
        record["refused"] = str(exc)
    return record


def refused_replies(phases):
    """`{count, shown: [{phase, request, category, first_words, why}]}` of the replies refused in
    `phases` ([(phase name, its records in request order)]), the first REFUSED_SHOWN named."""
    refused = [{"phase": name, "request": index + 1, "category": record["category"], "first_words": record["first_words"],
                "why": record["refused"]} for name, records in phases for index, record in enumerate(records) if record.get("refused")]
    return {"count": len(refused), "shown": refused[:REFUSED_SHOWN]}


def _rate(records):
    seconds = sum(r["seconds"] for r in records)
    return sum(r["tokens"] for r in records) / seconds if seconds > 0 else None


def _group(key, records, baseline, k):
    decodings = [r["decoding"] for r in records if r["decoding"]]
    width = max([len(d.get("acceptance_histogram") or ()) for d in decodings] + [k + 1 if k else 0])
    histogram = [0] * width
    for decoding in decodings:
        for index, count in enumerate((decoding.get("acceptance_histogram") or ())[:width]):
            histogram[index] += int(count)
    steps = sum(histogram)
    accept_length = 1.0 + sum(j * count for j, count in enumerate(histogram)) / steps if steps else None
    tokens_per_s, baseline_tps = _rate(records), _rate(baseline)
    group = {"accept_length": accept_length, "histogram": histogram, "tokens_per_s": tokens_per_s, "baseline_tps": baseline_tps,
             "speedup": tokens_per_s / baseline_tps if tokens_per_s and baseline_tps else None, "requests": len(records)}
    group.update((name, value) for name, value in positions.over_requests(decodings).items() if name != "ks_used")
    return dict(key, **group)


def _accept_length(record):
    return (record["decoding"] or {}).get("mean_acceptance_length")


def summarise(spec_records, baseline_records, k):
    """`{categories: [{category, accept_length, histogram, tokens_per_s, baseline_tps, speedup,
    requests, per_position, per_position_conditional}], lengths: [{length, ...the same}],
    worst: [{category, accept_length, first_words}], flagged: [{category, accept_length,
    first_words, why}], ks_used, missing}` from the two servers' records of the same prompts, in
    the same order (`missing`: replies without per-request metrics)."""
    pairs = list(zip(spec_records, baseline_records))
    categories, lengths = {}, {}
    for spec, base in pairs:
        categories.setdefault(spec["category"], []).append((spec, base))
        lengths.setdefault(length_bucket(spec["prompt_tokens"]), []).append((spec, base))
    by_category = [_group({"category": name}, [s for s, _ in group], [b for _, b in group], k) for name, group in categories.items()]
    order = [label for label in (length_bucket(low) for low, _ in LENGTH_BUCKETS) if label in lengths] + \
        [label for label in lengths if label == "unknown length"]
    by_length = [_group({"length": label}, [s for s, _ in lengths[label]], [b for _, b in lengths[label]], k) for label in order]
    measured = [r for r in spec_records if _accept_length(r) is not None]
    worst = sorted(measured, key=_accept_length)[:WORST_SHOWN]
    flagged = []
    for record in measured:
        decoding = record["decoding"]
        rate = decoding.get("draft_acceptance_rate")
        why = None
        if rate is not None and rate <= NEAR_ZERO:
            why = "acceptance near 0"
        elif decoding.get("num_spec_tokens") and _accept_length(record) >= decoding["num_spec_tokens"] + 1:
            why = "every draft accepted (K+1)"
        if why and len(flagged) < FLAGS_SHOWN:
            flagged.append({"category": record["category"], "accept_length": _accept_length(record), "first_words": record["first_words"],
                            "why": why})
    ks_used = positions.over_requests([r["decoding"] for r in spec_records if r["decoding"]])["ks_used"]
    return {"categories": by_category, "lengths": by_length, "ks_used": ks_used,
            "worst": [{"category": r["category"], "accept_length": _accept_length(r), "first_words": r["first_words"]} for r in worst],
            "flagged": flagged, "missing": sum(1 for r in spec_records if r["decoding"] is None and not r.get("refused"))}
