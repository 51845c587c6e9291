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

Size (measured with 1 GPU x 15 metrics for a simulated week, every row a 1 Hz week leaves;
the full 8-GPU figure comes from benchmarks/bench_history.py): 20.3 MB per GPU-week, so about
162 MB for 8 GPUs a week.
Hard cap: `max_bytes` (default 512 MiB of used pages). Above it the oldest hour of the 1 min
tier is dropped (then of the 10 s tier, then raw) every step until the store is under the cap
again; pages freed in bulk go back to the file system by incremental vacuum.

Durability: WAL with synchronous=NORMAL: every committed flush survives the daemon being
killed (a power loss may lose the last second). A file that is not a database, fails
`PRAGMA quick_check`, or is locked by another process is renamed aside with a timestamp
(history.sqlite.corrupt-20250101T120000) and a fresh store started: one log line, and
`detail()` (the service's status) says so.
"""

import json
import logging
import math
import os
import sqlite3
import threading
import time

from . import paths
from .history_query import HistoryReader, HistoryUnavailable
from .services import Service

log = logging.getLogger("specdeck.history")

FILE_NAME = "history.sqlite"
LOCK_TIMEOUT_S = 3.0  # a write lock held longer than this by another process: the store is locked
MAX_BUFFERED_POINTS = 1_000_000  # while the store cannot be written, the oldest are dropped beyond this
MAX_BYTES = 512 << 20
ROLL_GRACE_S = 5.0  # a bucket is rolled up this long after it ends: samplers add late by < 1 s
MAINTENANCE_BUDGET_S = 0.2  # per service step


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

ROLL_FROM_RAW = ("INSERT OR REPLACE INTO {table} SELECT series_id, (t_ms / {width_ms}) * {width}, min(value), avg(value), "
                 "max(value), count(*) FROM raw WHERE series_id = ? AND t_ms >= ? AND t_ms < ? GROUP BY t_ms / {width_ms}")
ROLL_FROM_BUCKETS = ("INSERT OR REPLACE INTO {table} SELECT series_id, (t_s / {width}) * {width}, min(min_value), "
                     "sum(mean_value * count) / sum(count), max(max_value), sum(count) FROM {source} "
                     "WHERE series_id = ? AND t_s >= ? AND t_s < ? GROUP BY t_s / {width}")


def default_path():
    return os.path.join(paths.state_dir(), FILE_NAME)


def canonical_labels(labels):
    """Labels as the series table keeps them: JSON, keys sorted, values strings ({"gpu": 0} is {"gpu": "0"})."""
    return json.dumps({str(k): str(v) for k, v in (labels or {}).items()}, sort_keys=True, separators=(",", ":"))


class HistoryStore:
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
        """Open (or create) the file; a corrupt or locked one is moved aside for a fresh store."""
        try:
            self._conn = self._connect()
        except sqlite3.DatabaseError as exc:
            locked = "locked" in str(exc) or "busy" in str(exc)
            reason = "is locked by another process" if locked else "is not a usable database (%s)" % exc
            kept_as = self._move_aside("locked" if locked else "corrupt")
            log.warning("history store %s %s; kept it as %s and started a fresh store", self.path, reason, kept_as)
            self.recovered = {"reason": reason, "kept_as": kept_as, "at": time.time()}
            self._conn = self._connect()
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
                raise sqlite3.DatabaseError("quick_check: " + "; ".join(map(str, check[:3])))
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

    # ------------------------------------------------------------------ maintenance

    def maintain(self, now=None):
        """One slice of each kind of maintenance, each in its own short transaction.
        Returns True when more is waiting (the next call goes on)."""
        now = self.clock() if now is None else now
        conn = self.connection()
        more = False
        for index in range(1, len(self.tiers)):
            more |= self._in_transaction(conn, self._roll_up, index, now)
        for index in range(len(self.tiers)):
            more |= self._in_transaction(conn, self._expire, index, now)
        more |= self._in_transaction(conn, self._enforce_cap)
        return more

    def maintain_for(self, budget_s=MAINTENANCE_BUDGET_S, now=None):
        """Slices of maintenance until none is waiting or `budget_s` is spent."""
        deadline = time.monotonic() + budget_s
        while self.maintain(now) and time.monotonic() < deadline:
            pass

    def _in_transaction(self, conn, work, *args):
        conn.execute("BEGIN IMMEDIATE")
        try:
            more = work(conn, *args)
            conn.execute("COMMIT")
            return more
        except BaseException:
            conn.execute("ROLLBACK")
            raise

    def _roll_up(self, conn, index, now):
        """Roll the next slice of the finer tier into the buckets of tier `index`."""
        tier, finer = self.tiers[index], self.tiers[index - 1]
        width = tier.bucket_s
        if finer.bucket_s == 0:
            ready = math.floor((now - ROLL_GRACE_S) / width) * width
        elif "rolled_" + finer.name in self._marks:
            ready = self._marks["rolled_" + finer.name] // width * width
        else:
            return False
        start = self._marks.get("rolled_" + tier.name)
        if start is None:
            first = self._first_time(conn, finer, None)
            if first is None:
                return False
            start = int(first // width * width)
        if start >= ready:
            return False
        end = min(ready, start + tier.slice_s)
        ids = self._series_between(conn, start, None)
        if finer.bucket_s == 0:
            sql = ROLL_FROM_RAW.format(table=tier.table, width=width, width_ms=width * 1000)
        else:
            sql = ROLL_FROM_BUCKETS.format(table=tier.table, source=finer.table, width=width)
        conn.executemany(sql, [(i, start * finer.scale, end * finer.scale) for i in ids])
        if end < ready:  # skip a stretch with no data (the daemon was down) in one go
            following = self._first_time(conn, finer, end, ids)
            end = ready if following is None else max(end, min(ready, int(following // width * width)))
        self._set_mark(conn, "rolled_" + tier.name, end)
        return end < ready

    def _expire(self, conn, index, now, cutoff=None):
        """Delete the next slice of tier `index` older than its retention (or than `cutoff`),
        never past what the next tier has rolled up."""
        tier = self.tiers[index]
        if cutoff is None:
            cutoff = math.floor((now - tier.retention_s) / 60) * 60
        if index + 1 < len(self.tiers):
            cutoff = min(cutoff, self._marks.get("rolled_" + self.tiers[index + 1].name, -math.inf))
        start = self._marks.get("kept_" + tier.name)
        if start is None:
            # Until a tier first expires, where its data begins is a lower bound kept in memory
            # (writes older than it lower it), not a scan every step.
            first = self._first_known.get(tier.name)
            if first is None:
                first = self._first_known[tier.name] = self._first_time(conn, tier, None)
            if first is None or first >= cutoff:
                return False
            start = int(first // 60 * 60)
        if start >= cutoff:
            return False
        end = int(min(cutoff, start + tier.slice_s))
        ids = self._series_between(conn, None, end)
        conn.executemany("DELETE FROM %s WHERE series_id = ? AND %s < ?" % (tier.table, tier.time_column),
                         [(i, end * tier.scale) for i in ids])
        if end < cutoff:
            following = self._first_time(conn, tier, end, ids)
            end = int(cutoff if following is None else max(end, min(cutoff, following // 60 * 60)))
        self._set_mark(conn, "kept_" + tier.name, end)
        kept = [self._marks.get("kept_" + t.name) for t in self.tiers]
        if None not in kept:  # series with nothing left in any tier
            gone = [i for (i,) in conn.execute("SELECT id FROM series WHERE last_ms < ?", (min(kept) * 1000,))]
            if gone:
                conn.executemany("DELETE FROM series WHERE id = ?", [(i,) for i in gone])
                gone = set(gone)
                self._ids = {key: i for key, i in self._ids.items() if i not in gone}
        return end < cutoff

    def _enforce_cap(self, conn):
        """Over `max_bytes`: drop the oldest hour of the coarsest tier that has more than a day
        (else of the finest with more than an hour), then give free pages back."""
        page_size, pages, free = (conn.execute("PRAGMA " + p).fetchone()[0] for p in ("page_size", "page_count", "freelist_count"))
        if free > max(64, pages // 8):
            conn.execute("PRAGMA incremental_vacuum(1024)").fetchall()
        if (pages - free) * page_size <= self.max_bytes:
            return False
        for index in reversed(range(len(self.tiers))):
            tier = self.tiers[index]
            first = self._marks.get("kept_" + tier.name) or self._first_time(conn, tier, None)
            last = self._marks.get("rolled_" + tier.name, self.clock()) if index else self.clock()
            if first is not None and last - first > (86400 if index else 3600):
                log.info("history store over its %d-byte cap: dropping an hour of %s", self.max_bytes, tier.name)
                self._expire(conn, index, None, cutoff=int(first // 60 * 60) + 3600)
                return True
        return False

    def _series_between(self, conn, start_s, end_s):
        """Ids of the series with points at or after start_s (by last_ms) or before end_s (by first_ms)."""
        if start_s is not None:
            return [i for (i,) in conn.execute("SELECT id FROM series WHERE last_ms >= ?", (start_s * 1000,))]
        return [i for (i,) in conn.execute("SELECT id FROM series WHERE first_ms < ?", (end_s * 1000,))]

    def _first_time(self, conn, tier, after_s, ids=None):
        """The earliest time (s) in `tier` at or after `after_s`, one index seek per series."""
        if ids is None:
            ids = [i for (i,) in conn.execute("SELECT id FROM series")]
        sql = "SELECT min(%s) FROM %s WHERE series_id = ? AND %s >= ?" % (tier.time_column, tier.table, tier.time_column)
        low = -(1 << 62) if after_s is None else after_s * tier.scale
        times = [row[0] for row in (conn.execute(sql, (i, low)).fetchone() for i in ids) if row[0] is not None]
        return min(times) / tier.scale if times else None

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
