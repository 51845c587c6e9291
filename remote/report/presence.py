"""What the daemon remembers about itself for the report: each of its starts (a restart is a
start after the first) and when a console last followed it (a "while you were away" screen is
shown to whoever connects after nobody watched for a while).

Kept in the state directory's `report/`: `starts.jsonl`, one line per start, cut to its newest
MAX_STARTS lines when it grows past twice that; `watched.json`, the last time a console followed
(`report.watch`), written at most every WRITE_EVERY_S while one does. A line that is not JSON is
skipped; a file over MAX_FILE_BYTES is read from its tail only."""

import json
import os
import threading
import time

from ..core import paths
from ..core.records import read_json, replace_file, write_json

MAX_STARTS = 1000
MAX_FILE_BYTES = 256 * 1024
WRITE_EVERY_S = 30.0


def report_dir():
    path = os.path.join(paths.state_dir(), "report")
    os.makedirs(path, mode=0o700, exist_ok=True)
    return path


def read_lines(path, max_bytes=MAX_FILE_BYTES):
    """The JSON objects of a JSON-lines file, oldest first: a line that is not one is skipped,
    and only the last `max_bytes` are read (the first, partial line of a tail is dropped)."""
    try:
        with open(path, "rb") as f:
            size = os.fstat(f.fileno()).st_size
            if size > max_bytes:
                f.seek(size - max_bytes)
                f.readline()
            data = f.read(max_bytes)
    except OSError:
        return []
    found = []
    for raw in data.splitlines():
        try:
            value = json.loads(raw)
        except ValueError:
            continue
        if isinstance(value, dict):
            found.append(value)
    return found


def record_start(started_at, pid, version):
    """One line for this start; the file is cut to its newest MAX_STARTS lines past 2x that."""
    path = os.path.join(report_dir(), "starts.jsonl")
    with open(path, "a") as f:
        f.write(json.dumps({"at": started_at, "pid": pid, "version": version}) + "\n")
    starts = read_lines(path)
    if len(starts) > 2 * MAX_STARTS:
        replace_file(path, "".join(json.dumps(s) + "\n" for s in starts[-MAX_STARTS:]))


def starts():
    """[{at, pid, version}] of the daemon's starts, oldest first (at most MAX_STARTS x 2)."""
    return [s for s in read_lines(os.path.join(report_dir(), "starts.jsonl")) if isinstance(s.get("at"), (int, float))]


class Presence:
    """When a console last followed this daemon: in memory while one does, on disk for the next daemon."""

    def __init__(self, clock=time.time):
        self.clock = clock
        self._lock = threading.Lock()
        self._path = os.path.join(report_dir(), "watched.json")
        saved = read_json(self._path)
        at = saved.get("last_watched_at") if isinstance(saved, dict) else None
        self.last_watched_at = float(at) if isinstance(at, (int, float)) and not isinstance(at, bool) else None
        self._written_at = 0.0
        self.watching = 0

    def touch(self):
        now = self.clock()
        with self._lock:
            self.last_watched_at = now
            if now - self._written_at < WRITE_EVERY_S:
                return
            self._written_at = now
        try:
            write_json(self._path, {"last_watched_at": now})
        except OSError:
            pass  # a full disk: the figure stays right in memory for this daemon's life


class WatchSource:
    """The `report.watch` stream: it sends nothing; while it is open the daemon counts as watched."""

    gather_s = 0.0
    starts_with_snapshot = False

    def __init__(self, presence):
        self.presence = presence

    def first_seq(self, after):
        self.presence.touch()
        return 0

    def read(self, after):
        from ..core.streams import Batch

        self.presence.touch()
        return Batch(None, after or 0)

    def wait(self, after, timeout_s):
        time.sleep(timeout_s)
