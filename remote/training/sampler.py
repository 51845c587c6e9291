"""The training sampler: a daemon service that follows every training and data-generation job's
log, turns its records into curves in the history store (remote/training/curves.py), publishes
each record to the `training` topic, watches the run's save directory for checkpoints
(checkpoints.py) and writes the job's progress (step of total, ETA, predicted accept length;
samples done of total for data generation) to its progress.json, which job events carry.

Where it got to in each log (the byte offset of the first line of a record not yet complete)
is kept in the job's directory (training-state.json), so a restarted daemon neither loses nor
repeats a point. The history store writes its buffer once a second, so the offset kept is the
one whose points the store has written (read FLUSHED_MARGIN_S before its last flush, or
QUIET_S ago with nothing left in its buffer), with the
times given to the records read after it (the journal): a daemon killed between the two reads
those records again and gives them the same times, which replace the points already written.
"""

import math
import os
import re
import threading
import time

from ..core.records import read_json, write_json
from ..core.services import Service
from ..core.streams import Topic
from . import checkpoints, curves, logparse, measure

KINDS = ("training", "datagen")
STATE_FILE = "training-state.json"
READ_BYTES = 4 << 20  # per job per step: a long backlog is caught up over several steps
JOBS_EVERY_S = 2.0
FLUSHED_MARGIN_S = 1.0  # points added this long before the store's last flush are on disk
QUIET_S = 5.0  # or this long ago, when the store's buffer is empty (it writes only when it has points)
MAX_JOURNAL = 20000  # a store that cannot write for long: keep the newest offset instead
# tqdm (`450/1000 [00:10<00:12, 44.5it/s]`) and rich (`11/11  [ 0:00:14 < 0:00:00 , 1 it/s ]`) bars.
_BAR = re.compile(r"(?P<done>\d+)/(?P<total>\d+)\s*\[\s*[\d:]+\s*<\s*[\d:?]+\s*,\s*(?P<rate>[\d.]+)\s*(?P<unit>it/s|s/it)")
_SAMPLES = re.compile(r"Processing (?P<total>\d+) samples")


class Run:
    """One followed job: where its log was read to, its parser, its checkpoint watcher."""

    def __init__(self, job, job_dir):
        self.id = job["id"]
        self.kind = job["kind"]
        self.meta = job.get("meta") or {}
        self.job_dir = job_dir
        state = read_json(os.path.join(job_dir, STATE_FILE)) or {}
        self.offset = self.saved_offset = int(state.get("offset", 0))
        self.last_time = self.saved_last_time = float(state.get("last_time", 0.0))
        self.replay = list(state.get("journal") or [])  # the times records after `offset` were given
        self.journal = []  # times given since the saved offset
        self.marks = []  # (offset, last_time, journal length, when) at the end of each read
        self.latest = state.get("latest")
        self.validation = state.get("validation")
        self.samples = state.get("samples") or {}
        self.epoch_starts = state.get("epoch_starts") or {}  # epoch -> its first step
        self.assembler = logparse.Assembler()
        self.pending_offset = self.offset
        self.recent = []  # (time, step) of the last records, for the rate
        save_dir = self.meta.get("save_dir")
        self.watcher = checkpoints.Watcher(job_dir, save_dir, self.meta.get("start_from"), self.meta.get("target")) if save_dir else None
        self.ended = False

    def save(self, store=None):
        """Keep the newest read whose points the store has written (None: no store, every read
        counts) and the journal of times after it."""
        now = time.time()
        self.marks.append((self.pending_offset, self.last_time, len(self.journal), now))
        flushed_at = (store.last_flush_at or 0.0) if store is not None else None
        quiet = store is not None and store.buffered() == 0
        durable = [m for m in self.marks if flushed_at is None or m[3] < flushed_at - FLUSHED_MARGIN_S
                   or (quiet and m[3] < now - QUIET_S)]
        if len(self.journal) > MAX_JOURNAL:
            durable = self.marks[-1:]
        if durable:
            offset, last_time, count, _ = durable[-1]
            self.journal = self.journal[count:]
            self.marks = [(o, t, n - count, at) for o, t, n, at in self.marks if at > durable[-1][3]]
            self.saved_offset, self.saved_last_time = offset, last_time
        self.marks = self.marks[-1000:]  # a store that never writes: bounded, durability aside
        write_json(os.path.join(self.job_dir, STATE_FILE), {
            "offset": self.saved_offset, "last_time": self.saved_last_time, "journal": self.journal,
            "latest": self.latest, "validation": self.validation, "samples": self.samples, "epoch_starts": self.epoch_starts})


