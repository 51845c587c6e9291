"""Two checkpoints of one machine compared where they lie: read both (every tensor only when
the comparison matches them all: not for a drafter against a target model, whose 100,000-tensor
listing it never needs), compare them, tensors of one shape and dtype by their values too
(tensor_values.py), and shape the result for the wire and the CLI, with the verdict as every
verdict is shaped (verdicts.py). Standard library only."""

from . import compatibility, listing, tensor_values
from .compatibility import MATCHING, SAME, SAME_SHAPE, VALUES_DIFFER
from .problems import count_text
from .verdicts import of_comparison

# Rows a reply carries at most (a row is ~150 bytes on the wire): two drafters have a few dozen;
# two targets compared tensor by tensor could have 100,000, which no reader goes through.
MAX_ROWS = 20000


class NotACheckpoint(Exception):
    """A path that holds no safetensors checkpoint: one line naming it and why."""


def _read(path):
    """(listing, report with the first page of tensors) of the checkpoint at `path`."""
    found = listing.open_listing(path)
    report = found.summary()
    if not report["files"]:
        errors = [p["message"] for p in report["problems"] if p.get("level") == "error"]
        raise NotACheckpoint(not_a_checkpoint(path, errors))
    return found, report


def not_a_checkpoint(path, errors):
    """The one line for a path with no safetensors checkpoint, from its report's errors."""
    why = errors[0] if errors else "no .safetensors file in it"
    return ("not a checkpoint: %s" % why) if path in why else ("%s is not a checkpoint: %s" % (path, why))


def _whole(found, report):
    """The report with every tensor in it, as the comparison matches them: name, dtype, shape."""
    if report.get("complete", True):
        return report
    return dict(report, tensors=found.bare_tensors(), complete=True)


def needs_every_tensor(report_a, report_b):
    """Whether compare matches tensor by tensor (anything but a drafter against a target)."""
    targets = (compatibility.is_target_model(report_a), compatibility.is_target_model(report_b))
    drafters = (report_a.get("eagle3") is not None, report_b.get("eagle3") is not None)
    return not ((targets[1] and drafters[0]) or (targets[0] and drafters[1]))


def compare_reports(report_a, report_b, max_rows=MAX_ROWS, judge=None):
    """The comparison of two reports (all tensors in them when they are matched one by one) as the
    wire gives it: compatibility.compare's fields with `verdict` as {status, message}, `rows` cut at
    `max_rows` (`rows_total` counts them all), `values` (judge_values'; for two reports without a
    `judge`, contents not compared), and `a`, `b`: each side's path and format."""
    result = compatibility.compare(report_a, report_b)
    shaped = dict(result, verdict=of_comparison(result))
    rows = result.get("rows") or []
    if rows:
        shaped["values"] = judge_values(rows, judge) if judge is not None else not_compared(rows)
    shaped["rows_total"] = len(rows)
    if len(rows) > max_rows:
        # The differing rows matter most: they go first when not all fit.
        differing = [row for row in rows if row.get("status") not in MATCHING]
        shaped["rows"] = (differing + [row for row in rows if row.get("status") in MATCHING])[:max_rows]
    for side, report in (("a", report_a), ("b", report_b)):
        shaped[side] = {"path": report.get("path"), "format": report.get("format"),
                        "tensor_count": report.get("tensor_count", len(report.get("tensors") or []))}
    return shaped


