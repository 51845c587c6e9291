"""The host's history store: every time series the daemon records (GPU telemetry, inference
metrics, training curves), in one SQLite file under the state directory, kept while no console
is connected so that reconnecting after a night shows the night.

A series is (source, name, labels), e.g. ("gpu", "utilization_percent", {"gpu": "0"}); a point
is (time, value). Samplers call `add()` / `add_many()`, which only append to a buffer; the
history service (`HistoryService`, the daemon's `daemon.history`) flushes the buffer in one
transaction per second and does a slice of maintenance in the same step. Reads
(history_query.py) use their own connections: WAL lets them run beside the writer.

Schema (all times integers, values REAL; the point tables are WITHOUT ROWID, keyed by
(series_id, time), so a point is one small row and a series' window is one range scan):
- series(id, source, name, labels: canonical JSON (sorted keys, string values), first_ms,
  last_ms, last_value)
- raw(series_id, t_ms, value)
- buckets_10s, buckets_1m(series_id, t_s: bucket start, min_value, mean_value, max_value, count)
- meta(key, value): how far each tier is rolled up (rolled_<tier>) and expired (kept_<tier>)

Tiers and retention (a spike is never averaged away: buckets keep min and max):
- raw points for 6 hours;
- 10 s buckets for 3 days, rolled from raw once a bucket is 5 s past its end;
- 1 min buckets for 15 days (a week with room to spare), rolled from the 10 s buckets.
A point that arrives after its bucket was rolled is merged into the bucket (min, max, mean,
count stay right); one older than a tier's retention is dropped from that tier.
Maintenance (rolling up, expiring) goes in slices of at most a few minutes of data per step,
so catching up after the daemon was down is many short steps, never one long stall.

Size, measured by benchmarks/bench_history.py (8 GPUs x 15 metrics at 1 Hz for a simulated
week, 72.6 million points through add and flush, time injected): 189.8 MiB (199 MB) for 8 GPUs
a week, 23.7 MiB (24.9 MB) per GPU-week: raw 52.7 MiB (6 hours), 10 s buckets 100.5 MiB
(3 days), 1 min buckets 36.4 MiB (7 days). In the steady state (15 days of 1 min buckets)
about 231 MiB. The same points as JSON lines would take 7.0 GiB.
Hard cap: `max_bytes` (default 512 MiB of used pages). Above it the oldest hour of the 1 min
tier is dropped (then of the 10 s tier, then raw) every step until the store is under the cap
again; pages freed in bulk go back to the file system by incremental vacuum.

Durability: WAL with synchronous=NORMAL: every committed flush survives the daemon being
killed (a power loss may lose the last commits, never the file's consistency). Only a file
that is truly damaged (not a database, or failing `PRAGMA quick_check`) is renamed aside with a
timestamp (history.sqlite.corrupt-20250101T120000, its -wal and -shm with it) and a fresh store
started: one log line, and `detail()` (the service's status) says so, the reason in one line.
A store that another process holds locked (a write lock kept for longer than LOCK_TIMEOUT_S,
a sqlite3 shell left in a transaction) or that cannot be opened for now keeps its history:
opening or writing raises, and the history service tries again with backoff until it can.
Points added meanwhile wait in the buffer (up to MAX_BUFFERED_POINTS) and are written then.
Needs SQLite 3.8.2+ for WITHOUT ROWID (older: plain tables, larger); no newer SQL is used.
"""

import json
import logging
import math
import os
import sqlite3
import threading
import time

from ..core import paths
from .query import HistoryReader, HistoryUnavailable
from .upkeep import Upkeep
from ..core.services import Service

log = logging.getLogger("specdeck.history")

FILE_NAME = "history.sqlite"
LOCK_TIMEOUT_S = 3.0  # a write lock held longer than this by another process: this try gives up
MAX_BUFFERED_POINTS = 1_000_000  # while the store cannot be written, the oldest are dropped beyond this
MAX_BYTES = 512 << 20


class Tier:
    """One resolution of the store: its table, bucket width (0: raw points) and retention."""

    def __init__(self, name, table, bucket_s, retention_s, slice_s):
        self.name, self.table, self.bucket_s, self.retention_s = name, table, bucket_s, retention_s
        self.slice_s = slice_s  # how much time one maintenance slice rolls or expires
        self.time_column, self.scale = ("t_ms", 1000) if bucket_s == 0 else ("t_s", 1)


def default_tiers(raw_s=6 * 3600, ten_seconds_s=3 * 86400, one_minute_s=15 * 86400):
    return (Tier("raw", "raw", 0, raw_s, 300), Tier("10s", "buckets_10s", 10, ten_seconds_s, 600),
            Tier("1m", "buckets_1m", 60, one_minute_s, 3600))


