"""The checkpoints a training run writes, inspected as soon as each is complete.

speculators writes `SAVE/{epoch}/` with model.safetensors and config.json (plus optimizer and
scheduler state), links `checkpoint_best` (and `epoch{N}_end`) to one of them. A directory is
complete once config.json is there and model.safetensors has the same size and mtime at two
looks a few seconds apart (a file being written grows; its header alone may already parse).
Each complete one is inspected (remote/checkpoints/report.py), compared with the drafter the run
started from and checked against the target's config.json, and given a verdict.

The entries live in the job's directory as an append-only journal (checkpoints.jsonl): one line
per entry that changed (inspected, best moved, a measurement moved on), the last line of a name
wins. An announcement writes one entry's line, never the whole list, so a run with 10,000
checkpoints costs a kilobyte or so per announcement; the journal is compacted when it is opened
holding more than twice the lines it needs. A restarted daemon inspects nothing twice.

SpecForge writes `SAVE/{run_id}-step{N}/` holding training_state.pt (and one per rank), links
`{run_id}-latest` and `{run_id}-best` (best by eval/simulated_acc_len, said in
`{run_id}.best_meta.json`). No safetensors: such a checkpoint is listed (its step from its name,
best and latest from the links) with the verdict "needs export": `specforge export --to hf|sglang`
makes the directory that can be inspected or served (training.export starts it as a job:
export.py; its output, in the save directory, is listed here once the job has ended).

speculators saves `SAVE/interrupted/` when a run is stopped gracefully (a signal). It resumes
only from numbered epochs, so the entry says how: rename it to an epoch number and start the same
command again (speculators resumes by default; --no-resume-from-checkpoint turns that off).

Nothing is followed out of the save directory: a checkpoint directory that is a link, or that
holds a link to a place outside the save directory, is never read (one that points outside is
reported in the run's notices). Inspection takes at most INSPECT_BUDGET_S per look; the rest
waits for the next look.
"""

import json
import os
import time

from ..checkpoints import report as checkpoint_report
from ..core.regular_files import open_regular

FILE_NAME = "checkpoints.jsonl"
STABLE_S = 2.0  # a weights file unchanged this long, with config.json beside it, is complete
INSPECT_BUDGET_S = 0.25
MAX_LINKS_SHOWN = 10  # links out of the save directory named in the run's notices
WEIGHT_NAMES = ("model.safetensors", "model.safetensors.index.json")
LINKS = ("checkpoint_best",)
BEST_SUFFIX, LATEST_SUFFIX = "-best", "-latest"  # SpecForge's links: {run_id}-best, {run_id}-latest
SPECFORGE_STATE = "training_state.pt"
SPECFORGE_STATES = (SPECFORGE_STATE, "training_state_rank0.pt")
BEST_META_SUFFIX = ".best_meta.json"
MAX_BEST_META_BYTES = 1 << 20
INTERRUPTED = "interrupted"
NEEDS_EXPORT = "needs export"
SPECFORGE_FORMAT = "specforge training state"
EXPORT_HINT = "needs `specforge export --to hf|sglang` before it can be inspected or served"
RESUME_HINT = ("left by a graceful stop; to resume from it: mv %s N (N: its epoch), then run the same command again "
               "(speculators resumes from the highest numbered epoch unless --no-resume-from-checkpoint)")
MAX_TARGET_CONFIG_BYTES = 16 * 1024 * 1024  # a target's config.json is a few kilobytes


class Journal:
    """checkpoints.jsonl: `load()` the entries (first-seen order), `append(entry)` one line."""

    def __init__(self, job_dir):
        self.path = os.path.join(job_dir, FILE_NAME)

    def load(self, compact=False):
        by_name, lines = {}, 0
        try:
            with open(self.path, "rb") as f:
                for raw in f:
                    lines += 1
                    try:
                        entry = json.loads(raw)
                    except ValueError:
                        continue  # a line cut by a kill mid-write: the entry's previous line stands
                    if isinstance(entry, dict) and isinstance(entry.get("name"), str):
                        by_name[entry["name"]] = entry  # a name keeps its first place: the order they completed in
        except FileNotFoundError:
            return []
        entries = list(by_name.values())
        if compact and lines > 2 * len(entries) + 16:
            self._rewrite(entries)
        return entries

    def append(self, entry):
        """One entry's line at the end (O_APPEND: a line is never interleaved or rewritten)."""
        line = (json.dumps(entry, separators=(",", ":")) + "\n").encode()
        fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        try:
            os.write(fd, line)
        finally:
            os.close(fd)

    def _rewrite(self, entries):
        temporary = self.path + ".tmp"
        with open(temporary, "w") as f:
            for entry in entries:
                f.write(json.dumps(entry, separators=(",", ":")) + "\n")
        os.replace(temporary, self.path)


