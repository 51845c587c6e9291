"""progress.json of the download and verify jobs: each file's state and bytes, the totals, the
receive rate and ETA, rewritten atomically in the job's directory at most ~4 times a second."""

from __future__ import annotations

import collections
import json
import os
import threading
import time

from ..core.records import replace_file
from .output import log, scrub

PROGRESS_INTERVAL = 0.25
RATE_WINDOW = 5.0


FINAL_STATES = ("verified", "mismatch", "corrupt", "failed")  # the job's own word on how it ended


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

    def to_json(self):
        return {"path": self.path, "bytes_total": self.bytes_total, "bytes_done": self.bytes_done,
                "bytes_checked": self.bytes_checked, "state": self.state}


class Progress:
    """progress.json, replaced whole at most every PROGRESS_INTERVAL seconds."""

    def __init__(self, job_dir, job, spec):
        self.path = os.path.join(job_dir, "progress.json") if job_dir else None
        self.lock = threading.Lock()
        self.job = job
        self.spec = spec
        self.state = "queued"
        self.files = []
        self.revision = None
        self.verdict = None
        self.error = None
        self.started_at = time.time()
        self.samples = collections.deque()
        self.final_rate = None
        self.dirty = True
        self.last_write = 0.0
        self.write_lock = threading.Lock()
        self.stop_event = threading.Event()
        self.thread = None
        if self.path:
            os.makedirs(job_dir, exist_ok=True)
            self.write(force=True)
            self.thread = threading.Thread(target=self._loop, name="progress", daemon=True)
            self.thread.start()

    def set(self, **kw):
        with self.lock:
            for k, v in kw.items():
                setattr(self, k, v)
            self.dirty = True
        if "state" in kw or "verdict" in kw or "error" in kw:
            self.write()

    def file_state(self, path):
        """The FileState of `path`, or None when the job does not follow it."""
        for f in self.files:
            if f.path == path:
                return f
        return None

    def fetched(self):
        return sum(f.fetched for f in self.files)

    def _rate(self, now):
        fetched = self.fetched()
        self.samples.append((now, fetched))
        while len(self.samples) > 2 and now - self.samples[1][0] >= RATE_WINDOW:
            self.samples.popleft()
        if self.final_rate is not None:
            return self.final_rate
        t0, b0 = self.samples[0]
        if now - t0 < 0.2:
            return 0.0
        return max(0.0, (fetched - b0) / (now - t0))

    def snapshot(self):
        now = time.time()
        with self.lock:
            files = [f.to_json() for f in self.files]
            total = sum(f.bytes_total or 0 for f in self.files)
            done = sum(min(f.bytes_done, f.bytes_total or 0) for f in self.files)
            checked = sum(f.bytes_checked for f in self.files)
            rate = self._rate(now)
            eta = None
            if self.state == "downloading" and rate > 0:
                eta = round((total - done) / rate, 1)
            elif self.state in ("verifying", "verified", "mismatch", "corrupt"):
                eta = 0.0
            return {
                "job": self.job, "repo": self.spec.get("repo"), "repo_type": self.spec.get("repo_type"),
                "revision": self.revision, "local_dir": self.spec.get("local_dir"),
                "state": self.state, "final": self.state in FINAL_STATES, "files": files, "bytes_total": total, "bytes_done": done,
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
            self.last_write = time.monotonic()
            self.dirty = False

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