SCHEMA = """
CREATE TABLE IF NOT EXISTS series (id INTEGER PRIMARY KEY, source TEXT NOT NULL, name TEXT NOT NULL,
    labels TEXT NOT NULL, first_ms INTEGER NOT NULL, last_ms INTEGER NOT NULL, last_value REAL,
    UNIQUE (source, name, labels));
CREATE TABLE IF NOT EXISTS raw (series_id INTEGER NOT NULL, t_ms INTEGER NOT NULL, value REAL NOT NULL,
    PRIMARY KEY (series_id, t_ms)) {without_rowid};
CREATE TABLE IF NOT EXISTS buckets_10s (series_id INTEGER NOT NULL, t_s INTEGER NOT NULL, min_value REAL,
    mean_value REAL, max_value REAL, count INTEGER, PRIMARY KEY (series_id, t_s)) {without_rowid};
CREATE TABLE IF NOT EXISTS buckets_1m (series_id INTEGER NOT NULL, t_s INTEGER NOT NULL, min_value REAL,
    mean_value REAL, max_value REAL, count INTEGER, PRIMARY KEY (series_id, t_s)) {without_rowid};
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value);
""".format(without_rowid="WITHOUT ROWID" if sqlite3.sqlite_version_info >= (3, 8, 2) else "")

def default_path():
    return os.path.join(paths.state_dir(), FILE_NAME)


class StoreUnavailable(sqlite3.OperationalError):
    """The store cannot be opened now (another process holds it locked): not damaged, kept."""


class FailedCheck(sqlite3.DatabaseError):
    """PRAGMA quick_check found the file damaged."""


def is_corrupt(exc):
    """Whether an error opening the store means the file itself is damaged. SQLite's "not a
    database" and "malformed" (SQLITE_NOTADB, SQLITE_CORRUPT) come as a plain DatabaseError;
    locked, busy, cannot open, I/O and read-only errors as OperationalError: those pass."""
    return isinstance(exc, FailedCheck) or type(exc) is sqlite3.DatabaseError


def check_summary(rows):
    """quick_check's answer (a row may hold dozens of lines) as one line: the first problem and a count."""
    problems = [line.strip() for row in rows for line in str(row).splitlines()
                if line.strip() and not line.startswith("*** in database")]
    more = " (and %d more)" % (len(problems) - 1) if len(problems) > 1 else ""
    return "quick_check: %s%s" % (problems[0] if problems else "failed", more)


def one_line(exc):
    return " ".join(str(exc).split())


def canonical_labels(labels):
    """Labels as the series table keeps them: JSON, keys sorted, values strings ({"gpu": 0} is {"gpu": "0"})."""
    return json.dumps({str(k): str(v) for k, v in (labels or {}).items()}, sort_keys=True, separators=(",", ":"))


