"""The training feed (remote/core/feeds.py): every training and data-generation job is a source
of its own, read on its own worker thread (run.py does the reading), so a run whose log is
hostile, whose reading fails or hangs delays no other run and never stops the service.

A read takes the next stretch of the run's log (records to the step store, the `training` topic
and the progress.json that job events carry), looks at its save directory for checkpoints
(checkpoints.py) and moves its checkpoint measurements (measure.py) and scores (scores.py) on.
Each read spends at most `max_bytes` of log and about `deadline_s`; a backlog is caught up over
several reads. A read
returns the run's progress, so a run's figure is as old as its last good read: one whose reads
fail shows its error (its progress.json and training.curves say it, a stale marker on the
topic) and is tried again with its own backoff, its state read again from its job directory.
A run that ended, whose log was read to its end and whose measurements and scores are done, is
no longer a source.
"""

import os
import threading
import time

from ..core.feed_source import FeedSource
from ..core.feeds import Feed
from ..core.records import read_json
from ..core.words import LIVE_STATES as LIVE
from . import checkpoints, export, measure, scores
from .logreader import READ_BYTES, STRETCH_BYTES
from .run import STATE_FILE, Run, progress_of

KINDS = ("training", "datagen")
JOBS_EVERY_S = 2.0


class RunSource(FeedSource):
    """One run, read every half second."""

    interval_s = 0.5
    deadline_s = 2.0
    max_bytes = 2 * READ_BYTES  # of log per read
    max_series = 256  # per-position series: three per drafted position, two more per validated one
    # A run's own log is worth catching up quickly (a backlog after a restart, a burst): its reads
    # may take half a core before the feed reads it less often; a hostile log costs no more.
    max_cpu_share = 0.5

    def __init__(self, key, feed):
        super().__init__(key)
        self.feed = feed
        self.run = None
        self._points = []

    def open(self):
        daemon = self.feed.daemon
        job = self.feed.jobs[self.key]
        self.run = Run(job, daemon.jobs.job_dir(self.key), daemon.jobs.log_path(self.key), self.feed.topic.publish)

    def close(self):
        if self.run is not None:
            self.run.close()
            self.run = None

    def read(self, budget):
        run = self.run
        try:
            self._read(run, budget)
        except Exception as exc:  # shown as the run's error in its progress; the feed retries it
            run.error = "%s: %s" % (type(exc).__name__, exc)
            try:
                run.write_progress()
            except OSError:
                pass  # the job's directory may be what fails
            raise
        if run.error is not None:
            run.error = None
            run.write_progress()
        return dict(progress_of(run), job=run.id)

    def _read(self, run, budget):
        job = self.feed.jobs.get(self.key) or run.job
        run.job, run.ended = job, job["process_state"] not in LIVE
        for what, name, value in self.feed.take_requests(self.key):
            entry = next((e for e in run.watcher.entries if e["name"] == name), None) if run.watcher else None
            if entry is not None:
                if what == "export":
                    entry["export"] = value  # its job started by training.export
                elif what == "score":
                    entry["score"], entry["scored_accept_length"] = value, None  # its job started by training.score
                else:
                    measure.queue(entry, value, by_hand=True)
                run.watcher.save(entry)
                self._announce(entry)
        # The log: a stretch at a time while this read's budget lasts (a backlog goes on at the next).
        read_bytes = 0
        while True:
            got = run.read_log()
            read_bytes += got
            if not got or run.caught_up() or budget.remaining_s() < self.deadline_s / 2 or read_bytes + STRETCH_BYTES > self.max_bytes:
                break
        self._points = run.take_history_points(time.time())
        if run.watcher is not None:
            for entry in run.checkpoints_validated():
                run.watcher.save(entry)
                self._announce(entry)
            for entry in export.advance(self.feed.daemon, run.watcher.entries):
                run.watcher.save(entry)
                self._announce(entry)
            for entry in run.watcher.look(final=run.ended, later=export.busy_names(run.watcher.entries)):
                run.checkpoint_done(entry)
                if run.meta.get("measure") and measure.servable(entry):
                    measure.queue(entry, run.meta["measure"])
                if run.meta.get("score") and scores.scoreable(entry):
                    scores.queue(entry, run.meta["score"])
                run.watcher.save(entry)
                self._announce(entry)
            if run.update_notices():
                run.write_progress()
            scoring = scores.pending(run.watcher.entries)
            if scoring:
                before = {e["name"]: dict(e.get("score") or {}) for e in run.watcher.entries}
                if scores.advance(self.feed.daemon, run.id, run.watcher.entries):
                    for entry in run.watcher.entries:
                        if (entry.get("score") or {}) != before.get(entry["name"]):
                            run.watcher.save(entry)
                            self._announce(entry)
            if measure.pending(run.watcher.entries):
                before = {e["name"]: dict(e.get("measure") or {}) for e in run.watcher.entries}
                if measure.advance(self.feed.daemon, run.watcher.entries):
                    for entry in run.watcher.entries:
                        if (entry.get("measure") or {}) != before.get(entry["name"]):
                            run.watcher.save(entry)
                            self._announce(entry)
                return  # followed while a benchmark is queued or runs, even after the run ended
            if export.pending(run.watcher.entries):
                return  # and while an export runs: its output is listed when it ends
            if scoring:
                return  # and while its checkpoints are scored
        if run.ended and run.caught_up() and not (run.watcher is not None and run.watcher.waiting()):
            run.write_progress()
            self.feed.finished(self.key)

    def history_points(self, record):
        points, self._points = self._points, []
        return points

    def wire_record(self, record):
        return None  # the run's records went on the topic as they were read

    def stale_marker(self, latest, age_s, error, key_field):
        return {"job": self.key, "kind": "stale", "stale": True, "age_s": age_s, "error": error, "time": time.time()}

    def _announce(self, entry):
        """A checkpoint inspected, or its measurement moved on: the `training` topic says so."""
        self.feed.topic.publish({"job": self.key, "kind": "checkpoint", "time": time.time(),
                                 "checkpoint": dict(entry, measure=measure.public(entry.get("measure")))})


