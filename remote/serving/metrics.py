"""An inference server's speculation numbers: its Prometheus text read into one snapshot of
counters and gauges, two snapshots turned into the figures of the window between them, and the
engines' own log lines read as a fallback.

vLLM exports counters (drafts, drafted tokens, accepted tokens, accepted tokens per position),
so any window's accept length is 1 + Δaccepted / Δdrafts. SGLang exports gauges that already
hold an average over its last logging interval. The text is parsed with prometheus-client's
parser (carried in the agent's zipapp; imported when first needed, so this module stays
importable with the standard library alone) after the lines of metrics not read here are
dropped, so a server exporting a flood of other series costs a scan, not a parse. vLLM also
writes `<counter>_created` samples (creation times, ~1.8e9) in the same family: only the
`_total` sample is a count.
"""

import re

from . import identity, sglang
from .positions import conditional as conditional_rates

VLLM_COUNTERS = {
    "vllm:spec_decode_num_drafts": "drafts",
    "vllm:spec_decode_num_draft_tokens": "draft_tokens",
    "vllm:spec_decode_num_accepted_tokens": "accepted_tokens",
    "vllm:generation_tokens": "generation_tokens",
}
VLLM_PER_POSITION = "vllm:spec_decode_num_accepted_tokens_per_pos"
VLLM_GAUGES = {
    "vllm:num_requests_running": "running",
    "vllm:num_requests_waiting": "waiting",
    "vllm:kv_cache_usage_perc": "kv_cache_usage",
    "vllm:gpu_cache_usage_perc": "kv_cache_usage",  # before vLLM's V1 engine
}
SGLANG_GAUGES = {
    "sglang:spec_accept_length": "accept_length",
    "sglang:spec_accept_rate": "accept_rate",
    "sglang:gen_throughput": "generation_tps",
    "sglang:num_running_reqs": "running",
    "sglang:num_queue_reqs": "waiting",
    "sglang:token_usage": "kv_cache_usage",
}
COUNTER_FIELDS = ("drafts", "draft_tokens", "accepted_tokens", "generation_tokens")


class MissingParser(RuntimeError):
    """prometheus-client is not importable here (neither carried nor installed)."""


def _parser():
    try:
        from prometheus_client.parser import text_string_to_metric_families
    except ImportError as exc:  # pragma: no cover - the zipapp always carries it
        raise MissingParser("prometheus-client's parser is not available to the agent (%s)" % exc)
    return text_string_to_metric_families


MAX_POSITIONS = 32  # draft positions kept: beyond any K a drafter runs with
MAX_LABEL_SETS = 64  # per metric: more (a server inventing labels) are left out
WANTED = tuple(VLLM_COUNTERS) + (VLLM_PER_POSITION,) + tuple(VLLM_GAUGES) + tuple(SGLANG_GAUGES)


_WANTED_LINE = re.compile(r"^(?:# (?:TYPE|HELP) )?(%s)(?:_total|_created)?(?=[{ ]).*$" % "|".join(re.escape(name) for name in WANTED), re.M)


def _wanted_lines(text):
    """The lines of the metrics this module reads (and their # TYPE/HELP lines), at most
    2 x MAX_LABEL_SETS samples a metric (a `_total` and a `_created` each), so what the parser
    sees is bounded by what we read, not by what a server exports; whether any vLLM metric was
    seen; and how many sample lines were left out. The scan is many short calls into the regex
    engine (never one long one holding the interpreter's lock while a ping waits)."""
    kept, counts, dropped = [], {}, 0
    for match in _WANTED_LINE.finditer(text):
        line = match.group(0)
        if not line.startswith("#"):
            name = match.group(1)
            counts[name] = counts.get(name, 0) + 1
            if counts[name] > 2 * MAX_LABEL_SETS:
                dropped += 1
                continue
        kept.append(line)
    return "\n".join(kept) + "\n", text.startswith("vllm:") or "\nvllm:" in text, dropped


def _checked(metric, sample):
    """A counter's value, or BadSample when it cannot be a count (NaN, infinite, negative)."""
    from ..core.feed_source import BadSample

    value = sample.value
    if value != value or value in (float("inf"), float("-inf")) or value < 0:
        raise BadSample("counter %s%s is %r: not a count, sample refused" % (metric, _labels_text(sample.labels), value))
    return value


def _labels_text(labels):
    return "{%s}" % ",".join('%s="%s"' % item for item in sorted(labels.items())) if labels else ""


