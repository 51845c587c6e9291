"""`specdeck bench --prompts FILE` by kind of prompt: the prompt file read (a line is a prompt, or a
JSON object `{"prompt", "category"}`), and the benchmark's figures per category and per prompt
length as lines, with the requests that accept least and those flagged (acceptance near 0, or
every draft accepted) named by their first words."""

import json

from ..display import safe_text

# What `bench --json` adds from the host's per-request figures.
JSON_KEYS = ("categories", "lengths", "worst", "flagged", "ks_used", "missing", "k_schedule", "bad_replies")
GROUP_KEYS = ("accept_length", "histogram", "tokens_per_s", "speedup", "requests", "per_position", "per_position_conditional")
MAX_PROMPT_FILE_BYTES = 16 * 1024 * 1024


def read_prompts(path):
    """(prompts, categories or None) of a prompt file; raises ValueError with the line at fault."""
    with open(path, "rb") as f:
        data = f.read(MAX_PROMPT_FILE_BYTES + 1)
    if len(data) > MAX_PROMPT_FILE_BYTES:
        raise ValueError("%s is larger than %d MiB" % (path, MAX_PROMPT_FILE_BYTES // (1024 * 1024)))
    prompts, kinds = [], []
    for number, line in enumerate(data.decode("utf-8", "replace").splitlines(), 1):
        if not line.strip():
            continue
        item = None
        if line.lstrip().startswith("{"):
            try:
                item = json.loads(line)
            except ValueError as exc:
                if '"prompt"' in line:  # meant as an object: a broken one is refused, not sent as a prompt's text
                    raise ValueError("%s line %d: not a JSON object {\"prompt\", \"category\"} (%s)" % (path, number, exc))
                item = None  # a plain prompt that happens to start with a brace
        if isinstance(item, dict) and "prompt" in item:
            if not isinstance(item["prompt"], str) or not isinstance(item.get("category", ""), str):
                raise ValueError("%s line %d: prompt and category must be strings" % (path, number))
            prompts.append(item["prompt"])
            kinds.append(item.get("category") or "default")
        else:
            prompts.append(line)
            kinds.append("default")
    if not prompts:
        raise ValueError("%s has no prompts" % path)
    return prompts, (kinds if set(kinds) != {"default"} else None)


def json_part(result):
    part = dict((key, result.get(key)) for key in JSON_KEYS if key in result)
    for key in ("categories", "lengths"):
        if key in part:
            name = "category" if key == "categories" else "length"
            part[key] = [dict(((name, group.get(name)),), **dict((k, group.get(k)) for k in GROUP_KEYS)) for group in part[key]]
    return part


def _number(value, pattern):
    return "-" if value is None else pattern % value


def _group_line(name, group):
    return "  %-22s %6s  %8s  %7s  %4d   %s" % (
        safe_text(name)[:22], _number(group.get("accept_length"), "%.2f"), _number(group.get("tokens_per_s"), "%.1f"),
        _number(group.get("speedup"), "%.2fx"), group.get("requests") or 0, " ".join(str(c) for c in group.get("histogram") or ()))


def refused_lines(result):
    """The replies the host refused (too large, not JSON, a figure out of its type or range), named."""
    refused = result.get("bad_replies") or {}
    if not refused.get("count"):
        return []
    out = ["refused       %d %s the benchmark could not use (left out of its figures):" % (
        refused["count"], "reply" if refused["count"] == 1 else "replies")]
    for row in refused.get("shown") or ():
        out.append("  %s request %d [%s] %s: %s" % (safe_text(row["phase"]), row["request"], safe_text(row["category"]),
                                                   safe_text(row["first_words"]), safe_text(row["why"])))
    if refused["count"] > len(refused.get("shown") or ()):
        out.append("  and %d more" % (refused["count"] - len(refused.get("shown") or ())))
    return out


def lines(result):
    """The by-category and by-length table, then the worst and the flagged requests, then the
    replies refused."""
    if "categories" not in result:
        return refused_lines(result)
    out = ["", "  %-22s %6s  %8s  %7s  %4s   %s" % ("category", "accept", "tok/s", "speedup", "reqs", "histogram (steps accepting 0..K)")]
    out += [_group_line(group.get("category"), group) for group in result["categories"]]
    out += ["  %-22s" % "prompt length"] + [_group_line(group.get("length"), group) for group in result.get("lengths") or ()]
    if result.get("k_schedule") or len(result.get("ks_used") or ()) > 1:
        out.append("K used        %s" % (" ".join(str(k) for k in result.get("ks_used") or ()) or "-"))
    for row in result.get("worst") or ():
        out.append("accepts least %.2f  [%s] %s" % (row["accept_length"], safe_text(row["category"]), safe_text(row["first_words"])))
    for row in result.get("flagged") or ():
        out.append("flagged       %s %.2f  [%s] %s" % (safe_text(row["why"]), row["accept_length"], safe_text(row["category"]),
                                                      safe_text(row["first_words"])))
    if result.get("missing"):
        out.append("note          %d replies carried no per-request metrics (a vLLM without --per-request-spec-decode-metrics?)"
                   % result["missing"])
    return out + refused_lines(result)