def compare_paths(path_a, path_b, max_rows=MAX_ROWS, trained_target=None):
    """Compare the checkpoints at two paths of this machine. Raises NotACheckpoint, or
    report.CheckpointIOError when a path cannot be read. Beside the shape checks, `tokenizer`
    says whether two targets share a tokenizer: the two compared, or, for a drafter against a
    target, the target it was trained for (`trained_target`, else the verifier its speculators
    config names when that directory is here) against the new one. Two drafters get
    `draft_ids_remapped`: how many of B's draft ids name another target token than A's (their
    d2t maps compared id by id; null when either has none), and its line `draft_ids_remapped_text`."""
    (found_a, report_a), (found_b, report_b) = _read(path_a), _read(path_b)
    if needs_every_tensor(report_a, report_b):
        report_a = _whole(found_a, report_a)
        # One checkpoint compared with itself: one copy of its tensors serves both sides.
        report_b = dict(report_b, tensors=report_a["tensors"], complete=True) if found_b is found_a \
            else _whole(found_b, report_b)
    judge = tensor_values.Judge(found_a, found_b)
    try:
        shaped = compare_reports(report_a, report_b, max_rows, judge)
    finally:
        judge.close()
    shaped["tokenizer"] = _tokenizers(path_a, report_a, path_b, report_b, trained_target)
    if report_a.get("eagle3") is not None and report_b.get("eagle3") is not None:
        from .remapped import remapped

        found = remapped(path_a, path_b)
        shaped.update(draft_ids_remapped=found and found["draft_ids_remapped"], draft_ids_remapped_text=found and found["message"])
    return shaped


def not_compared(rows):
    """`values` of two reports compared without their bytes (from two machines)."""
    alike = sum(1 for row in rows if row.get("status") == SAME_SHAPE)
    return {"compared": False, "same": 0, "differ": 0, "not_compared": alike,
            "message": "contents not compared (the checkpoints are on different machines): %s tensor%s of the "
                       "same shape and dtype may hold other values" % (count_text(alike), "" if alike == 1 else "s")}


def judge_values(rows, judge):
    """Rows of one shape and dtype made SAME or VALUES_DIFFER where `judge` (tensor_values.Judge)
    could tell; `values`: {compared, same, differ, not_compared, message}."""
    same = differ = unjudged = 0
    for row in rows:
        if row.get("status") != SAME_SHAPE:
            continue
        verdict = judge.same(row["a"]["name"], row["b"]["name"])
        if verdict is None:
            unjudged += 1
            continue
        row["status"] = SAME if verdict else VALUES_DIFFER
        same, differ = same + bool(verdict), differ + (not verdict)
    message = "values compared on the first, middle and last %d KiB of each tensor: %s same, %s differ" % (
        tensor_values.SLICE_BYTES // 1024, count_text(same), count_text(differ))
    if unjudged:
        why = judge.stopped or "their bytes could not be read"
        message += "; %s of the same shape and dtype not compared (%s)" % (count_text(unjudged), why)
    return {"compared": True, "same": same, "differ": differ, "not_compared": unjudged, "message": message}


def _tokenizers(path_a, report_a, path_b, report_b, trained_target):
    """The tokenizer comparison that fits the two sides, or None when none does."""
    from . import coverage, vocabularies

    targets = (compatibility.is_target_model(report_a), compatibility.is_target_model(report_b))
    if all(targets):
        return vocabularies.compare(path_a, path_b)
    drafter, new_target = (path_a, path_b) if targets[1] and report_a.get("eagle3") is not None else (
        (path_b, path_a) if targets[0] and report_b.get("eagle3") is not None else (None, None))
    if drafter is None:
        return None
    trained_target = trained_target or _verifier_path(report_a if drafter == path_a else report_b)
    if not trained_target:
        return {"same": None, "message": "tokenizers not compared: say which target the drafter was trained for (compare --trained-for TARGET)"}
    try:
        draft_ids, _info = coverage.draft_vocabulary(drafter)
    except (ValueError, OSError):
        draft_ids = None
    result = vocabularies.compare(trained_target, new_target, sorted(draft_ids) if draft_ids is not None else None)
    result["drafter"] = drafter
    return result


def _verifier_path(report):
    """The directory of the verifier a speculators config names, when it is on this machine."""
    import os

    verifier = ((report.get("config") or {}).get("speculators_config") or {}).get("verifier") or {}
    name = verifier.get("name_or_path") if isinstance(verifier, dict) else None
    return name if isinstance(name, str) and os.path.isdir(os.path.expanduser(name)) else None