def inside(save_real, path):
    """Whether `path` resolves to a place inside the save directory (given as its realpath)."""
    real = os.path.realpath(path)
    return real == save_real or real.startswith(save_real.rstrip(os.sep) + os.sep)


def links_out(save_real, path):
    """[name -> where] of the links in a checkpoint directory that lead out of the save directory."""
    found = []
    try:
        names = os.listdir(path)
    except OSError:
        return found
    for name in names:
        item = os.path.join(path, name)
        if os.path.islink(item) and not inside(save_real, item):
            found.append("%s -> %s" % (name, os.path.realpath(item)))
    return found


def candidates(save_dir, known=(), links=None):
    """[(name, path)] of directories under save_dir that hold a checkpoint (or will), by name,
    leaving out the names in `known`; links are left out (checkpoint_best, epoch0_end name a
    directory listed already), and those that lead out of the save directory are added to
    `links` (a list) as `name -> where`."""
    try:
        names = os.listdir(save_dir)
    except OSError:
        return []
    found = []
    save_real = os.path.realpath(save_dir)
    for name in names:
        if name in known:
            continue
        path = os.path.join(save_dir, name)
        if os.path.islink(path):
            if links is not None and not inside(save_real, path):
                links.append("%s -> %s" % (name, os.path.realpath(path)))
            continue
        if not os.path.isdir(path):
            continue
        if (any(os.path.exists(os.path.join(path, w)) for w in WEIGHT_NAMES) or os.path.exists(os.path.join(path, "config.json"))
                or specforge_state(path)):
            found.append((name, path))
    return sorted(found, key=lambda item: (not item[0].isdigit(), int(item[0]) if item[0].isdigit() else 0, item[0]))


def specforge_state(path):
    """Whether a directory holds SpecForge's training state (and no servable weights)."""
    return os.path.isfile(os.path.join(path, SPECFORGE_STATE)) and not any(
        os.path.exists(os.path.join(path, w)) for w in WEIGHT_NAMES)


def _linked(save_dir, names, suffix):
    """The directory name the first link of `names` (or the first `*suffix` link) points at, or None."""
    try:
        listed = sorted(os.listdir(save_dir)) if suffix else []
    except OSError:
        listed = []
    for link in list(names) + [n for n in listed if n.endswith(suffix)]:
        path = os.path.join(save_dir, link)
        if os.path.islink(path):
            return os.path.basename(os.path.normpath(os.path.realpath(path)))
    return None


def best_name(save_dir):
    """The directory name `checkpoint_best` (SpecForge: `{run_id}-best`) points at, or None."""
    return _linked(save_dir, LINKS, BEST_SUFFIX)


def latest_name(save_dir):
    """The directory name SpecForge's `{run_id}-latest` points at, or None."""
    return _linked(save_dir, (), LATEST_SUFFIX)


def best_meta(save_dir, run_id):
    """SpecForge's `{run_id}.best_meta.json`: {step, metric, score}, or None."""
    try:
        with open_regular(os.path.join(save_dir, run_id + BEST_META_SUFFIX)) as f:
            raw = f.read(MAX_BEST_META_BYTES + 1)
        meta = json.loads(raw) if len(raw) <= MAX_BEST_META_BYTES else None
    except (OSError, ValueError, RecursionError):
        return None
    if not isinstance(meta, dict):
        return None
    return {key: meta.get(key) for key in ("step", "metric", "score")}


def weights_mark(path):
    """(size, mtime_ns) of the weights (SpecForge: its training state), or None while absent."""
    for name in WEIGHT_NAMES + SPECFORGE_STATES:
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
        with open_regular(path) as f:
            if os.fstat(f.fileno()).st_size > MAX_TARGET_CONFIG_BYTES:
                return None
            return json.loads(f.read())
    except (OSError, ValueError, RecursionError):
        return None


