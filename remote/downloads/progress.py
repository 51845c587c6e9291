"""What a download or verify job says of its progress, in its job's directory:

  progress.json  the summary, small whatever the file count (the job's record carries it, so
                 every `jobs.list` and job event does): the counts of files by how far they
                 got, the bytes, rate and ETA, the few files at work now and the first few that
                 failed; replaced atomically at most ~4 times a second
  files.jsonl    every file's state and bytes, one JSON line each after a header line, for
                 `download.files` to page through; replaced atomically less often the longer
                 it takes to write (a 100,000-file list costs a fraction of a second)
"""

from __future__ import annotations

import collections
import json
import os
import threading
import time

from ..core.records import replace_file
from ..core.words import STOPPED  # a job stopped when asked (SIGTERM, SIGINT): no failure, its bytes kept
from .output import log, scrub

PROGRESS_INTERVAL = 0.25
RATE_MIN_S = 0.5  # no rate (and no ETA) before this long of transfer: a first slice is no rate
FILES_INTERVAL_S = 1.0  # files.jsonl at most this often, and never more than 1/FILES_COST_SHARE of the time
FILES_COST_SHARE = 20
RATE_WINDOW = 5.0
FILES_FILE = "files.jsonl"

# The summary's fixed caps: files at work now, files that failed, characters of a path in it.
CURRENT_FILES_MAX = 4
FAILED_FILES_MAX = 5
SUMMARY_PATH_CHARS = 256

VERDICT_STATES = ("verified", "mismatch", "corrupt", "failed")  # how a job that ran its course ended
FINAL_STATES = VERDICT_STATES + (STOPPED,)  # the job's own word on how it ended
# A file's states, by what the summary counts them as.
WORKING_FILE_STATES = ("checking", "downloading", "retrying", "verifying")
DONE_FILE_STATES = ("present", "downloaded", "verifying", "verified")  # all its bytes are here
FAILED_FILE_STATES = ("failed", "mismatch", "missing")


class FileState:
    __slots__ = ("path", "bytes_total", "bytes_done", "bytes_checked", "state", "fetched", "digest")

    def __init__(self, path, size):
        self.path = path
        self.bytes_total = size
        self.bytes_done = 0
        self.bytes_checked = 0
        self.state = "queued"
        self.fetched = 0  # bytes received by this run
        self.digest = None

    def to_json(self, path_chars=None):
        path = self.path
        if path_chars is not None and len(path) > path_chars:
            path = path[: path_chars - 1] + "\u2026"
        return {"path": path, "bytes_total": self.bytes_total, "bytes_done": self.bytes_done,
                "bytes_checked": self.bytes_checked, "state": self.state}

    def to_line(self):
        return json.dumps([self.path, self.bytes_total, self.bytes_done, self.bytes_checked, self.state], ensure_ascii=False)


