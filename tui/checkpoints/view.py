"""Plain-text rendering of checkpoint reports for the CLI: problems first, then the tensors.

Works on the JSON that remote.checkpoints.report produces (so on reports from any host) and needs
nothing beyond the standard library.
"""

import json

from remote.checkpoints.compatibility import MATCHING, SAME, SAME_SHAPE, VALUES_DIFFER
from remote.checkpoints.report import FORMAT_DESCRIPTIONS

from ..display import format_bytes, format_shape, safe_text


def format_size(n):
    """Exact bytes plus decimal and binary units, because notes disagree only in units:
    2382319104 -> '2,382,319,104 bytes (2.38 GB, 2.22 GiB)'."""
    return "? bytes" if n is None else format_bytes(n, exact=True)


def _table(headers, rows, right=()):
    """Columns padded to their widest cell; the last column is not padded. A cell is a host's
    text (a tensor's name): one line, its controls as escapes, so a name cannot split a row."""
    rows = [[safe_text(cell) for cell in row] for row in rows]
    widths = [len(h) for h in headers]
    for row in rows:
        for i, cell in enumerate(row):
            widths[i] = max(widths[i], len(cell))
    lines = []
    for row in [headers] + rows:
        cells = []
        for i, cell in enumerate(row):
            if i == len(row) - 1 and i not in right:
                cells.append(cell)
            elif i in right:
                cells.append(cell.rjust(widths[i]))
            else:
                cells.append(cell.ljust(widths[i]))
        lines.append("  " + "  ".join(cells).rstrip())
    return lines


def _problem_lines(problems):
    errors = [p for p in problems or [] if p.get("level") == "error"]
    warnings = [p for p in problems or [] if p.get("level") != "error"]
    if not errors and not warnings:
        return ["No problems found."]
    head = []
    if errors:
        head.append("%d error%s" % (len(errors), "" if len(errors) == 1 else "s"))
    if warnings:
        head.append("%d warning%s" % (len(warnings), "" if len(warnings) == 1 else "s"))
    lines = ["Problems: " + ", ".join(head)]
    lines += ["  ERROR    " + safe_text(p.get("message", "")) for p in errors]
    lines += ["  warning  " + safe_text(p.get("message", "")) for p in warnings]
    return lines


def _eagle3_lines(report):
    e = report.get("eagle3")
    if not e:
        return []

    def show(key):
        value = e.get(key)
        return "?" if value is None else str(value)

    target_hidden = e.get("target_hidden_size")
    fc = ""
    if target_hidden:
        fc = " (fc.weight fuses 3 x %d = %d auxiliary features of the target)" % (target_hidden, 3 * target_hidden)
    aux = e.get("aux_layer_ids")
    aux_text = str(aux) if aux else "not in config: vLLM uses (2, L//2, L-3) of the target's L layers"
    heads = "%s heads x %s, %s kv heads" % (show("num_attention_heads"), show("head_dim"), show("num_key_value_heads"))
    rows = [
        ("hidden size", show("hidden_size")),
        ("target hidden size", show("target_hidden_size") + fc),
        ("draft vocabulary", show("draft_vocab_size") + " (lm_head rows; d2t maps draft id -> target id = id + d2t[id])"),
        ("target vocabulary", show("target_vocab_size") + " (length of t2d)"),
        ("intermediate size", show("intermediate_size")),
        ("attention", heads),
        ("aux layer ids", aux_text),
    ]
    if e.get("embed_tokens"):
        rows.append(("embed_tokens", e["embed_tokens"]))
    if e.get("norm_before_residual") is not None:
        rows.append(("norm_before_residual", str(e["norm_before_residual"]).lower() + " (as the loader will run it)"))
    width = max(len(k) for k, _ in rows)
    return ["EAGLE-3:"] + ["  %s  %s" % (k.ljust(width), v) for k, v in rows]