class Watcher:
    """One run's checkpoints: `look()` returns the entries that became complete at this look
    (the caller adds what the run knew and saves each); `save(entry)` journals one entry's change. `links` collects the links out of the save
    directory met so far (each once), for the run's notices."""

    def __init__(self, job_dir, save_dir, start_from=None, target=None, compact=True):
        self.journal = Journal(job_dir)
        self.save_dir = save_dir
        self.start_from = start_from
        self.target = target
        self.entries = self.journal.load(compact=compact)
        self._known = set(entry["name"] for entry in self.entries)
        self._seen = {}  # path -> (mark, first seen at)
        self._ready = {}  # name -> path of complete checkpoints not inspected yet (a dict keeps their order)
        self._start_report = None
        self.links = []

    def _start(self):
        if self._start_report is None and self.start_from:
            try:
                self._start_report = checkpoint_report.inspect(self.start_from)
            except Exception as exc:  # a missing start drafter is a reason, not a crash
                self._start_report = {"error": str(exc)}
        return self._start_report

    def save(self, entry):
        self.journal.append(entry)

    def look(self, now=None, final=False, later=()):
        """`final`: the run's process has ended, so nothing writes any more: what is there now is
        complete (a run that saves its last checkpoint and exits is never looked at twice).
        `later`: names of directories still being written by someone else (an export job)."""
        now = time.time() if now is None else now
        new = []
        best, latest = best_name(self.save_dir), latest_name(self.save_dir)
        for entry in self.entries:
            if bool(entry.get("best")) != (entry["name"] == best) or bool(entry.get("latest")) != (entry["name"] == latest):
                entry["best"], entry["latest"] = entry["name"] == best, entry["name"] == latest
                if entry.get("format") == SPECFORGE_FORMAT:
                    self._best_meta(entry)  # written with the link, after the checkpoint was listed
                self.save(entry)
        links = []
        save_real = os.path.realpath(self.save_dir)
        for name, path in candidates(self.save_dir, self._known.union(self._ready, later), links):
            mark = weights_mark(path)
            if mark is None or not (os.path.exists(os.path.join(path, "config.json")) or specforge_state(path)):
                continue
            previous = self._seen.get(path)
            if not final and (previous is None or previous[0] != mark):
                self._seen[path] = (mark, now)
            elif final or now - previous[1] >= STABLE_S:
                self._ready[name] = path  # complete: inspected as this look's time allows, oldest first
        inspecting = time.monotonic()
        for name, path in list(self._ready.items()):
            if new and time.monotonic() - inspecting > INSPECT_BUDGET_S:
                break  # this look's time is spent: the next look goes on
            del self._ready[name]
            self._seen.pop(path, None)
            outside = links_out(save_real, path)
            entry = self.inspect(name, path, now) if not outside else self.refuse(name, path, now, outside)
            entry["best"], entry["latest"] = name == best, name == latest
            self._known.add(name)
            self.entries.append(entry)
            new.append(entry)
        for link in links:
            if link not in self.links and len(self.links) < MAX_LINKS_SHOWN:
                self.links.append(link)
        return new

    def waiting(self):
        """Whether complete checkpoints wait for a look with time left to inspect them."""
        return bool(self._ready)

    def refuse(self, name, path, now, outside):
        entry = self.inspect(name, path, now, read=False)
        entry.update(verdict="unreadable", reasons=["not read: it links out of the save directory (%s)" % ", ".join(outside[:3])])
        return entry

    def inspect(self, name, path, now, read=True):
        entry = {"name": name, "path": path, "epoch": int(name) if name.isdigit() else None, "complete_at": now,
                 "bytes": (weights_mark(path) or (0, 0))[0], "format": None, "problems": [], "verdict": None, "reasons": [],
                 "against_start": None, "against_target": None, "step": None, "validation": None,
                 "predicted_accept_length": None, "measured_accept_length": None, "measure_job": None}
        if name == INTERRUPTED:
            entry["hint"] = RESUME_HINT % name
        if not read:
            return entry
        if specforge_state(path):
            return self._specforge(entry)
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


    def _specforge(self, entry):
        """A SpecForge checkpoint: its step from its name, the best score its run recorded for it."""
        entry.update(format=SPECFORGE_FORMAT, verdict=NEEDS_EXPORT, reasons=[EXPORT_HINT], hint=EXPORT_HINT)
        self._best_meta(entry)
        return entry

    def _best_meta(self, entry):
        """`best_meta` of a SpecForge checkpoint: its run's best_meta.json when it names its step."""
        run_id, _, step = entry["name"].rpartition("-step")
        meta = best_meta(self.save_dir, run_id) if run_id and step.isdigit() else None
        entry["best_meta"] = meta if meta is not None and meta.get("step") == int(step) else None


def judge(entry, break_even):
    """The verdict word shown beside a checkpoint: its own (broken, incompatible), else where its
    accept length (measured, else predicted) stands against break-even."""
    if entry.get("verdict") not in ("ok", None):
        return entry["verdict"]
    length = entry.get("measured_accept_length") or entry.get("predicted_accept_length")
    if break_even is None or length is None:
        return entry.get("verdict") or "ok"
    return "above break-even" if length >= break_even else "below break-even"
