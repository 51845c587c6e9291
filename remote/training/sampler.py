"""The training sampler: a daemon service that follows every training and data-generation job's
log, writes each record to the run's step store (stepstore.py, where `training.curves` reads
them by step), publishes records to the `training` topic, samples the run's figures into the
history store, watches the run's save directory for checkpoints (checkpoints.py) and writes
the job's progress (step of total, ETA, predicted accept length; samples done of total for
data generation) to its progress.json, which job events carry.

A record is stamped with when it was read: the records of one read are spread evenly over the
stretch since the previous read (they were written within it), so no time is ever in the
future and a burst keeps its order. The history store gets the newest step and validation of
each read (a sample of the run over time; a burst of a million records must not flood its
buffer, which other samplers share); the step store gets every record.

Where it got to in each log (the byte offset of the first line of a record not yet complete)
is kept in the job's directory (training-state.json), written after the step store committed
the records before it: a daemon killed between the two reads those records again, which the
step store already holds (keyed by their offset in the log) and keeps as they were; records a
previous daemon published are not published again.

One run's trouble stays that run's: a failure while following it is shown as its error (in
its progress and in training.curves) and tried again with its own backoff, and the other runs
go on.
"""

import logging
import math
import os
import threading
import time

from ..core.records import read_json, write_json
from ..core.services import BACKOFF_S, Service
from ..core.streams import Topic
from . import checkpoints, curves, logparse, measure, stepstore
from .datagen import Samples
from .logreader import LogReader

log = logging.getLogger("specdeck.training")

KINDS = ("training", "datagen")
STATE_FILE = "training-state.json"
JOBS_EVERY_S = 2.0
PUBLISH_MAX = 256  # records of one read published on the topic (the newest): a burst goes to the step store


class Run:
    """One followed job: where its log was read to, its parser, its step store, its checkpoints."""

    def __init__(self, job, job_dir):
        self.id = job["id"]
        self.kind = job["kind"]
        self.job = job
        self.meta = job.get("meta") or {}
        self.job_dir = job_dir
        state = read_json(os.path.join(job_dir, STATE_FILE)) or {}
        offset = int(state.get("offset", 0))
        self.reader = LogReader(offset, int(state.get("cut_lines", 0)), state.get("first_cut_at"))
        self.reader.skipping = bool(state.get("skipping"))
        self.saved_offset = self.pending_offset = offset
        self.published_to = int(state.get("published_to", 0))  # records starting before it were published
        self.last_time = float(state.get("last_time", 0.0))
        self.latest = state.get("latest")
        self.validation = state.get("validation")
        self.samples = Samples(state.get("samples") or {})
        self.epoch_starts = state.get("epoch_starts") or {}  # epoch -> its first step
        self.notices = dict(state.get("notices") or {})  # what -> its text (the cut lines' count grows)
        self.assembler = logparse.Assembler()
        self.recent = []  # (time, step) of the last records, for the rate
        self.writer = stepstore.StepWriter(job_dir) if self.kind == "training" else None
        save_dir = self.meta.get("save_dir")
        self.watcher = checkpoints.Watcher(job_dir, save_dir, self.meta.get("start_from"), self.meta.get("target")) if save_dir else None
        self.ended = False
        self.error = None
        self.failures = 0
        self.next_try_at = 0.0

    def save(self):
        """How far the log was read (a record still open is read again from its start)."""
        self.saved_offset = self.pending_offset
        write_json(os.path.join(self.job_dir, STATE_FILE), {
            "offset": self.pending_offset, "skipping": self.reader.skipping and self.pending_offset == self.reader.offset,
            "cut_lines": self.reader.cut_lines, "first_cut_at": self.reader.first_cut_at, "published_to": self.published_to,
            "last_time": self.last_time, "latest": self.latest, "validation": self.validation, "samples": self.samples.state(),
            "epoch_starts": self.epoch_starts, "notices": self.notices})

    def close(self):
        if self.writer is not None:
            self.writer.close()
            self.writer = None


