"""A completion reply as the benchmark reads it, checked at the edge before anything sums it: its
`usage` counts and vLLM's per-request speculation metrics (`metrics.speculative_decoding`), each
field of its type, finite, non-negative and in its range, a histogram of a bounded number of
buckets. A reply that fails is refused with one line naming the field and what it held, and the
benchmark counts it and goes on (bench.py); one bad reply is not the end of a run of many.

Only the fields the benchmark uses are kept; others are passed over (a newer vLLM may add some)."""

import math

# A reply to one completion request: its text and, at the detailed level, a count per verify step.
# A few kB usually; a reply larger than this is refused unread.
MAX_REPLY_BYTES = 4 * 1024 * 1024
MAX_K = 64  # drafted tokens per step: the histogram has at most MAX_K + 1 buckets
MAX_STEPS = 1 << 20  # entries of a per-step list
MAX_COUNT = 1 << 53  # any count: past it a float sum is no longer exact

COUNT_FIELDS = ("num_spec_tokens", "num_spec_steps", "num_draft_tokens", "num_accepted_draft_tokens")


class BadReply(ValueError):
    """A reply the benchmark cannot use: the message says which field and why, in one line."""


def _shown(value):
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def _kind(value):
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, dict):
        return "an object"
    if isinstance(value, list):
        return "a list"
    if value is None:
        return "null"
    return "a number"


def count(value, where):
    """A non-negative whole number (an integral float such as 3.0 is taken as 3), else BadReply."""
    if isinstance(value, float) and math.isfinite(value) and value == int(value):
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int):
        if isinstance(value, float):
            raise BadReply("%s is %s, not a count" % (where, _shown(value)))
        raise BadReply("%s is %s, not a count" % (where, _kind(value)))
    if value < 0:
        raise BadReply("%s is negative (%d)" % (where, value))
    if value > MAX_COUNT:
        raise BadReply("%s is %s, beyond any count a server makes" % (where, _shown(value)))
    return value


def number(value, where, low, high):
    """A finite number within [low, high], else BadReply."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise BadReply("%s is %s, not a number" % (where, _kind(value)))
    if not math.isfinite(value):
        raise BadReply("%s is %s, not a finite number" % (where, value))
    if not low <= value <= high:
        raise BadReply("%s is %s, outside %g..%g" % (where, _shown(value), low, high))
    return float(value)


def counts(value, where, most):
    """A list of at most `most` counts, else BadReply."""
    if not isinstance(value, list):
        raise BadReply("%s is %s, not a list of counts" % (where, _kind(value)))
    if len(value) > most:
        raise BadReply("%s has %d entries, more than the %d it can have" % (where, len(value), most))
    return [count(item, "%s[%d]" % (where, index)) for index, item in enumerate(value)]


def speculation(decoding):
    """`metrics.speculative_decoding` of one reply, checked: a dict of the fields the benchmark
    uses (each present one of its type and range), or None when the reply carries none."""
    if decoding is None:
        return None
    if not isinstance(decoding, dict):
        raise BadReply("metrics.speculative_decoding is %s, not an object" % _kind(decoding))
    where = "speculative_decoding.%s"
    checked = {}
    for name in COUNT_FIELDS:
        if decoding.get(name) is not None:
            checked[name] = count(decoding[name], where % name)
    k = checked.get("num_spec_tokens")
    if k is not None and k > MAX_K:
        raise BadReply("%s is %d, more than the %d tokens a step drafts here" % (where % "num_spec_tokens", k, MAX_K))
    buckets = MAX_K + 1 if k is None else k + 1
    if decoding.get("acceptance_histogram") is not None:
        checked["acceptance_histogram"] = counts(decoding["acceptance_histogram"], where % "acceptance_histogram", buckets)
    if decoding.get("mean_acceptance_length") is not None:
        checked["mean_acceptance_length"] = number(decoding["mean_acceptance_length"], where % "mean_acceptance_length", 0.0,
                                                   float(buckets))
    if decoding.get("draft_acceptance_rate") is not None:
        checked["draft_acceptance_rate"] = number(decoding["draft_acceptance_rate"], where % "draft_acceptance_rate", 0.0, 1.0)
    accepted, drafted = decoding.get("per_step_accepted"), decoding.get("per_step_drafted")
    if accepted is not None or drafted is not None:
        accepted = counts(accepted, where % "per_step_accepted", MAX_STEPS)
        drafted = counts(drafted, where % "per_step_drafted", MAX_STEPS)
        if len(accepted) != len(drafted):
            raise BadReply("per_step_accepted has %d entries and per_step_drafted %d: they go in pairs" % (len(accepted), len(drafted)))
        for index, (got, tried) in enumerate(zip(accepted, drafted)):
            if tried > MAX_K or got > tried:
                raise BadReply("step %d accepted %d of %d drafted tokens" % (index, got, tried))
        checked.update(per_step_accepted=accepted, per_step_drafted=drafted)
    return checked


def usage(reply):
    """(completion tokens, prompt tokens or None) of a completion reply (parsed JSON), else BadReply."""
    if not isinstance(reply, dict):
        raise BadReply("the reply is %s, not an object" % _kind(reply))
    found = reply.get("usage")
    if not isinstance(found, dict):
        raise BadReply("the reply has no usage" if found is None else "usage is %s, not an object" % _kind(found))
    tokens = count(found.get("completion_tokens"), "usage.completion_tokens")
    prompt_tokens = found.get("prompt_tokens")
    return tokens, None if prompt_tokens is None else count(prompt_tokens, "usage.prompt_tokens")


def speculation_of(reply):
    """The checked `metrics.speculative_decoding` of a completion reply, or None; else BadReply."""
    metrics = reply.get("metrics")
    if metrics is not None and not isinstance(metrics, dict):
        raise BadReply("metrics is %s, not an object" % _kind(metrics))
    return speculation((metrics or {}).get("speculative_decoding"))
