"""The checkpoints a training run writes, inspected as soon as each is complete.

speculators writes `SAVE/{epoch}/` with model.safetensors and config.json (plus optimizer and
scheduler state), links `checkpoint_best` (and `epoch{N}_end`) to one of them. A directory is
complete once config.json is there and model.safetensors has the same size and mtime at two
looks a few seconds apart (a file being written grows; its header alone may already parse).
Each complete one is inspected (remote/checkpoints/report.py), compared with the drafter the run
started from and checked against the target's config.json, and given a verdict. The list lives
in the job's directory (checkpoints.json), so a restarted daemon inspects nothing twice.
"""

import json
import os
import time

from ..checkpoints import report as checkpoint_report
from ..core.records import read_json, write_json

FILE_NAME = "checkpoints.json"
STABLE_S = 2.0  # a weights file unchanged this long, with config.json beside it, is complete
WEIGHT_NAMES = ("model.safetensors", "model.safetensors.index.json")
LINKS = ("checkpoint_best",)


def candidates(save_dir):
    """[(name, path)] of directories under save_dir that hold a checkpoint (or will), by name;
    links (checkpoint_best, epoch0_end) are left out: they name a directory listed already."""
    try:
        names = os.listdir(save_dir)
    except OSError:
        return []
    found = []
    for name in names:
        path = os.path.join(save_dir, name)
        if os.path.islink(path) or not os.path.isdir(path):
            continue
        if any(os.path.exists(os.path.join(path, w)) for w in WEIGHT_NAMES) or os.path.exists(os.path.join(path, "config.json")):
            found.append((name, path))
    return sorted(found, key=lambda item: (not item[0].isdigit(), int(item[0]) if item[0].isdigit() else 0, item[0]))


def best_name(save_dir):
    """The directory name `checkpoint_best` points at, or None."""
    for link in LINKS:
        path = os.path.join(save_dir, link)
        if os.path.islink(path):
            return os.path.basename(os.path.normpath(os.path.realpath(path)))
    return None


def weights_mark(path):
    """(size, mtime_ns) of the weights, or None while absent."""
    for name in WEIGHT_NAMES:
        try:
            st = os.stat(os.path.join(path, name))
            return st.st_size, st.st_mtime_ns
        except OSError:
            continue
    return None


def _load_target_config(target):
    if not target:
        return None
    path = os.path.join(target, "config.json") if os.path.isdir(target) else target
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


class Watcher:
    """One run's checkpoints: `look()` returns the entries that became complete at this look."""

    def __init__(self, job_dir, save_dir, start_from=None, target=None):
        self.path = os.path.join(job_dir, FILE_NAME)
        self.save_dir = save_dir
        self.start_from = start_from
        self.target = target
        saved = read_json(self.path)
        self.entries = saved.get("entries", []) if isinstance(saved, dict) else []
        self._seen = {}  # path -> (mark, first seen at)
        self._start_report = None

    def _start(self):
        if self._start_report is None and self.start_from:
            try:
                self._start_report = checkpoint_report.inspect(self.start_from)
            except Exception as exc:  # a missing start drafter is a reason, not a crash
                self._start_report = {"error": str(exc)}
        return self._start_report

    def look(self, now=None):
        now = time.time() if now is None else now
        done = {entry["path"]: entry for entry in self.entries}
        new = []
        best = best_name(self.save_dir)
        for entry in self.entries:
            entry["best"] = entry["name"] == best
        for name, path in candidates(self.save_dir):
            if path in done:
                continue
            mark = weights_mark(path)
            if mark is None or not os.path.exists(os.path.join(path, "config.json")):
                continue
            previous = self._seen.get(path)
            if previous is None or previous[0] != mark:
                self._seen[path] = (mark, now)
                continue
            if now - previous[1] < STABLE_S:
                continue
            entry = self.inspect(name, path, now)
            entry["best"] = name == best
            self.entries.append(entry)
            new.append(entry)
        if new or any(e.get("best") for e in self.entries):
            self.save()
        return new

    def inspect(self, name, path, now):
        entry = {"name": name, "path": path, "epoch": int(name) if name.isdigit() else None, "complete_at": now,
                 "bytes": (weights_mark(path) or (0, 0))[0], "format": None, "problems": [], "verdict": None, "reasons": [],
                 "against_start": None, "against_target": None, "step": None, "validation": None,
                 "predicted_accept_length": None, "measured_accept_length": None, "measure_job": None}
        try:
            report = checkpoint_report.inspect(path)
        except Exception as exc:
            entry.update(verdict="unreadable", reasons=[str(exc)])
            return entry
        entry["format"] = report.get("format")
        errors = [p["message"] for p in report.get("problems", []) if p.get("level") == "error"]
        entry["problems"] = errors[:5]
        reasons = list(errors[:3])
        verdict = "broken" if errors else "ok"
        if report.get("eagle3") is None:
            verdict, reasons = "broken", reasons + ["not an EAGLE-3 drafter (format %s)" % report.get("format")]
        start = self._start()
        if start is not None and "error" not in start:
            compared = checkpoint_report.compare(start, report)
            entry["against_start"] = {"verdict": compared["verdict"], "reasons": compared["reasons"][:3]}
            if compared["verdict"] != "compatible":
                reasons.append("differs from the drafter the run started from: %s" % compared["reasons"][0])
        elif start is not None:
            entry["against_start"] = {"verdict": "unreadable", "reasons": [start["error"]]}
        target_config = _load_target_config(self.target)
        if target_config is not None and report.get("eagle3") is not None:
            checked = checkpoint_report.check_against_target(report, target_config)
            entry["against_target"] = {"verdict": checked["verdict"], "reasons": checked["reasons"][:3]}
            if checked["verdict"] != "compatible":
                verdict = "incompatible"
                reasons = ["cannot serve the target: %s" % checked["reasons"][0]] + reasons
        entry["verdict"], entry["reasons"] = verdict, reasons
        return entry

    def save(self):
        write_json(self.path, {"save_dir": self.save_dir, "entries": self.entries})


def judge(entry, break_even):
    """The verdict word shown beside a checkpoint: its own (broken, incompatible), else where its
    accept length (measured, else predicted) stands against break-even."""
    if entry.get("verdict") not in ("ok", None):
        return entry["verdict"]
    length = entry.get("measured_accept_length") or entry.get("predicted_accept_length")
    if break_even is None or length is None:
        return entry.get("verdict") or "ok"
    return "above break-even" if length >= break_even else "below break-even"
