"""The host's training and data-generation runs as the console holds them: for each run its job,
its curves (`training.curves` and the live records of `training.follow` after them), its latest
progress and the alerts already told, and when the last of it came. Kept by the host model, so a
Training pane made again (the host shown again) shows the night at once; the pane is a view of it.
"""

import time
from dataclasses import dataclass, field
from typing import Any, Dict

from ..jobs.model import is_live
from ..training.model import end_alert

KINDS = ("training", "datagen")
MAX_LIVE_STEPS = 4000  # live steps kept past the loaded curves before they are loaded again, bucketed


@dataclass
class RunRecord:
    """One run: its job as the host describes it, its curves and progress, and the monotonic time
    its newest step, evaluation or checkpoint came (progress snapshots that say nothing new do not
    count: a live run whose age grows is one that has stopped reporting)."""

    id: str
    job: Dict[str, Any] = field(default_factory=dict)
    curves: Dict[str, Any] = field(default_factory=lambda: {"steps": [], "validation": []})
    progress: Dict[str, Any] = field(default_factory=dict)
    alerted: set = field(default_factory=set)
    loaded: bool = False  # training.curves answered once
    received_s: float = field(default_factory=time.monotonic)

    def age_s(self, now=None):
        return (time.monotonic() if now is None else now) - self.received_s

    def alerts(self):
        """The run's alerts: the host's, those seen live (a NaN loss), and how it ended."""
        found = list(self.curves.get("alerts") or []) + list(self.curves.get("live_alerts") or [])
        ended = end_alert(self.job) if self.job else None
        return list(dict.fromkeys(found + ([ended] if ended else [])))

    def break_even(self):
        """(line, source) the run is judged against: measured or set for the run, else (None, None)."""
        if self.curves.get("break_even") is not None:
            return self.curves["break_even"], "measured" if self.curves.get("break_even_source") == "measured" else "run"
        line = (self.job.get("meta") or {}).get("break_even")
        return (line, "run") if line is not None else (None, None)


class TrainingRuns:
    """Every run of the host the console heard of, oldest first."""

    def __init__(self):
        self.records = {}  # job id -> RunRecord

    def run(self, job_id):
        record = self.records.get(job_id)
        if record is None:
            record = self.records[job_id] = RunRecord(job_id)
        return record

    @property
    def ids(self):
        return sorted(self.records, key=lambda job_id: int(job_id[1:]) if job_id[1:].isdigit() else 0)

    def jobs_changed(self, book):
        """Take the book's runs; return the ids of those that ended now."""
        ended = []
        for job in book.of_kind("training") + book.of_kind("datagen"):
            record = self.run(job["id"])
            before, record.job = record.job, job
            if job.get("progress"):
                record.progress = job["progress"]
            if before and is_live(before) and not is_live(job):
                ended.append(job["id"])
        return ended

    def preferred(self):
        """The run to open on: the newest live training run, else the newest live one, else the newest."""
        ids = [job_id for job_id in self.ids if self.records[job_id].job]
        live = [job_id for job_id in ids if is_live(self.records[job_id].job)]
        training = [job_id for job_id in live if self.records[job_id].job["kind"] == "training"]
        for candidates in (training, live, ids):
            if candidates:
                return candidates[-1]
        return None

    def loaded(self, job_id, reply):
        """training.curves answered: the live records newer than its last are kept."""
        record = self.run(job_id)
        kept = record.curves
        for key in ("steps", "validation"):
            last = order(reply[key][-1]) if reply[key] else (0.0, -1)
            reply[key] += [entry for entry in kept.get(key) or () if order(entry) > last]
        reply["notices"] = list(dict.fromkeys((reply.get("notices") or []) + (kept.get("notices") or [])))
        if kept.get("live_alerts"):
            reply["live_alerts"] = kept["live_alerts"]
        reply["loaded_steps"] = len(reply["steps"])
        if not record.loaded or len(reply["steps"]) > len(kept.get("steps") or ()):
            record.received_s = time.monotonic()
        record.curves, record.loaded = reply, True

    def take_progress(self, snapshot):
        for job_id, progress in (snapshot or {}).items():
            self.run(job_id).progress = progress

    def add_record(self, record):
        """One live record of training.follow; returns what the view should do about it: `load`
        (ask for the curves again), `nan` (the loss became NaN: an alert), or None."""
        job_id = record.get("job")
        if job_id is None:
            return None
        run = self.run(job_id)
        # Kept even before the run's curves are loaded: the store writes once a second, so a
        # load may not hold the steps that came just before it; the load keeps what is newer.
        curves = run.curves
        if record["kind"] == "checkpoint":
            entry = record["checkpoint"]
            listed = curves.setdefault("checkpoints", [])
            for index, known in enumerate(listed):
                if known["path"] == entry["path"]:
                    listed[index] = dict(known, **{k: v for k, v in entry.items() if k != "verdict"})
                    break
            else:
                listed.append(entry)
            run.received_s = time.monotonic()
            return "load"  # the host judges it against break-even: ask for the list as judged
        if record["kind"] == "stale":  # reading the run fails or hangs on the host
            run.progress = dict(run.progress or {}, error=record.get("error"))
            return None
        if record["kind"] == "notice":
            notices = curves.setdefault("notices", [])
            if record.get("text") and record["text"] not in notices:
                notices.append(record["text"])
            return None
        kept = curves.setdefault("steps" if record["kind"] == "step" else "validation", [])
        if kept and order(kept[-1]) >= order(record):
            return None
        kept.append(record)
        run.received_s = time.monotonic()
        if record["kind"] == "step":
            curves["latest"] = record
            if record.get("loss") == "nan":
                live = curves.setdefault("live_alerts", [])
                if not any(text.startswith("the loss became NaN") for text in live):
                    live.append("the loss became NaN at step %s" % record.get("step"))
                return "nan"
            if len(kept) - curves.get("loaded_steps", 0) > MAX_LIVE_STEPS:
                return "load"  # many live steps: the store's buckets draw them as well
        return None

    def new_alerts(self, job_id):
        """The run's alerts not told yet, marked told."""
        record = self.run(job_id)
        fresh = [alert for alert in record.alerts() if alert not in record.alerted]
        record.alerted.update(fresh)
        return fresh


def order(entry):
    """Where a record stands in its run: records of one read can share a time, never a step."""
    step = entry.get("step")
    return entry["time"], step if step is not None else -1