def inspect_head_lines(report, files_shown=None):
    """Path, format, problems and files (the first `files_shown` of them): what comes before the tensors."""
    fmt = report.get("format", "unknown")
    lines = [str(report.get("path", "")), "Format: %s: %s" % (fmt, FORMAT_DESCRIPTIONS.get(fmt, ""))]
    lines += _problem_lines(report.get("problems"))
    files = report.get("files") or []
    if files:
        lines.append("Files: %d" % len(files))
        for f in files[:files_shown]:
            digest = ("  sha256 " + f["sha256"]) if f.get("sha256") else ""
            lines.append("  %s  %s%s" % (f.get("path"), format_size(f.get("bytes")), digest))
        if files_shown is not None and len(files) > files_shown:
            lines.append("  and %d more (--json lists them all)" % (len(files) - files_shown))
    return lines


TENSOR_HEADERS = ["name", "role", "shape", "dtype", "bytes"]


def tensor_table_lines(tensors, header=True):
    """The tensor table; without its header line for the pages after the first."""
    rows = [[t.get("name", ""), t.get("role") or "", format_shape(t.get("shape")), t.get("dtype") or "?",
             "{:,}".format(t["bytes"]) if t.get("bytes") is not None else "?"] for t in tensors]
    if not rows:
        return []
    lines = _table(TENSOR_HEADERS, rows, right=(4,))
    return lines if header else lines[1:]


def inspect_tail_lines(report, tensor_bytes):
    files = report.get("files") or []
    lines = ["Total: %s in %d file%s; tensor data %s"
             % (format_size(report.get("total_bytes")), len(files), "" if len(files) == 1 else "s",
                format_size(tensor_bytes))]
    return lines + _eagle3_lines(report)


def format_inspect(report):
    """The inspect report as text: problems first, then files, tensors, totals, EAGLE-3 summary."""
    tensors = report.get("tensors") or []
    lines = inspect_head_lines(report)
    lines.append("Tensors: %d" % len(tensors))
    lines += tensor_table_lines(tensors)
    lines += inspect_tail_lines(report, sum(t.get("bytes") or 0 for t in tensors))
    return "\n".join(lines) + "\n"


def format_inspect_summary(report):
    """A checkpoint too large to list whole: its tensors grouped by name pattern instead."""
    lines = inspect_head_lines(report, files_shown=3)
    groups = report.get("groups") or []
    lines.append("Tensors: {:,} in {:,} name patterns (--all lists every tensor)".format(
        report.get("tensor_count", 0), report.get("group_count", len(groups))))
    rows = []
    for g in groups:
        shapes = ", ".join(format_shape(s) for s in g.get("shapes") or []) + (", ..." if g.get("more_shapes") else "")
        rows.append([g.get("pattern", ""), "{:,}".format(g.get("count", 0)), "{:,}".format(g.get("bytes") or 0),
                     "/".join(g.get("dtypes") or []) or "?", shapes, g.get("role") or ""])
    if rows:
        lines += _table(["pattern", "tensors", "bytes", "dtype", "shape", "role"], rows, right=(1, 2))
    if len(groups) < report.get("group_count", len(groups)):
        lines.append("  and {:,} more patterns".format(report["group_count"] - len(groups)))
    lines += inspect_tail_lines(report, report.get("tensor_bytes") or 0)
    return "\n".join(lines) + "\n"


def _side(side):
    if not side:
        return "-"
    return "%s %s" % (format_shape(side.get("shape")), side.get("dtype") or "?")


def compare_status(result):
    """A comparison's verdict word: from the verdict object the wire gives, or a bare word
    (remote.checkpoints.compatibility's own results)."""
    verdict = result.get("verdict")
    return verdict.get("status") if isinstance(verdict, dict) else verdict


