"""One followed training or data-generation run: where its log was read to, its parser, its step
store, its checkpoints and its progress; `read_log()` reads the next stretch of its log.

A Slurm job's log is what all its tasks wrote (its output file): the lines of the rank that
logs are read, the other ranks' skipped (ranks.py), so a run on several nodes is one run.

A record's time is when its line was written: the line's own time where the trainer prints one
(rich's time column, a logging time stamp: logparse.py), else when its first bytes reached the
log (logreader.Arrivals: the log's modification time as each size was first seen). Records are
never spread over the time between two reads: a burst written after a stall keeps the stall
between its times and those before it, and steps/s, the ETA, the stall and slowdown rules
(which read the topic's times) see it. A line's own time is taken when it is no later than its
bytes' arrival (and no earlier than its job's start), within the line time's own precision (a
whole second for rich's column: the arrival places it within that second). Every record goes to
the run's step store (stepstore.py,
where `training.curves` reads them by step); the topic gets the newest PUBLISH_MAX of a read
and the history store the newest step and validation (a sample of the run over time: a burst
of a million records must not flood its buffer, which the other feeds share).

Where it got to in the log (the byte offset of the first line of a record not yet complete)
is kept in the job's directory (training-state.json), written after the step store committed
the records before it: a daemon killed between the two reads those records again, which the
step store already holds (keyed by their offset in the log) and keeps as they were; records a
previous daemon published are not published again.
"""

import json
import os
import re
import time

from ..core.records import read_json, write_json
from . import checkpoints, curves, export, logparse, stepstore
from .datagen import Samples
from .logreader import Arrivals, LogReader
from .ranks import RankFilter, is_multi_task

STATE_FILE = "training-state.json"
TRAINING_STATE = "training_state.json"  # speculators' own, in each checkpoint: {epoch, local_step, global_step}
MAX_TRAINING_STATE_BYTES = 65536
STEP_IN_NAME = re.compile(r"(?:step|checkpoint)[_-]?(\d+)$")
QUIET_S = 2.0  # a record held open (a wrapped continuation may follow) is ended after this long without new bytes
STAMP_SLACK_S = 2.0  # a line's own time may be this much after its bytes' arrival (two clocks' rounding)
MAX_STEP = 10 ** 9  # no drafter trains a billion steps: a larger step counter is not one
LEAP_TIMES = 1000  # a step this many times the one before (and LEAP_MIN past it) is not the next step
LEAP_MIN = 10 ** 6
PUBLISH_MAX = 256  # records of one read published on the topic (the newest): a burst goes to the step store


