"""Upkeep of the history store (history.py): rolling raw points up into 10 s and 1 min buckets,
expiring what is older than each tier keeps, and holding the file under its cap. Each step does
a slice of each, in one short transaction on the writer's connection, so catching up after the
daemon was down is many short steps rather than one long stall.

Marks in the meta table say how far each has gone: `rolled_<tier>` (s): every bucket before it
is complete; `kept_<tier>` (s): nothing before it is kept. Readers use the same marks to know
which tier holds which part of a window.
"""

import logging
import math
import time

log = logging.getLogger("specdeck.history")

ROLL_GRACE_S = 5.0  # a bucket is rolled up this long after it ends: samplers add late by < 1 s
MAINTENANCE_BUDGET_S = 0.2  # per service step

ROLL_FROM_RAW = ("INSERT OR REPLACE INTO {table} SELECT series_id, (t_ms / {width_ms}) * {width}, min(value), avg(value), "
                 "max(value), count(*) FROM raw WHERE series_id = ? AND t_ms >= ? AND t_ms < ? GROUP BY t_ms / {width_ms}")
ROLL_FROM_BUCKETS = ("INSERT OR REPLACE INTO {table} SELECT series_id, (t_s / {width}) * {width}, min(min_value), "
                     "sum(mean_value * count) / sum(count), max(max_value), sum(count) FROM {source} "
                     "WHERE series_id = ? AND t_s >= ? AND t_s < ? GROUP BY t_s / {width}")



class Upkeep:
    """Maintenance of a HistoryStore (mixed into it): needs `connection()`, `tiers`, `clock`,
    `max_bytes`, `_marks`, `_set_mark`, `_ids` and `_first_known`."""

    def maintain(self, now=None):
        """One slice of each kind of maintenance, in one short transaction.
        Returns True when more is waiting (the next call goes on)."""
        now = self.clock() if now is None else now
        conn = self.connection()
        marks, first_known = dict(self._marks), dict(self._first_known)
        conn.execute("BEGIN IMMEDIATE")
        try:
            more = False
            for index in range(1, len(self.tiers)):
                more |= self._roll_up(conn, index, now)
            for index in range(len(self.tiers)):
                more |= self._expire(conn, index, now)
            more |= self._enforce_cap(conn)
            conn.execute("COMMIT")
            return more
        except BaseException:
            conn.execute("ROLLBACK")
            self._marks, self._first_known = marks, first_known  # as the file has them
            raise

    def maintain_for(self, budget_s=MAINTENANCE_BUDGET_S, now=None):
        """Slices of maintenance until none is waiting or `budget_s` is spent."""
        deadline = time.monotonic() + budget_s
        while self.maintain(now) and time.monotonic() < deadline:
            pass

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