class TrainingSampler(Service):
    name = "training"
    interval_s = 0.5

    def __init__(self, daemon):
        self.daemon = daemon
        self.topic = daemon.topics.setdefault("training", Topic("training"))
        self.runs = {}
        self._jobs_at = 0.0
        self.records = 0
        self._requests = []  # (job id, checkpoint name, options) asked for by training.measure
        self._lock = threading.Lock()

    def request_measure(self, job_id, name, options):
        """Queue a measurement of one checkpoint (from training.measure; runs on the next step)."""
        with self._lock:
            self._requests.append((job_id, name, options))

    def detail(self):
        return {"runs": len(self.runs), "records": self.records}

    def _jobs(self):
        jobs = []
        for kind in KINDS:
            jobs.extend(self.daemon.jobs.list(kind=kind))
        return jobs

    def step(self):
        now = time.time()
        with self._lock:
            asked_now = bool(self._requests)
        if now - self._jobs_at >= JOBS_EVERY_S or not self.runs or asked_now:
            self._jobs_at = now
            jobs = {job["id"]: job for job in self._jobs()}
            for job_id in set(self.runs) - set(jobs):
                del self.runs[job_id]
            for job_id, job in jobs.items():
                run = self.runs.get(job_id)
                with self._lock:
                    asked = any(request[0] == job_id for request in self._requests)
                if run is None and (job["process_state"] in ("running", "starting") or asked
                                    or not _finished(job, self.daemon.jobs.job_dir(job_id))):
                    run = self.runs[job_id] = Run(job, self.daemon.jobs.job_dir(job_id))
                if run is not None:
                    run.ended = job["process_state"] not in ("running", "starting")
                    run.job = job
        with self._lock:
            requests, self._requests = self._requests, []
        for job_id, name, options in requests:
            run = self.runs.get(job_id)
            entry = next((e for e in run.watcher.entries if e["name"] == name), None) if run and run.watcher else None
            if entry is not None:
                measure.queue(entry, options, by_hand=True)
                run.watcher.save()
                self._announce(run, entry)
        for run in list(self.runs.values()):
            self._follow(run)
            if run.watcher is not None and measure.pending(run.watcher.entries):
                before = {e["name"]: dict(e.get("measure") or {}) for e in run.watcher.entries}
                if measure.advance(self.daemon, run.watcher.entries):
                    run.watcher.save()
                    for entry in run.watcher.entries:
                        if (entry.get("measure") or {}) != before.get(entry["name"]):
                            self._announce(run, entry)
                continue  # kept while a benchmark is queued or runs, even after the run ended
            size = _size(self.daemon.jobs.log_path(run.id))
            if run.ended and run.pending_offset >= size:
                self._final(run)
                if run.saved_offset >= size:  # its last points are on disk: nothing to read again
                    del self.runs[run.id]

    def _follow(self, run):
        path = self.daemon.jobs.log_path(run.id)
        size = _size(path)
        if size > run.offset:
            with open(path, "rb") as f:
                f.seek(run.offset)
                data = f.read(min(READ_BYTES, size - run.offset))
            cut = max(data.rfind(b"\n"), data.rfind(b"\r"))
            if cut < 0 and not run.ended:
                data = b""
            elif cut >= 0 and not (run.ended and len(data) == size - run.offset):
                data = data[: cut + 1]
            position = run.offset
            batch = []
            for raw in re.split(rb"(?<=\n)|(?<=\r)(?!\n)", data):
                if not raw:
                    continue
                line = raw.decode("utf-8", "replace").rstrip("\r\n")
                if not run.assembler.pending():
                    run.pending_offset = position  # a record that starts here is not read yet
                run.assembler.feed(line)
                position += len(raw)
                if run.kind == "datagen":
                    self._datagen_line(run, line)
                if not run.assembler.pending():
                    run.pending_offset = position
                batch.extend(run.assembler.take())
            self._publish(run, batch)
            run.offset = position
        if run.ended and run.offset >= size:
            run.assembler.flush()
            self._publish(run, run.assembler.take())
            run.pending_offset = run.offset
        if run.watcher is not None:
            for entry in run.watcher.look():
                self._checkpoint(run, entry)
        run.save(self._store())

    def _publish(self, run, records):
        store = getattr(self.daemon, "history", None)
        # Records without a printed time were written since the last read: they are spread over
        # that stretch (a backlog after a restart over the time the daemon was away), so each
        # stays its own point in a curve's buckets rather than a pile 1 ms apart.
        now = time.time()
        replayed = min(len(run.replay), len(records))
        untimed = sum(1 for record in records[replayed:] if record.get("time") is None)
        since = max([run.last_time] + run.replay[:replayed]) or (getattr(run, "job", None) or {}).get("started_at") or now - 0.5
        spread_s = max(0.0, now - since)
        index = 0
        for record in records:
            # rich prints whole seconds: records of one second are spread 0.1 s apart within it
            # (so a curve's buckets tell them apart), 1 ms apart when more than ten share it.
            printed = record.get("time")
            if run.replay:  # read again after a restart: the time it was given the first time
                when = run.replay.pop(0)
            elif printed is not None:
                gap = 0.1 if run.last_time + 0.1 < printed + 1.0 else 0.001
                when = max(printed, run.last_time + gap)
            else:
                index += 1
                when = max(since + spread_s * index / untimed, run.last_time + 0.001)
            run.last_time = max(run.last_time, when)
            run.journal.append(when)
            if store is not None:
                store.add_many(curves.history_points(run.id, record, when))
            public = curves.public_record(record, when)
            public["job"] = run.id
            if record["kind"] == "step":
                if public["epoch"] is not None and public["step"] is not None:
                    run.epoch_starts.setdefault(str(public["epoch"]), public["step"])
                run.latest = public
                run.recent = (run.recent + [(when, record.get("step"))])[-50:]
            else:
                if public["step"] is None and run.latest:
                    public["step"] = run.latest.get("step")
                run.validation = public
            self.records += 1
            self.topic.publish(public)
        if records:
            self._progress(run)

    def _datagen_line(self, run, line):
        match = _SAMPLES.search(line)
        if match:
            run.samples["total"] = int(match.group("total"))
        for match in _BAR.finditer(line):
            done, total = int(match.group("done")), int(match.group("total"))
            rate = float(match.group("rate"))
            rate = rate if match.group("unit") == "it/s" else (1.0 / rate if rate else None)
            run.samples.update(done=done, total=run.samples.get("total") or total, rate=rate)
        if run.samples.get("done") is not None:
            store = getattr(self.daemon, "history", None)
            now = time.time()
            if store is not None and now - run.samples.get("recorded_at", 0) >= 1.0:
                run.samples["recorded_at"] = now
                labels = {"job": run.id}
                store.add("training", "samples_done", labels, float(run.samples["done"]), now)
                store.add("training", "samples_total", labels, float(run.samples["total"]), now)
                if run.samples.get("rate"):
                    store.add("training", "samples_per_s", labels, run.samples["rate"], now)
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
        run.watcher.save()
        self._announce(run, entry)

    def _announce(self, run, entry):
        """A checkpoint inspected, or its measurement moved on: the `training` topic says so."""
        self.topic.publish({"job": run.id, "kind": "checkpoint", "checkpoint": dict(entry, measure=measure.public(entry.get("measure"))),
                            "time": time.time()})

    def _store(self):
        history = getattr(self.daemon, "history", None)
        return getattr(history, "store", None)

    def _final(self, run):
        run.save(self._store())
        self._progress(run)