def format_compare(result):
    """The compare result as text: verdict on top, reasons, tensors side by side, config diff.

    A drafter compared with a target model gets the checks against the target instead."""
    compatible = compare_status(result) == "compatible"
    if result.get("target"):
        lines = ["Verdict: %s" % ("COMPATIBLE: the drafter can serve the target" if compatible
                                  else "INCOMPATIBLE: the drafter cannot serve the target")]
        lines += ["  - " + safe_text(reason) for reason in result.get("reasons") or []]
        checks = result.get("checks") or []
        lines.append("Checked against the target model (%s): %d" % (result["target"], len(checks)))
        lines += _table(["check", "result", "why"], [[c.get("check", ""), "ok" if c.get("ok") else "FAILS",
                                                      c.get("message", "")] for c in checks])
        return "\n".join(lines + _tokenizer_lines(result)) + "\n"
    lines = ["Verdict: %s" % ("COMPATIBLE: drop-in initialisation" if compatible
                              else "INCOMPATIBLE: not a drop-in initialisation")]
    for reason in result.get("reasons") or []:
        lines.append("  - " + safe_text(reason))
    rows = []
    for row in result.get("rows") or []:
        a, b = row.get("a"), row.get("b")
        name_a = a.get("name", "") if a else "-"
        name_b = b.get("name", "") if b else "-"
        rows.append([row.get("status", ""), name_a, _side(a), name_b, _side(b)])
    lines += tensor_summary_lines(result, [r[0] for r in rows])
    total = result.get("rows_total", len(rows))
    if rows:
        lines += _table(["status", "A", "A shape dtype", "B", "B shape dtype"], rows)
    if total > len(rows):
        lines.append("  and %d more rows (the differing ones are listed first)" % (total - len(rows)))
    diff = result.get("config_diff") or []
    lines.append("Config fields that differ: %d" % len(diff))
    if diff:
        lines += _table(["field", "A", "B"], [[str(d.get("field")), _value(d.get("a")), _value(d.get("b"))] for d in diff])
    if isinstance(result.get("draft_ids_remapped_text"), str):
        lines.append("Vocabulary map: %s" % safe_text(result["draft_ids_remapped_text"]))
    return "\n".join(lines + _tokenizer_lines(result)) + "\n"


def tensor_summary_lines(result, statuses):
    """`Tensors: 15, 0 differ, 12 differ in values, 3 same`, and what was (not) compared of the
    values: a row of the same shape and dtype is never called the same unless its values were.
    `statuses` are the shown rows' (the differing ones first when not all are shown)."""
    total = result.get("rows_total", len(statuses))
    values = result.get("values") if isinstance(result.get("values"), dict) else {}
    # Cut rows hold the differing ones first: the count is whole once a matching row is shown.
    whole = total <= len(statuses) or any(s in MATCHING for s in statuses)
    counts = {VALUES_DIFFER: values.get("differ"), SAME: values.get("same"), SAME_SHAPE: values.get("not_compared")}
    for status in counts:
        if not isinstance(counts[status], int) or isinstance(counts[status], bool):
            counts[status] = sum(1 for s in statuses if s == status)
    differing = sum(1 for s in statuses if s not in MATCHING and s != VALUES_DIFFER)
    parts = ["%d%s differ" % (differing, "" if whole else " or more")]
    for status, words in ((VALUES_DIFFER, "differ in values"), (SAME, "same"), (SAME_SHAPE, "same shape and dtype")):
        if counts[status]:
            parts.append("%d %s" % (counts[status], words))
    lines = ["Tensors: %d, %s" % (total, ", ".join(parts))]
    if values.get("message"):
        lines.append("  " + str(values["message"]))
    elif counts[SAME_SHAPE]:
        lines.append("  contents not compared")
    return lines


def _tokenizer_lines(result):
    """Whether the two targets share a tokenizer (compare's `tokenizer`), with a few strings
    whose id moved; nothing when it was not a question (two drafters)."""
    tokenizer = result.get("tokenizer")
    if not tokenizer:
        return []
    same = tokenizer.get("same")
    lines = ["Tokenizer: %s" % ("SHARED" if same else "not compared" if same is None else "DIFFERENT"), "  " + tokenizer["message"]]
    for example in tokenizer.get("examples") or []:
        lines.append("  %r: id %d before, %d now" % (example["text"], example["old_id"], example["new_id"]))
    return lines


def _value(value):
    if value is None:
        return "-"
    text = value if isinstance(value, str) else json.dumps(value, sort_keys=True)
    return text if len(text) <= 60 else text[:57] + "..."