class HistoryStore(Upkeep):
    """The history file: its writer (one thread, the history service's), the buffer samplers
    fill, and the read side (`query`, `latest`, `series`, `status`: history_query.py)."""

    def __init__(self, path=None, tiers=None, max_bytes=MAX_BYTES, clock=time.time):
        self.path = path or default_path()
        self.tiers = tiers or default_tiers()
        self.max_bytes = max_bytes
        self.clock = clock
        self.recovered = None  # {reason, kept_as, at} once a bad file was moved aside
        self.dropped_points = 0
        self.flushed_points = 0
        self.last_flush_at = None
        self.generation = 0  # grows at each open: readers of an older file are thrown away
        self._buffer = []
        self._labels_cache = {}
        self._buffer_lock = threading.Lock()
        self._conn = None
        self._ids = {}  # (source, name, labels json) -> series id
        self._marks = {}  # meta: rolled_<tier> (s), kept_<tier> (s)
        self._first_known = {}  # tier name -> a time (s) at or before its first point
        self._reader = HistoryReader(self)
        self.query, self.latest, self.series, self.status = (self._reader.query, self._reader.latest,
                                                             self._reader.series, self._reader.status)

    # ------------------------------------------------------------------ samplers' side

    def add(self, source, name, labels, value, time=None):
        """Buffer one point (time: s since the epoch, default now). Non-finite values are skipped."""
        self.add_many([(source, name, labels, value, time)])

    def add_many(self, points):
        """Buffer points given as (source, name, labels, value[, time]) tuples."""
        now = self.clock()
        labels_json, rows = self._labels_json, []
        for point in points:
            value = float(point[3])
            if value - value != 0.0:  # nan or infinite
                continue
            at = point[4] if len(point) > 4 and point[4] is not None else now
            rows.append(((point[0], point[1], labels_json(point[2])), int(at * 1000 + 0.5), value))
        with self._buffer_lock:
            self._buffer.extend(rows)
            self._trim_buffer()

    def _labels_json(self, labels):
        """canonical_labels, remembered: samplers pass the same few label sets every second."""
        try:
            key = frozenset(labels.items()) if labels else None
            text = self._labels_cache.get(key)
        except TypeError:  # an unhashable label value
            return canonical_labels(labels)
        if text is None:
            if len(self._labels_cache) > 10000:
                self._labels_cache.clear()
            text = self._labels_cache[key] = canonical_labels(labels)
        return text

    def buffered(self):
        return len(self._buffer)

    def _trim_buffer(self):
        excess = len(self._buffer) - MAX_BUFFERED_POINTS
        if excess > 0:
            del self._buffer[:excess]
            self.dropped_points += excess

    # ------------------------------------------------------------------ opening, recovery

    def open(self):
        """Open (or create) the file; a corrupt one is moved aside for a fresh store. A locked
        one (or one that cannot be opened now) raises StoreUnavailable: its history is kept."""
        try:
            self._conn = self._connect()
        except sqlite3.DatabaseError as exc:
            if not is_corrupt(exc):
                locked = "locked" in str(exc) or "busy" in str(exc)
                raise StoreUnavailable("history store %s %s (%s); its history is kept, trying again" % (
                    self.path, "is locked by another process" if locked else "cannot be opened now", one_line(exc)))
            reason = "is not a usable database (%s)" % one_line(exc)
            kept_as = self._move_aside("corrupt")
            self._conn = self._connect()
            log.warning("history store %s %s; kept it as %s and started a fresh store", self.path, reason, kept_as)
            self.recovered = {"reason": reason, "kept_as": kept_as, "at": time.time()}
        self._first_known = {}
        self.generation += 1
        return self

    def _connect(self):
        fresh = not os.path.exists(self.path) or os.path.getsize(self.path) == 0
        conn = sqlite3.connect(self.path, timeout=LOCK_TIMEOUT_S, isolation_level=None, check_same_thread=False)
        try:
            if fresh:
                conn.execute("PRAGMA auto_vacuum = INCREMENTAL")  # before the first table, or never
            conn.execute("PRAGMA journal_mode = WAL").fetchall()
            check = [row[0] for row in conn.execute("PRAGMA quick_check").fetchall()]
            if check != ["ok"]:
                raise FailedCheck(check_summary(check))
            conn.execute("PRAGMA synchronous = NORMAL")
            conn.execute("PRAGMA journal_size_limit = %d" % (32 << 20))
            conn.execute("BEGIN IMMEDIATE")  # proves we can write: a lock held elsewhere shows here
            conn.executescript(SCHEMA)  # commits
            self._marks = {key: value for key, value in conn.execute("SELECT key, value FROM meta")}
            self._ids = {(s, n, l): i for i, s, n, l in conn.execute("SELECT id, source, name, labels FROM series")}
        except BaseException:
            conn.close()
            raise
        return conn

    def _move_aside(self, why):
        stamp = time.strftime("%Y%m%dT%H%M%S")
        kept_as, number = "%s.%s-%s" % (self.path, why, stamp), 1
        while os.path.exists(kept_as):
            number += 1
            kept_as = "%s.%s-%s-%d" % (self.path, why, stamp, number)
        # A process that still holds the old file keeps it (rename moves no data); its WAL and
        # shared-memory files go with it so the fresh store starts without them.
        for suffix in ("", "-wal", "-shm"):
            if os.path.exists(self.path + suffix):
                os.replace(self.path + suffix, kept_as + suffix)
        return kept_as

    def close(self):
        """Flush what is buffered (kept for later if that fails) and close."""
        if self._conn is None:
            return
        try:
            self.flush()
        except sqlite3.Error as exc:
            log.warning("history store: %d points not flushed at close: %s", len(self._buffer), exc)
        finally:
            conn, self._conn = self._conn, None
            conn.close()
            self._reader.close()

    def is_open(self):
        return self._conn is not None

    def connection(self):
        if self._conn is None:
            raise HistoryUnavailable("the history store is not open")
        return self._conn

    # ------------------------------------------------------------------ writing

    def flush(self):
        """Write the buffer in one transaction. Returns the number of points written."""
        conn = self.connection()
        with self._buffer_lock:
            batch, self._buffer = self._buffer, []
        if not batch:
            return 0
        new_ids = {}
        try:
            conn.execute("BEGIN IMMEDIATE")
            self._write(conn, batch, new_ids)
            conn.execute("COMMIT")
        except BaseException:
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            with self._buffer_lock:  # kept for the next try, in order
                self._buffer[:0] = batch
                self._trim_buffer()
            raise
        self._ids.update(new_ids)
        self.flushed_points += len(batch)
        self.last_flush_at = time.time()
        return len(batch)

    def _write(self, conn, batch, new_ids):
        kept_raw_ms = self._marks.get("kept_raw", -math.inf) * 1000
        rolled_ms = self._marks.get("rolled_10s", -math.inf) * 1000
        ids, rows, spans = self._ids, [], {}
        for key, t_ms, value in batch:
            series_id = ids.get(key) or new_ids.get(key)
            if series_id is None:
                series_id = conn.execute("INSERT INTO series (source, name, labels, first_ms, last_ms) VALUES (?, ?, ?, ?, ?)",
                                         key + (t_ms, t_ms)).lastrowid
                new_ids[key] = series_id
            rows.append((series_id, t_ms, value))
            span = spans.get(series_id)
            if span is None:
                spans[series_id] = [t_ms, t_ms, value]
            elif t_ms >= span[1]:  # samplers add in time order: the usual case
                span[1], span[2] = t_ms, value
            elif t_ms < span[0]:
                span[0] = t_ms
        lowest_ms = min(span[0] for span in spans.values())
        raw_rows = rows if lowest_ms >= kept_raw_ms else [row for row in rows if row[1] >= kept_raw_ms]
        conn.executemany("INSERT OR REPLACE INTO raw VALUES (?, ?, ?)", raw_rows)
        if self._first_known.get("raw") is not None:
            self._first_known["raw"] = min(self._first_known["raw"], lowest_ms / 1000.0)
        conn.executemany(
            "UPDATE series SET first_ms = min(first_ms, ?), last_value = CASE WHEN ? >= last_ms THEN ? ELSE last_value END, "
            "last_ms = max(last_ms, ?) WHERE id = ?", [(first, last, value, last, sid) for sid, (first, last, value) in spans.items()])
        if lowest_ms < rolled_ms:
            for row in rows:
                if row[1] < rolled_ms:
                    self._merge_late(conn, *row)

    def _merge_late(self, conn, series_id, t_ms, value):
        """A point for buckets already rolled up: fold it into them, as the roll-up would have."""
        for tier in self.tiers[1:]:
            rolled = self._marks.get("rolled_" + tier.name)
            start_s = (t_ms // 1000) // tier.bucket_s * tier.bucket_s
            if rolled is None or start_s >= rolled or start_s < self._marks.get("kept_" + tier.name, -math.inf):
                continue
            row = conn.execute("SELECT min_value, mean_value, max_value, count FROM %s WHERE series_id = ? AND t_s = ?" % tier.table,
                               (series_id, start_s)).fetchone()
            low, mean, high, count = row or (value, value, value, 0)
            if self._first_known.get(tier.name) is not None:
                self._first_known[tier.name] = min(self._first_known[tier.name], start_s)
            conn.execute("INSERT OR REPLACE INTO %s VALUES (?, ?, ?, ?, ?, ?)" % tier.table,
                         (series_id, start_s, min(low, value), (mean * count + value) / (count + 1), max(high, value), count + 1))

    def _set_mark(self, conn, key, value):
        self._marks[key] = value
        conn.execute("INSERT OR REPLACE INTO meta VALUES (?, ?)", (key, value))

    def marks(self):
        return dict(self._marks)

    def detail(self):
        """What the service's status shows: the file, the buffer, and a recovery if one happened."""
        detail = {"path": self.path, "file_bytes": _size(self.path) + _size(self.path + "-wal"), "max_bytes": self.max_bytes,
                  "series": len(self._ids), "buffered_points": len(self._buffer), "flushed_points": self.flushed_points,
                  "dropped_points": self.dropped_points, "last_flush_at": self.last_flush_at}
        if self.recovered:
            detail["recovered"] = dict(self.recovered)
        return detail


def _size(path):
    try:
        return os.path.getsize(path)
    except OSError:
        return 0


class HistoryService(Service):
    """The daemon's history: `daemon.history`. Samplers call `daemon.history.add(...)` (or
    `add_many`) from any thread; this service writes on its own thread."""

    name = "history"
    interval_s = 1.0

    def __init__(self, path=None, **store_options):
        self.store = HistoryStore(path, **store_options)
        self.add, self.add_many = self.store.add, self.store.add_many

    def start(self):
        self.store.open()

    def step(self):
        self.store.flush()
        self.store.maintain_for()

    def stop(self):
        self.store.close()

    def detail(self):
        return self.store.detail()