class TrainingSampler(Service):
    name = "training"
    interval_s = 0.5

    def __init__(self, daemon):
        self.daemon = daemon
        self.topic = daemon.topics.setdefault("training", Topic("training"))
        self.runs = {}
        self.errors = {}  # job id -> its last error, while it fails
        self._jobs_at = 0.0
        self._finished = set()  # ended jobs whose log was read to the end: not looked at again
        self.records = 0
        self._requests = []  # (job id, checkpoint name, options) asked for by training.measure
        self._lock = threading.Lock()

    def request_measure(self, job_id, name, options):
        """Queue a measurement of one checkpoint (from training.measure; runs on the next step)."""
        with self._lock:
            self._requests.append((job_id, name, options))
            self._finished.discard(job_id)

    def detail(self):
        return {"runs": len(self.runs), "records": self.records, "failing": len(self.errors)}

    def stop(self):
        for run in self.runs.values():
            run.close()
        self.runs = {}

    def step(self):
        now = time.time()
        with self._lock:
            requests, self._requests = self._requests, []
        if now - self._jobs_at >= JOBS_EVERY_S or not self.runs or requests:
            self._jobs_at = now
            self._refresh_runs(set(request[0] for request in requests))
        for job_id, name, options in requests:
            run = self.runs.get(job_id)
            entry = next((e for e in run.watcher.entries if e["name"] == name), None) if run and run.watcher else None
            if entry is not None:
                measure.queue(entry, options, by_hand=True)
                run.watcher.save(entry)
                self._announce(run, entry)
        for run in list(self.runs.values()):
            if time.time() < run.next_try_at:
                continue
            try:
                self.step_run(run)
            except Exception as exc:  # this run's trouble: shown as its error, the other runs go on
                self._failed(run, exc)
            else:
                if run.error is not None:
                    run.error, run.failures = None, 0
                    self.errors.pop(run.id, None)
                    self._progress(run)

    def _refresh_runs(self, asked):
        jobs = {}
        for kind in KINDS:
            for job in self.daemon.jobs.list(kind=kind):
                jobs[job["id"]] = job
        for job_id in set(self.runs) - set(jobs):
            self.runs.pop(job_id).close()
            self.errors.pop(job_id, None)
        for job_id, job in jobs.items():
            run = self.runs.get(job_id)
            live = job["process_state"] in ("running", "starting")
            if run is None and job_id not in self._finished and (live or job_id in asked or not self._is_finished(job)):
                try:
                    run = self.runs[job_id] = Run(job, self.daemon.jobs.job_dir(job_id))
                except Exception as exc:
                    self.errors[job_id] = "%s: %s" % (type(exc).__name__, exc)
                    log.warning("training run %s cannot be followed: %s", job_id, self.errors[job_id])
                    continue
            if run is not None:
                run.ended = not live
                run.job = job

    def _is_finished(self, job):
        """An ended job whose log was read to its end, no benchmark of its checkpoints pending."""
        job_dir = self.daemon.jobs.job_dir(job["id"])
        state = read_json(os.path.join(job_dir, STATE_FILE)) or {}
        if state.get("offset", -1) < job.get("log_bytes", 0):
            return False
        if job["kind"] == "training" and measure.pending(checkpoints.Journal(job_dir).load()):
            return False
        self._finished.add(job["id"])
        return True

    def _failed(self, run, exc):
        run.failures += 1
        run.error = "%s: %s" % (type(exc).__name__, exc)
        self.errors[run.id] = run.error
        wait_s = BACKOFF_S[min(run.failures, len(BACKOFF_S)) - 1]
        run.next_try_at = time.time() + wait_s
        log.warning("training run %s failed (%d in a row), next try in %.0f s: %s", run.id, run.failures, wait_s, run.error,
                    exc_info=run.failures == 1)
        try:
            self._progress(run)
        except OSError:
            pass  # the job's directory may be what fails

    def step_run(self, run):
        """One look at one run: its log, its checkpoints, its benchmark; ends it once all is read."""
        self._follow(run)
        if run.watcher is not None and measure.pending(run.watcher.entries):
            before = {e["name"]: dict(e.get("measure") or {}) for e in run.watcher.entries}
            if measure.advance(self.daemon, run.watcher.entries):
                for entry in run.watcher.entries:
                    if (entry.get("measure") or {}) != before.get(entry["name"]):
                        run.watcher.save(entry)
                        self._announce(run, entry)
            return  # kept while a benchmark is queued or runs, even after the run ended
        if run.ended and run.reader.offset >= _size(self.daemon.jobs.log_path(run.id)) and not run.reader.skipping:
            self._progress(run)
            run.close()
            del self.runs[run.id]
            self._finished.add(run.id)

    def _follow(self, run):
        path = self.daemon.jobs.log_path(run.id)
        size = _size(path)
        before = (run.reader.offset, run.reader.skipping)
        lines = run.reader.read(path, size, run.ended)
        samples_seen = False
        for line in lines:
            # A cut line is read as an empty one: it ends a record that was open, and is nothing itself.
            run.assembler.feed(line.text if line.text is not None else "", line.start)
            if run.kind == "datagen" and line.text is not None:
                samples_seen = run.samples.read_line(line.text) or samples_seen
        caught_up = run.reader.offset >= size and not run.reader.skipping
        if run.ended and caught_up:
            run.assembler.flush()
        opened = run.assembler.open_at()
        run.pending_offset = opened if opened is not None else run.reader.offset
        self._publish(run, run.assembler.take())
        if samples_seen:
            self._samples(run)
        self._notices(run)
        if run.watcher is not None:
            for entry in run.watcher.look():
                self._checkpoint(run, entry)
        if (run.reader.offset, run.reader.skipping) != before or run.pending_offset != run.saved_offset:
            run.save()

    def _publish(self, run, records):
        if not records:
            return
        # Written since the last read, read now: spread over that stretch, never past now.
        now = time.time()
        since = run.last_time or (run.job or {}).get("started_at") or now - 0.5
        since = min(since, now)
        stamped = [(record.get("offset"), record, since + (now - since) * (index + 1) / len(records))
                   for index, record in enumerate(records)]
        run.last_time = now
        if run.writer is not None:
            run.writer.add([item for item in stamped if item[0] is not None])
        newest = {}
        fresh = []
        for offset, record, when in stamped:
            public = curves.public_record(record, when)
            public["job"] = run.id
            if record["kind"] == "step":
                if public["epoch"] is not None and public["step"] is not None:
                    run.epoch_starts.setdefault(str(public["epoch"]), public["step"])
                run.latest = public
                run.recent.append((when, record.get("step")))
            else:
                if public["step"] is None and run.latest:
                    public["step"] = run.latest.get("step")
                run.validation = public
            newest[record["kind"]] = (record, when)
            if offset is None or offset >= run.published_to:
                fresh.append(public)
        run.recent = run.recent[-50:]
        store = getattr(self.daemon, "history", None)
        if store is not None:
            for record, when in newest.values():
                store.add_many(curves.history_points(run.id, record, when))
        for public in fresh[-PUBLISH_MAX:]:
            self.topic.publish(public)
        self.records += len(records)
        offsets = [item[0] for item in stamped if item[0] is not None]
        if offsets:
            run.published_to = max(run.published_to, max(offsets) + 1)
        self._progress(run)

    def _samples(self, run):
        store = getattr(self.daemon, "history", None)
        samples = run.samples
        now = time.time()
        if store is not None and samples.done is not None and now - samples.recorded_at >= 1.0:
            samples.recorded_at = now
            labels = {"job": run.id}
            store.add("training", "samples_done", labels, float(samples.done), now)
            if samples.total is not None:
                store.add("training", "samples_total", labels, float(samples.total), now)
            if samples.rate:
                store.add("training", "samples_per_s", labels, samples.rate, now)
        self._progress(run)

    def _notices(self, run):
        """The run's notices (lines cut, links out of the save directory), each said once on the topic."""
        found = {}
        if run.reader.notice():
            found["cut lines"] = run.reader.notice()
        for link in run.watcher.links if run.watcher else []:
            found["link " + link] = "checkpoint directory %s leads out of the save directory: not read" % link
        changed = False
        for key, text in found.items():
            if run.notices.get(key) == text:
                continue
            if key not in run.notices:
                self.topic.publish({"job": run.id, "kind": "notice", "text": text, "time": time.time()})
            run.notices[key] = text
            changed = True
        if changed:
            self._progress(run)

    def _progress(self, run):
        write_json(os.path.join(run.job_dir, "progress.json"), progress_of(run))

    def _checkpoint(self, run, entry):
        if run.validation and run.validation.get("epoch") == entry.get("epoch"):
            entry["validation"] = run.validation
            entry["predicted_accept_length"] = run.validation.get("predicted_accept_length")
        elif run.latest:
            entry["predicted_accept_length"] = run.latest.get("predicted_accept_length")
        entry["step"] = (run.latest or {}).get("step")
        if run.meta.get("measure") and measure.servable(entry):
            measure.queue(entry, run.meta["measure"])
        run.watcher.save(entry)
        self._announce(run, entry)

    def _announce(self, run, entry):
        """A checkpoint inspected, or its measurement moved on: the `training` topic says so."""
        self.topic.publish({"job": run.id, "kind": "checkpoint", "checkpoint": dict(entry, measure=measure.public(entry.get("measure"))),
                            "time": time.time()})