def _finished(job, job_dir):
    """A job that ended and whose log was read to its end (nothing left to follow)."""
    state = read_json(os.path.join(job_dir, STATE_FILE)) or {}
    saved = read_json(os.path.join(job_dir, checkpoints.FILE_NAME))
    if isinstance(saved, dict) and measure.pending(saved.get("entries") or []):
        return False  # a benchmark of one of its checkpoints is still to be looked after
    return state.get("offset", -1) >= job.get("log_bytes", 0)


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
    predicted_accept_length, loss} for training; {state, done, total, rate, eta_s} for data generation."""
    if run.kind == "datagen":
        samples = run.samples
        done, total, rate = samples.get("done"), samples.get("total"), samples.get("rate")
        eta = (total - done) / rate if rate and done is not None and total else None
        return {"state": "generating", "done": done, "total": total, "rate": rate, "eta_s": eta, "updated_at": time.time()}
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
    loss = latest.get("loss")
    return {"state": "training", "step": latest.get("step"), "steps_total": steps_total, "epoch": latest.get("epoch"),
            "epochs_total": epochs_total, "steps_per_s": rate, "eta_s": eta, "loss": loss,
            "predicted_accept_length": latest.get("predicted_accept_length"),
            "validation_predicted_accept_length": (run.validation or {}).get("predicted_accept_length"),
            "updated_at": time.time()}


def is_nan(value):
    return value == "nan" or (isinstance(value, float) and math.isnan(value))
