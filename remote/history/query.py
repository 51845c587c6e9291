"""Reading the history store (history.py): windows of series at a resolution, the latest values,
what is recorded and how big it is. Runs on request threads, each read on a connection of its
own from a small pool (sqlite3 connections are not shared between threads; WAL lets readers run
beside the writer), inside one read transaction so a window never straddles a roll-up.

A query takes its points from the coarsest tier whose buckets are no wider than the resolution
asked for, and fills the rest of the window from the other tiers: newer than that tier has
rolled up from the finer ones, older than it keeps from the coarser ones. Points are grouped to
the resolution in SQL, and a group cut by a seam between tiers is merged, so a window across
tiers has neither a hole nor a double point.
"""

import json
import math
import os
import sqlite3
import threading
import time

from ..core.protocol import Busy

DEFAULT_POINTS = 500  # per series, when no resolution is asked for
MAX_POINTS_PER_SERIES = 5000
MAX_POINTS_PER_REPLY = 100_000  # ~60 bytes each as JSON: far under the 16 MiB frame
READERS_KEPT = 4

RAW_GROUPS = ("SELECT (t_ms / :res) * :res AS g, min(value), avg(value), max(value), count(*) FROM raw "
              "WHERE series_id = :id AND t_ms >= :lo AND t_ms < :hi GROUP BY g ORDER BY g")
BUCKET_GROUPS = ("SELECT (t_s * 1000 / :res) * :res AS g, min(min_value), sum(mean_value * count) / sum(count), "
                 "max(max_value), sum(count) FROM {table} WHERE series_id = :id AND t_s >= :lo AND t_s < :hi GROUP BY g ORDER BY g")


class HistoryUnavailable(Busy):
    """The store is not open (the service is starting, or recovering from a failure): a Busy
    reply to whoever asked, so every reader of the store (the feeds too) answers it alike."""

    def __init__(self, message):
        super().__init__("%s; try again" % message)