def parse(text, time_s):
    """One snapshot of a server's /metrics text taken at `time_s`:
    `{"time", "engine", "counters": {field: value}, "per_position": {pos: value},
    "gauges": {field: value}, "notes": [what was left out]}`; engine is "vllm", "sglang" or
    None (neither's metrics seen). Series with several label sets (one per engine or rank) are
    summed (counters, request counts) or averaged (rates and averages). A NaN, infinite or
    negative counter raises BadSample; positions from MAX_POSITIONS on, label sets beyond
    MAX_LABEL_SETS per metric and non-finite gauges are left out with a note."""
    wanted, vllm_seen, lines_dropped = _wanted_lines(text)
    counters, per_position, gauges, gauge_counts = {}, {}, {}, {}
    engine = "vllm" if vllm_seen else None
    dropped = {"positions": 0, "label_sets": lines_dropped, "gauges": 0}
    for family in _parser()(wanted):
        name = family.name
        if name.endswith("_total"):  # older parsers keep the suffix on the family name
            name = name[: -len("_total")]
        label_sets = 0
        if name in VLLM_COUNTERS or name == VLLM_PER_POSITION:
            engine = "vllm"
            for sample in family.samples:
                if sample.name != name + "_total":  # skip `_created` (a timestamp, not a count)
                    continue
                label_sets += 1
                if label_sets > MAX_LABEL_SETS:
                    dropped["label_sets"] += 1
                    continue
                value = _checked(sample.name, sample)
                if name == VLLM_PER_POSITION:
                    position = sample.labels.get("position", "0")
                    if not position.isdigit() or int(position) >= MAX_POSITIONS:
                        dropped["positions"] += 1
                        continue
                    per_position[int(position)] = per_position.get(int(position), 0.0) + value
                else:
                    field = VLLM_COUNTERS[name]
                    counters[field] = counters.get(field, 0.0) + value
        elif name in VLLM_GAUGES or name in SGLANG_GAUGES:
            field = VLLM_GAUGES.get(name) or SGLANG_GAUGES[name]
            if name in SGLANG_GAUGES:
                engine = engine or "sglang"
            for sample in family.samples:
                if sample.name != family.name:
                    continue
                label_sets += 1
                if label_sets > MAX_LABEL_SETS:
                    dropped["label_sets"] += 1
                    continue
                if sample.value - sample.value != 0.0:  # NaN or infinite: no figure, not a zero
                    dropped["gauges"] += 1
                    continue
                gauges[field] = gauges.get(field, 0.0) + sample.value
                gauge_counts[field] = gauge_counts.get(field, 0) + 1
    for field in ("accept_length", "accept_rate", "kv_cache_usage"):
        if gauge_counts.get(field, 0) > 1:
            gauges[field] /= gauge_counts[field]
    notes = []
    if dropped["positions"]:
        notes.append("%d per-position series at or past position %d (or unnumbered) left out" % (dropped["positions"], MAX_POSITIONS))
    if dropped["label_sets"]:
        notes.append("%d label sets beyond %d per metric left out" % (dropped["label_sets"], MAX_LABEL_SETS))
    if dropped["gauges"]:
        notes.append("%d NaN or infinite gauges left out" % dropped["gauges"])
    return {"time": time_s, "engine": engine, "counters": counters, "per_position": per_position, "gauges": gauges, "notes": notes,
            "positions_dropped": dropped["positions"]}


def per_k(per_position):
    """Accept length at every K' up to the K a server runs with, from its per-position rates:
    the share of drafts that reach position i is a_i / D, so a chain cut after K' drafts
    yields 1 + sum of a_i / D for i < K' on the same traffic. `[{k, accept_length}, ...]`;
    nothing is said of K' beyond the positions measured."""
    result, total = [], 1.0
    for index, rate in enumerate(per_position or ()):
        total += rate
        result.append({"k": index + 1, "accept_length": total})
    return result


def _delta(old, new):
    """How much a counter grew; a counter that went down was reset (the server restarted), and
    then everything it holds counts as new, as Prometheus's rate() takes it."""
    if old is None:
        return None
    return new - old if new >= old else new