class TrainingFeed(Feed):
    """Training and data-generation runs, one source each (keyed by job id)."""

    name = "training"
    key_field = "job"
    interval_s = 0.5

    def __init__(self, daemon):
        super().__init__(daemon)
        self.jobs = {}  # id -> the job, as last listed (sources read their run's from here)
        self._jobs_at = 0.0
        self._wanted = {}
        self._finished = set()  # ended jobs whose log was read to the end: no source
        self._requests = {}  # job id -> [(measure | export | score, checkpoint name, options | job record)]
        self._requests_lock = threading.Lock()

    def request_measure(self, job_id, name, options):
        """Queue a measurement of one checkpoint (from training.measure; its run's next read takes it)."""
        self._request(job_id, ("measure", name, options))

    def request_export(self, job_id, name, record):
        """An export job of one checkpoint started (training.export): its run's next read keeps it
        in the checkpoint's entry and follows it."""
        self._request(job_id, ("export", name, record))

    def request_score(self, job_id, name, record):
        """A score job over checkpoints started (training.score): its run's next read keeps it in
        each checkpoint's entry and follows it."""
        self._request(job_id, ("score", name, record))

    def _request(self, job_id, request):
        with self._requests_lock:
            self._requests.setdefault(job_id, []).append(request)
            self._finished.discard(job_id)
        self._jobs_at = 0.0
        self.daemon.services.wake(self.name)
        self.wake(job_id)

    def take_requests(self, job_id):
        with self._requests_lock:
            return self._requests.pop(job_id, [])

    def refresh(self):
        """List the jobs again at the next discovery (a run was just started), and now."""
        self._jobs_at = 0.0
        self.daemon.services.wake(self.name)

    def finished(self, job_id):
        self._finished.add(job_id)
        self._jobs_at = 0.0  # the next discovery lets its source go

    def discover(self):
        """{job id: kind} of the runs to read: running ones, and ended ones with something left
        (log not read to its end, a measurement queued or running)."""
        now = time.time()
        if now - self._jobs_at < JOBS_EVERY_S and not (set(self._wanted) & self._finished):
            return self._wanted
        self._jobs_at = now
        jobs = {}
        for kind in KINDS:
            for job in self.daemon.jobs.list(kind=kind):
                jobs[job["id"]] = job
        self.jobs = jobs
        with self._requests_lock:
            asked = set(self._requests)
        wanted = {}
        for job_id, job in jobs.items():
            if job_id in self._finished and job_id not in asked:
                continue
            if job["process_state"] in LIVE or job_id in asked or job_id in self._wanted or not self._is_finished(job):
                wanted[job_id] = job["kind"]
        self._wanted = wanted
        return wanted

    def _is_finished(self, job):
        """An ended job whose log was read to its end, no benchmark of its checkpoints pending
        (looked at once per job: a finished job stays finished until a measurement is asked for)."""
        job_dir = self.daemon.jobs.job_dir(job["id"])
        state = read_json(os.path.join(job_dir, STATE_FILE)) or {}
        if state.get("offset", -1) < job.get("log_bytes", 0):
            return False
        if job["kind"] == "training":
            entries = checkpoints.Journal(job_dir).load()
            if measure.pending(entries) or export.pending(entries) or scores.pending(entries):
                return False
        self._finished.add(job["id"])
        return True

    def make_source(self, key, spec):
        return RunSource(key, self)

    def detail_extra(self):
        return {"runs": len(self._wanted), "finished": len(self._finished)}

    def run_error(self, job_id):
        """Why reading this run fails now (None: it does not, or it is not read)."""
        status = self.source_status(job_id)
        return status["error"] if status else None