class Run:
    """One run's reading state (see the module docstring). `publish(record)` puts a record on the
    training topic."""

    def __init__(self, job, job_dir, log_path, publish):
        self.id = job["id"]
        self.kind = job["kind"]
        self.job = job
        self.meta = job.get("meta") or {}
        self.job_dir = job_dir
        self.log_path = log_path
        self.publish = publish
        state = read_json(os.path.join(job_dir, STATE_FILE)) or {}
        offset = int(state.get("offset", 0))
        self.reader = LogReader(offset, int(state.get("cut_lines", 0)), state.get("first_cut_at"))
        self.reader.skipping = bool(state.get("skipping"))
        self.saved_offset = self.pending_offset = offset
        self.published_to = int(state.get("published_to", 0))  # records starting before it were published
        self.arrivals = Arrivals(state.get("arrivals"))
        self.latest = state.get("latest")
        self.validation = state.get("validation")
        self.samples = Samples(state.get("samples") or {})
        self.epoch_starts = state.get("epoch_starts") or {}  # epoch -> its first step
        self.notices = dict(state.get("notices") or {})  # what -> its text (the cut lines' count grows)
        self.assembler = logparse.Assembler()
        self.ranks = RankFilter() if is_multi_task(job) else None  # a Slurm job's log: one rank's lines
        self.recent = []  # (time, step) of the last records, for the rate
        self.newest = {}  # kind -> the newest record of the last read (the history store's sample)
        self.writer = stepstore.StepWriter(job_dir) if self.kind == "training" else None
        save_dir = self.meta.get("save_dir")
        self.watcher = checkpoints.Watcher(job_dir, save_dir, self.meta.get("start_from"), self.meta.get("target")) if save_dir else None
        self.ended = False
        self.size_seen, self.bytes_at = None, time.monotonic()  # the log's size, when the log last grew (a held record ends after QUIET_S of silence)
        self.error = None
        self.validated_epochs = []  # epochs whose validation was read since checkpoints_validated()
        self.read_steps = set()  # steps whose record (SpecForge: step or evaluation) was read since then

    def log_size(self):
        try:
            return os.path.getsize(self.log_path)
        except OSError:
            return 0

    def _look(self):
        """The log's size now, its arrival noted (logreader.Arrivals)."""
        now = time.time()
        try:
            st = os.stat(self.log_path)
        except OSError:
            return 0
        self.arrivals.look(st.st_size, st.st_mtime, now)
        return st.st_size

    def caught_up(self, size=None):
        return self.reader.offset >= (self.log_size() if size is None else size) and not self.reader.skipping

    def read_log(self):
        """Read the next stretch of the log (logreader.py): its records to the
        step store, the topic and the progress. Returns the bytes read."""
        size = self._look()
        before = (self.reader.offset, self.reader.skipping)
        lines = self.reader.read(self.log_path, size, self.ended)
        samples_seen = False
        for line in lines:
            text = line.text
            if text is not None and self.ranks is not None:
                text = self.ranks.line(text)
                if text is None:
                    continue  # another rank's: the rank that logs gives the run's one set of curves
            # A cut line is read as an empty one: it ends a record that was open, and is nothing itself.
            self.assembler.feed(text if text is not None else "", line.start)
            if self.kind == "datagen" and text is not None:
                samples_seen = self.samples.read_line(text) or samples_seen
        if size != self.size_seen:
            self.size_seen, self.bytes_at = size, time.monotonic()
        if self.ended and self.caught_up(size):
            self.assembler.flush()
        elif self.assembler.pending() and self.caught_up(size) and time.monotonic() - self.bytes_at >= QUIET_S:
            self.assembler.flush()  # the run went quiet: its last record is shown, not held back
        opened = self.assembler.open_at()
        self.pending_offset = opened if opened is not None else self.reader.offset
        records = self.assembler.take()
        self._publish(records)
        self.arrivals.forget_before(self.pending_offset)
        changed = self.update_notices()
        if records or samples_seen or changed:
            self.write_progress()
        if (self.reader.offset, self.reader.skipping) != before or self.pending_offset != self.saved_offset:
            self.save()
        return self.reader.offset - before[0]

    def _publish(self, records):
        if not records:
            return
        now = time.time()
        started = self.job.get("started_at") or self.job.get("submitted_at")
        stamped = []
        fresh = []
        for record in records:
            if not self._plausible(record):
                continue
            when = self.time_of(record, now, started)
            public = curves.public_record(record, when)
            public["job"] = self.id
            if record["kind"] == "step":
                if public["epoch"] is not None and public["step"] is not None:
                    self.epoch_starts.setdefault(str(public["epoch"]), public["step"])
                self.latest = public
                if self.recent and self.recent[-1][0] == when:
                    self.recent[-1] = (when, record.get("step"))  # one burst, one time: its last step counts
                else:
                    self.recent.append((when, record.get("step")))
                if public["epoch"] is None and public["step"] is not None:
                    self.read_steps.add(public["step"])
            else:
                if public["step"] is None and self.latest:
                    public["step"] = self.latest.get("step")
                self.validation = public
                if public["epoch"] is not None:
                    self.validated_epochs.append(public["epoch"])
                elif public["step"] is not None:
                    self.read_steps.add(public["step"])  # SpecForge evaluates at steps
            self.newest[record["kind"]] = record
            offset = record.get("offset")
            if offset is not None:
                stamped.append((offset, public, when))
            if offset is None or offset >= self.published_to:
                fresh.append(public)
        if self.writer is not None:
            self.writer.add(stamped)
        self.recent = self.recent[-50:]
        for public in fresh[-PUBLISH_MAX:]:
            self.publish(public)
        if stamped:
            self.published_to = max(self.published_to, stamped[-1][0] + 1)

    def _plausible(self, record):
        """Whether a record's figures are within their domain; one that is not is said once in the
        run's notices (a step counter that leaps by orders: its record is left out; a predicted
        accept length out of range: the record stays, without it)."""
        if record.get("refused"):
            self._notice("refused figure", record["refused"])
        step = record.get("step")
        if record["kind"] != "step" or step is None:
            return True
        before = (self.latest or {}).get("step")
        if step > MAX_STEP or (before is not None and step > LEAP_TIMES * max(before, 1) and step - before > LEAP_MIN):
            self._notice("refused step", "step %d%s is not a step count: its record is left out" % (
                step, " after step %d" % before if before is not None else ""))
            return False
        return True

    def _notice(self, key, text):
        if self.notices.get(key) != text:
            if key not in self.notices:
                self.publish({"job": self.id, "kind": "notice", "text": text, "time": time.time()})
            self.notices[key] = text

    def time_of(self, record, now, started=None):
        """When a record's line was written (see the module docstring)."""
        offset = record.get("offset")
        arrived = self.arrivals.time_of(offset) if offset is not None else None
        arrived = now if arrived is None else min(arrived, now)
        stamp = record.get("time")
        if not isinstance(stamp, (int, float)) or stamp > arrived + STAMP_SLACK_S:
            return arrived
        if isinstance(started, (int, float)) and stamp < started - STAMP_SLACK_S:
            return arrived  # before its job began: another clock's time (a time zone not the daemon's)
        return min(now, max(stamp, min(arrived, stamp + (record.get("time_within_s") or 0.0))))

    def take_history_points(self, now):
        """[(name, labels, value)] for the history store: the newest step and validation read since
        the last call, the samples of a data generation at most once a second."""
        points = []
        for record in self.newest.values():
            points.extend((name, labels, value) for _, name, labels, value, _ in curves.history_points(self.id, record, now))
        self.newest = {}
        samples = self.samples
        if samples.done is not None and now - samples.recorded_at >= 1.0:
            samples.recorded_at = now
            labels = {"job": self.id}
            points.append(("samples_done", labels, float(samples.done)))
            if samples.total is not None:
                points.append(("samples_total", labels, float(samples.total)))
            if samples.rate:
                points.append(("samples_per_s", labels, samples.rate))
        return points

    def update_notices(self):
        """The run's notices (lines cut, links out of the save directory), each said once on the topic."""
        found = {}
        if self.reader.notice():
            found["cut lines"] = self.reader.notice()
        for link in self.watcher.links if self.watcher else []:
            found["link " + link] = "checkpoint directory %s leads out of the save directory: not read" % link
        changed = False
        for key, text in found.items():
            if self.notices.get(key) == text:
                continue
            if key not in self.notices:
                self.publish({"job": self.id, "kind": "notice", "text": text, "time": time.time()})
            self.notices[key] = text
            changed = True
        return changed

    def checkpoint_done(self, entry):
        """A checkpoint just inspected: the step its weights hold and what the run predicts for it,
        by the rule of curves.prediction: its epoch's validation when there is one, else the step
        record at its step (else the newest step's), each saying which it is. Taken from the
        checkpoint itself, not from what the run is at: two checkpoints found at one look (a run
        that wrote both before the look, a restarted daemon) each keep their own step."""
        entry["step"] = self.saved_step(entry)
        validation = None
        if entry.get("epoch") is not None and self.validation and self.validation.get("epoch") == entry["epoch"]:
            validation = self.validation
        elif self.writer is not None and entry.get("epoch") is not None:
            validation = self.writer.validation_of(entry["epoch"])
        elif self.writer is not None and entry["step"] is not None:
            validation = self.writer.validation_at(entry["step"])  # SpecForge evaluates at steps, not epochs
        at_step = None
        if self.writer is not None and entry["step"] is not None:
            at_step = self.writer.step_at(entry["step"])
        if validation is not None:
            entry["validation"] = validation
        predicted = curves.prediction(at_step or self.latest, validation)
        entry["predicted_accept_length"], entry["predicted_from"] = predicted["accept_length"], predicted["from"]
        source = export.source_of(self.watcher.entries, entry) if self.watcher is not None else None
        if source is not None:  # a `specforge export` of a checkpoint: the weights of its step
            entry["exported_from"] = source["name"]
            for key in ("step", "validation", "predicted_accept_length", "predicted_from"):
                entry[key] = source.get(key)

    def checkpoints_validated(self):
        """The checkpoints inspected before the record they are predicted from was read, their
        prediction now taken from it: speculators saves an epoch's checkpoint, then validates it;
        a SpecForge checkpoint (no epoch) may be found before its step's evaluation, or its
        step, is read (a save directory an earlier attempt left is found before any line of
        the log). The entries that changed, for the caller to journal and announce."""
        epochs, self.validated_epochs = set(self.validated_epochs), []
        steps, self.read_steps = self.read_steps, set()
        changed = []
        for entry in self.watcher.entries if self.watcher is not None and (epochs or steps) else []:
            if entry.get("predicted_from") == "validation" or entry.get("verdict") == "unreadable":
                continue
            if entry.get("epoch") in epochs if entry.get("epoch") is not None else entry.get("step") in steps:
                before = (entry.get("predicted_accept_length"), entry.get("predicted_from"))
                self.checkpoint_done(entry)
                if (entry.get("predicted_accept_length"), entry.get("predicted_from")) != before:
                    changed.append(entry)
        return changed

    def saved_step(self, entry):
        """The last step a checkpoint's weights hold: speculators' own training_state.json in the
        checkpoint (its global_step counts the steps done, the log numbers them from 0), else a
        step in its name (`checkpoint-500`, `epoch0_step500`), else its epoch's last step, else
        the newest step read (a run that names neither)."""
        state_path = os.path.join(entry["path"], TRAINING_STATE)
        if entry.get("verdict") != "unreadable" and checkpoints.inside(os.path.realpath(self.meta.get("save_dir") or entry["path"]), state_path):
            state = _small_json(state_path)
            done = state.get("global_step") if isinstance(state, dict) else None
            if isinstance(done, int) and not isinstance(done, bool) and done > 0:
                return done - 1
        named = STEP_IN_NAME.search(entry["name"])
        if named:
            return int(named.group(1))
        epoch = entry.get("epoch")
        if epoch is not None and str(epoch + 1) in self.epoch_starts:
            return self.epoch_starts[str(epoch + 1)] - 1
        return (self.latest or {}).get("step")

    def write_progress(self):
        write_json(os.path.join(self.job_dir, "progress.json"), progress_of(self))

    def save(self):
        """How far the log was read (a record still open is read again from its start)."""
        self.saved_offset = self.pending_offset
        write_json(os.path.join(self.job_dir, STATE_FILE), {
            "offset": self.pending_offset, "skipping": self.reader.skipping and self.pending_offset == self.reader.offset,
            "cut_lines": self.reader.cut_lines, "first_cut_at": self.reader.first_cut_at, "published_to": self.published_to,
            "arrivals": self.arrivals.state(), "latest": self.latest, "validation": self.validation, "samples": self.samples.state(),
            "epoch_starts": self.epoch_starts, "notices": self.notices})

    def close(self):
        if self.writer is not None:
            self.writer.close()
            self.writer = None


def _small_json(path):
    """A small JSON file's value, or None (missing, not JSON, or larger than a state file is)."""
    try:
        with open(path, "rb") as f:
            raw = f.read(MAX_TRAINING_STATE_BYTES + 1)
    except OSError:
        return None
    if len(raw) > MAX_TRAINING_STATE_BYTES:
        return None
    try:
        return json.loads(raw)
    except (ValueError, RecursionError):  # deep nesting within the size is refused as well
        return None


def rate_of(run):
    recent = [(t, s) for t, s in run.recent if s is not None]
    if len(recent) < 2 or recent[-1][0] <= recent[0][0] or recent[-1][1] <= recent[0][1]:
        return None
    return (recent[-1][1] - recent[0][1]) / (recent[-1][0] - recent[0][0])


def progress_of(run):
    """The job's progress.json: {state, step, steps_total, epoch, epochs_total, steps_per_s, eta_s,
    predicted_accept_length, loss} for training; {state, done, total, rate, eta_s} for data
    generation; both with `notices` (lines cut, links refused) and `error` (reading it failed)."""
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