def _size(path):
    try:
        return os.path.getsize(path)
    except OSError:
        return 0


def rate_of(run):
    recent = [(t, s) for t, s in run.recent if s is not None]
    if len(recent) < 2 or recent[-1][0] <= recent[0][0] or recent[-1][1] <= recent[0][1]:
        return None
    return (recent[-1][1] - recent[0][1]) / (recent[-1][0] - recent[0][0])


def progress_of(run):
    """The job's progress.json: {state, step, steps_total, epoch, epochs_total, steps_per_s, eta_s,
    predicted_accept_length, loss} for training; {state, done, total, rate, eta_s} for data
    generation; both with `notices` (lines cut, links refused) and `error` (following it failed)."""
    common = {"notices": list(run.notices.values()), "error": run.error, "updated_at": time.time()}
    if run.kind == "datagen":
        samples = run.samples
        return dict(common, state="generating", done=samples.done, total=samples.total, rate=samples.rate, eta_s=samples.eta_s())
    latest = run.latest or {}
    rate = rate_of(run)
    steps_total = run.meta.get("steps_total")
    epochs_total = run.meta.get("epochs_total")
    eta = None
    if rate and latest.get("step") is not None:
        total = steps_total
        starts = run.epoch_starts
        if total is None and epochs_total and "0" in starts and "1" in starts:
            total = (starts["1"] - starts["0"]) * epochs_total  # steps per epoch, once one epoch ended
        if total:
            eta = max(0.0, (total - 1 - latest["step"]) / rate)
    return dict(common, state="training", step=latest.get("step"), steps_total=steps_total, epoch=latest.get("epoch"),
                epochs_total=epochs_total, steps_per_s=rate, eta_s=eta, loss=latest.get("loss"),
                predicted_accept_length=latest.get("predicted_accept_length"),
                validation_predicted_accept_length=(run.validation or {}).get("predicted_accept_length"))


def is_nan(value):
    return value == "nan" or (isinstance(value, float) and math.isnan(value))