class Progress:
    """progress.json, replaced whole at most every PROGRESS_INTERVAL seconds, and files.jsonl."""

    def __init__(self, job_dir, job, spec):
        self.path = os.path.join(job_dir, "progress.json") if job_dir else None
        self.files_path = os.path.join(job_dir, FILES_FILE) if job_dir else None
        self.lock = threading.Lock()
        self.job = job
        self.spec = spec
        self.state = "queued"
        self._files = []
        self._by_path = {}
        self.revision = None
        self.verdict = None
        self.error = None
        self.started_at = time.time()
        self.samples = collections.deque()  # (monotonic time, bytes fetched), from the first byte on
        self.first_byte_at = None  # monotonic time the first byte of this run arrived
        self.final_rate = None
        self.dirty = True
        self.last_write = 0.0
        self.files_due = 0.0  # monotonic time files.jsonl may be written again
        self.write_lock = threading.Lock()
        self.stop_event = threading.Event()
        self.thread = None
        if self.path:
            os.makedirs(job_dir, exist_ok=True)
            self.write(force=True)
            self.thread = threading.Thread(target=self._loop, name="progress", daemon=True)
            self.thread.start()

    @property
    def files(self):
        return self._files

    @files.setter
    def files(self, files):
        with self.lock:
            self._files = list(files)
            self._by_path = {f.path: f for f in self._files}
            self.dirty = True
            self.files_due = 0.0  # the list is new: out at the next write

    def set(self, **kw):
        with self.lock:
            for k, v in kw.items():
                setattr(self, k, v)
            self.dirty = True
            if "state" in kw:
                self.files_due = 0.0  # each file's state as the job's turned: out with it
        if "state" in kw or "verdict" in kw or "error" in kw:
            self.write()

    def stop_files(self):
        """The job was stopped: each file at work or yet to start says stopped (its bytes kept),
        since nothing works on it any more."""
        with self.lock:
            for f in self._files:
                if f.state in WORKING_FILE_STATES or f.state == "queued":
                    f.state = STOPPED
            self.dirty = True

    def file_state(self, path):
        """The FileState of `path`, or None when the job does not follow it."""
        return self._by_path.get(path)

    def fetched(self):
        return sum(f.fetched for f in self._files)

    def first_byte(self):
        """A transfer's first bytes arrived (called once per file): the rate counts from the first."""
        if self.first_byte_at is None:
            self.first_byte_at = time.monotonic()

    def _rate(self, now, fetched):
        """Bytes per second over the last RATE_WINDOW seconds of transfer. The time before the
        first byte (resolving, the hub's wait for its first answer) is no transfer: a rate that
        averaged it in would give a 4 MB file an ETA of hours."""
        if self.final_rate is not None:
            return self.final_rate
        if self.first_byte_at is None or not fetched:
            return 0.0
        if not self.samples:
            self.samples.append((self.first_byte_at, 0))
        self.samples.append((now, fetched))
        while len(self.samples) > 2 and now - self.samples[1][0] >= RATE_WINDOW:
            self.samples.popleft()
        t0, b0 = self.samples[0]
        if now - t0 < RATE_MIN_S:
            return 0.0
        return max(0.0, (fetched - b0) / (now - t0))

    def snapshot(self):
        """The summary: one pass over the files, and a fixed number of them named."""
        now = time.time()
        clock = time.monotonic()
        with self.lock:
            total = done = checked = fetched = 0
            counts = {"total": len(self._files), "done": 0, "verified": 0, "failed": 0, "working": 0}
            current, failed = [], []
            for f in self._files:
                size = f.bytes_total or 0
                total += size
                done += min(f.bytes_done, size)
                checked += f.bytes_checked
                fetched += f.fetched
                state = f.state
                if state in DONE_FILE_STATES:
                    counts["done"] += 1
                if state == "verified":
                    counts["verified"] += 1
                if state in WORKING_FILE_STATES:
                    counts["working"] += 1
                    if len(current) < CURRENT_FILES_MAX:
                        current.append(f.to_json(SUMMARY_PATH_CHARS))
                elif state in FAILED_FILE_STATES:
                    counts["failed"] += 1
                    if len(failed) < FAILED_FILES_MAX:
                        failed.append(f.to_json(SUMMARY_PATH_CHARS))
            rate = self._rate(clock, fetched)
            eta = None
            if self.state == "downloading" and rate > 0:
                eta = round((total - done) / rate, 1)
            elif self.state in ("verifying", "verified", "mismatch", "corrupt"):
                eta = 0.0
            return {
                "job": self.job, "repo": self.spec.get("repo"), "repo_type": self.spec.get("repo_type"),
                "revision": self.revision, "local_dir": self.spec.get("local_dir"),
                "state": self.state, "final": self.state in FINAL_STATES,
                "file_counts": counts, "current_files": current, "failed_files": failed,
                "bytes_total": total, "bytes_done": done,
                "bytes_checked": checked, "rate_bytes_per_s": round(rate, 1), "eta_s": eta,
                "verdict": self.verdict, "error": self.error,
                "started_at": round(self.started_at, 3), "updated_at": round(now, 3),
            }

    def write(self, force=False):
        if not self.path:
            return
        now = time.monotonic()
        if not force and now - self.last_write < PROGRESS_INTERVAL:
            self.dirty = True
            return
        with self.write_lock:
            data = scrub(json.dumps(self.snapshot(), ensure_ascii=False))
            try:
                replace_file(self.path, data + "\n", encoding="utf-8")
            except OSError as e:
                log("cannot write %s: %s" % (self.path, e))
            if force or time.monotonic() >= self.files_due:
                self._write_files()
            self.last_write = time.monotonic()
            self.dirty = False

    def _write_files(self):
        """files.jsonl: a header line {total, updated_at}, then [path, bytes_total, bytes_done,
        bytes_checked, state] per file, in the job's order."""
        started = time.monotonic()
        with self.lock:
            lines = [json.dumps({"total": len(self._files), "updated_at": round(time.time(), 3)})]
            lines.extend(f.to_line() for f in self._files)
        try:
            replace_file(self.files_path, scrub("\n".join(lines)) + "\n", encoding="utf-8")
        except OSError as e:
            log("cannot write %s: %s" % (self.files_path, e))
        cost = time.monotonic() - started
        self.files_due = time.monotonic() + max(FILES_INTERVAL_S, FILES_COST_SHARE * cost)

    def tick(self):
        """Called by the loop; also feeds the rate window."""
        if self.dirty or self.state in ("downloading", "verifying", "resolving"):
            self.write()

    def _loop(self):
        while not self.stop_event.wait(PROGRESS_INTERVAL):
            self.tick()

    def close(self):
        self.stop_event.set()
        if self.thread is not None:
            self.thread.join()
        self.write(force=True)