class HistoryReader:
    """Read side of a HistoryStore: `query`, `latest`, `series`, `status`."""

    def __init__(self, store):
        self.store = store
        self._pool = []  # (generation, connection)
        self._lock = threading.Lock()

    def _read(self, work):
        """Run work(connection) in one read transaction on a pooled connection."""
        generation = self.store.generation
        if not self.store.is_open():
            raise HistoryUnavailable("the history store is not open yet (see the history service's status)")
        with self._lock:
            while self._pool and self._pool[-1][0] != generation:
                self._pool.pop()[1].close()
            conn = self._pool.pop()[1] if self._pool else None
        if conn is None:
            conn = sqlite3.connect(self.store.path, timeout=10.0, isolation_level=None, check_same_thread=False)
            conn.execute("PRAGMA query_only = 1")
        reusable = False
        try:
            conn.execute("BEGIN")
            try:
                result = work(conn)
            finally:
                conn.execute("COMMIT")
            reusable = True
            return result
        finally:
            with self._lock:
                if reusable and len(self._pool) < READERS_KEPT and generation == self.store.generation:
                    self._pool.append((generation, conn))
                    conn = None
            if conn is not None:
                conn.close()

    def close(self):
        with self._lock:
            for _, conn in self._pool:
                conn.close()
            self._pool = []

    # ------------------------------------------------------------------ queries

    def query(self, source, name, labels=None, start=None, end=None, resolution_s=None):
        """Per matching series {labels, points: [[t, min, mean, max], ...]} over [start, end)
        (s since the epoch; default the last hour), grouped to `resolution_s` (widened so a
        series has at most 5,000 points and a reply at most 100,000). Returns (series, resolution_s)."""
        end = self.store.clock() if end is None else float(end)
        start = end - 3600.0 if start is None else float(start)
        if end <= start:
            return [], resolution_s or 0.0

        def read(conn):
            found = _matching(conn, source, name, labels)
            span = end - start
            resolution = max(resolution_s or span / DEFAULT_POINTS, span / MAX_POINTS_PER_SERIES,
                             span * max(1, len(found)) / MAX_POINTS_PER_REPLY, 0.001)
            chosen = max(i for i, tier in enumerate(self.store.tiers) if tier.bucket_s <= resolution)
            width = self.store.tiers[chosen].bucket_s
            if width:
                resolution = math.ceil(resolution / width - 1e-9) * width
            resolution_ms = max(1, int(round(resolution * 1000)))
            segments = self._segments(_marks(conn), chosen, start, end)
            result = []
            for series_id, series_labels in found:
                rows = []
                for index, low, high in segments:
                    rows.extend(self._groups(conn, index, series_id, low, high, resolution_ms))
                result.append({"labels": json.loads(series_labels), "points": _merge(rows)})
            return result, resolution_ms / 1000.0

        return self._read(read)

    def _segments(self, marks, chosen, start, end):
        """[(tier index, from s, to s)] covering [start, end): the chosen tier where it has data,
        finer tiers for what it has not rolled up yet, coarser ones for what it no longer keeps."""
        tiers = self.store.tiers
        low = [marks.get("kept_" + t.name, -math.inf) for t in tiers]
        high = [marks.get("rolled_" + t.name, -math.inf) for t in tiers]
        low[-1], high[0] = -math.inf, math.inf  # the coarsest keeps the oldest, raw the newest
        spans = [(chosen, low[chosen], high[chosen])]
        spans += [(j, high[j + 1], high[j]) for j in range(chosen - 1, -1, -1)]
        spans += [(j, low[j], low[j - 1]) for j in range(chosen + 1, len(tiers))]
        segments = []
        for index, span_low, span_high in spans:
            low_s, high_s = max(start, span_low), min(end, span_high)
            if low_s < high_s:
                segments.append((index, low_s, high_s))
        return sorted(segments, key=lambda segment: segment[1])

    def _groups(self, conn, index, series_id, low_s, high_s, resolution_ms):
        tier = self.store.tiers[index]
        if tier.bucket_s == 0:
            args = {"res": resolution_ms, "id": series_id, "lo": int(math.ceil(low_s * 1000)), "hi": int(math.ceil(high_s * 1000))}
            return conn.execute(RAW_GROUPS, args).fetchall()
        width = tier.bucket_s
        # The bucket that holds the window's start counts; seams fall on bucket edges already.
        args = {"res": resolution_ms, "id": series_id, "lo": int(low_s // width * width), "hi": int(math.ceil(high_s))}
        return conn.execute(BUCKET_GROUPS.format(table=tier.table), args).fetchall()

    def latest(self, source, name=None):
        """[{name, labels, time, value}] the last value committed of each series of `source`."""
        sql, args = "SELECT name, labels, last_ms, last_value FROM series WHERE source = ?", [source]
        if name is not None:
            sql, args = sql + " AND name = ?", args + [name]

        def read(conn):
            rows = conn.execute(sql + " ORDER BY name, labels", args).fetchall()
            return [{"name": n, "labels": json.loads(l), "time": t / 1000.0, "value": v} for n, l, t, v in rows]

        return self._read(read)

    def series(self, source=None):
        """[{source, name, labels, first, last, points: {tier: count}}] of every series recorded."""
        sql, args = "SELECT id, source, name, labels, first_ms, last_ms FROM series", ()
        if source is not None:
            sql, args = sql + " WHERE source = ?", (source,)

        def read(conn):
            rows = conn.execute(sql + " ORDER BY source, name, labels", args).fetchall()
            counts = {t.name: dict(_counts(conn, t.table, None if source is None else [r[0] for r in rows])) for t in self.store.tiers}
            return [{"source": s, "name": n, "labels": json.loads(l), "first": first / 1000.0, "last": last / 1000.0,
                     "points": {tier: counts[tier].get(i, 0) for tier in counts}}
                    for i, s, n, l, first, last in rows]

        return self._read(read)

    def status(self):
        """The file, its bound, and per tier: bucket width, retention, points, and the time span kept."""
        store = self.store

        def read(conn):
            marks = _marks(conn)
            page_size, pages, free = (conn.execute("PRAGMA " + p).fetchone()[0] for p in ("page_size", "page_count", "freelist_count"))
            tiers = []
            for tier in store.tiers:
                points = conn.execute("SELECT count(*) FROM %s" % tier.table).fetchone()[0]
                tiers.append({"name": tier.name, "bucket_s": tier.bucket_s, "retention_s": tier.retention_s, "points": points,
                              "rolled_until": marks.get("rolled_" + tier.name), "kept_from": marks.get("kept_" + tier.name)})
            return {"path": store.path, "file_bytes": _size(store.path), "wal_bytes": _size(store.path + "-wal"),
                    "used_bytes": (pages - free) * page_size, "max_bytes": store.max_bytes,
                    "series": conn.execute("SELECT count(*) FROM series").fetchone()[0], "tiers": tiers,
                    "buffered_points": store.buffered(), "dropped_points": store.dropped_points, "recovered": store.recovered,
                    "time": time.time()}

        return self._read(read)


def _matching(conn, source, name, labels):
    """(id, labels json) of the series of source/name whose labels include `labels`."""
    wanted = {str(k): str(v) for k, v in (labels or {}).items()}
    rows = conn.execute("SELECT id, labels FROM series WHERE source = ? AND name = ? ORDER BY labels", (source, name)).fetchall()
    return [(i, l) for i, l in rows if all(json.loads(l).get(k) == v for k, v in wanted.items())]


def _marks(conn):
    return {key: value for key, value in conn.execute("SELECT key, value FROM meta")}


def _counts(conn, table, ids):
    if ids is None:
        return conn.execute("SELECT series_id, count(*) FROM %s GROUP BY series_id" % table).fetchall()
    return [(i, conn.execute("SELECT count(*) FROM %s WHERE series_id = ?" % table, (i,)).fetchone()[0]) for i in ids]


def _merge(rows):
    """Rows (group ms, min, mean, max, count) in time order to [t, min, mean, max], merging the
    two halves of a group that a seam between tiers cut."""
    points, counts = [], []
    for group_ms, low, mean, high, count in rows:
        t = group_ms / 1000.0
        if points and points[-1][0] == t:
            last, total = points[-1], counts[-1] + count
            last[1], last[3] = min(last[1], low), max(last[3], high)
            last[2] = (last[2] * counts[-1] + mean * count) / total
            counts[-1] = total
        else:
            points.append([t, low, mean, high])
            counts.append(count)
    return points


def _size(path):
    try:
        return os.path.getsize(path)
    except OSError:
        return 0