def window(old, new):
    """The figures of the window between two snapshots of one server (old may be None: only
    gauges then). Keys are those of `spec HOST JOB --json`, plus running, waiting,
    kv_cache_usage, `reset` (a counter went down inside the window) and `identity` (identity.py:
    whether accept length is 1 + the sum of the per-position shares; None when not checkable)."""
    result = {
        "accept_length": None, "per_position": [], "per_position_conditional": [], "draft_acceptance_rate": None, "num_drafts": None,
        "accepted_tps": None, "drafted_tps": None, "generation_tps": None, "window_s": None,
        "running": new["gauges"].get("running"), "waiting": new["gauges"].get("waiting"),
        "kv_cache_usage": new["gauges"].get("kv_cache_usage"), "reset": False, "identity": None,
    }
    if new["engine"] == "sglang" or ("accept_length" in new["gauges"] and not new["counters"]):
        # Its gauges are already averages over the engine's own interval.
        result["accept_length"] = new["gauges"].get("accept_length")
        result["draft_acceptance_rate"] = new["gauges"].get("accept_rate")
        result["generation_tps"] = new["gauges"].get("generation_tps")
        return result
    if old is None:
        return result
    span_s = new["time"] - old["time"]
    result["window_s"] = span_s
    deltas = {}
    for field in COUNTER_FIELDS:
        if field in new["counters"]:
            before = old["counters"].get(field, 0.0)
            deltas[field] = _delta(before, new["counters"][field])
            result["reset"] = result["reset"] or new["counters"][field] < before
    drafts = deltas.get("drafts")
    result["num_drafts"] = int(drafts) if drafts is not None else None
    if deltas.get("draft_tokens") is not None:
        result["num_draft_tokens"] = int(deltas["draft_tokens"])  # K x drafts unless K changed (positions.both_ways)
    if drafts:
        result["accept_length"] = 1.0 + deltas.get("accepted_tokens", 0.0) / drafts
        positions = sorted(new["per_position"])
        result["per_position"] = [
            _delta(old["per_position"].get(p, 0.0), new["per_position"][p]) / drafts for p in positions
        ]
        result["per_k"] = per_k(result["per_position"])
        result["per_position_conditional"] = conditional_rates(result["per_position"])
        if not new.get("positions_dropped"):  # positions left out would make any sum short
            result["identity"] = identity.check(result["accept_length"], result["per_position"])
    if deltas.get("draft_tokens"):
        result["draft_acceptance_rate"] = deltas.get("accepted_tokens", 0.0) / deltas["draft_tokens"]
    if span_s > 0:
        for field, key in (("accepted_tokens", "accepted_tps"), ("draft_tokens", "drafted_tps"), ("generation_tokens", "generation_tps")):
            if deltas.get(field) is not None:
                result[key] = deltas[field] / span_s
    return result


# ---------------------------------------------------------------- log lines

_VLLM_LINE = re.compile(
    r"SpecDecoding metrics: Mean acceptance length: (?P<accept_length>[\d.]+), "
    r"Accepted throughput: (?P<accepted_tps>[\d.]+) tokens/s, Drafted throughput: (?P<drafted_tps>[\d.]+) tokens/s, "
    r"Accepted: (?P<accepted>\d+) tokens, Drafted: (?P<drafted>\d+) tokens, "
    r"Per-position acceptance rate: (?P<per_position>[\d., ]+?), Avg Draft acceptance rate: (?P<rate>[\d.]+)%"
)


def parse_log_line(line):
    """The speculation figures of one engine log line, or None when it has none:
    vLLM's `SpecDecoding metrics: ...` or SGLang's `Decode batch, ... accept len: ...`.
    Keys as `window`, plus `accepted_tokens`/`drafted_tokens` (vLLM) and `engine`."""
    match = _VLLM_LINE.search(line)
    if match:
        per_position = [float(v) for v in match.group("per_position").split(",") if v.strip()]
        return {
            "engine": "vllm",
            "accept_length": float(match.group("accept_length")),
            "accepted_tps": float(match.group("accepted_tps")),
            "drafted_tps": float(match.group("drafted_tps")),
            "accepted_tokens": int(match.group("accepted")),
            "drafted_tokens": int(match.group("drafted")),
            "per_position": per_position, "per_k": per_k(per_position),
            "per_position_conditional": conditional_rates(per_position),
            "draft_acceptance_rate": float(match.group("rate")) / 100.0,
            "identity": identity.check(float(match.group("accept_length")), per_position, identity.log_tolerance(len(per_position))),
        }
    decode = sglang.parse_decode_line(line)  # linear in the line, and only lines of bounded length
    if decode is not None and decode.get("accept_length") is not None:
        result = {"engine": "sglang", "per_position": [], "per_k": [], "per_position_conditional": []}
        for name, key in (("accept_length", "accept_length"), ("accept_rate", "draft_acceptance_rate"), ("generation_tps", "generation_tps"),
                          ("running", "running"), ("waiting", "waiting"), ("kv_cache_usage", "kv_cache_usage")):
            if name in decode:
                result[key] = decode[name]
        return result
    return None


def last_log_figures(text):
    """The figures of the last speculation line in a piece of log text, or None."""
    for line in reversed(text.splitlines()):
        figures = parse_log_line(line)
        if figures is not None:
            return figures
    return None
