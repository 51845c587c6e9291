"""A run's curves indexed by step: every record the sampler read, one row each, in a small SQLite
file in the job's directory (curves.sqlite), read back whole or in buckets of steps.

A row is keyed by the byte offset where its record starts in the log, so reading a stretch of
the log again (a daemon killed after writing rows, before saving how far it read) finds the
rows already there and leaves them as they are (INSERT OR IGNORE: a log only grows, the same
offset is the same record, and its time stays the one it was first given). Nothing is keyed by
time, so a burst of a million records read within a second keeps every one.

Reading: a run with no more steps than the points asked for comes whole, one entry per step
record in log order; a longer one in buckets of `width` consecutive step numbers, each with
the mean of its values, the min and max of loss and predicted accept length, its first and last
step, its count, and the per-position figures of its last record (those are for charts; what a run
logged first and last, and the times of its steps, are read as logged: logged_range, step_times).
Plain SQL that SQLite 3.7
runs (no window functions, no upsert).
"""

from array import array
import json
import math
import os
import sqlite3

FILE_NAME = "curves.sqlite"
STEP, VALIDATION = 0, 1
MAX_VALIDATION = 5000  # validation rows read back (the newest)

SCHEMA = """
CREATE TABLE IF NOT EXISTS records (offset INTEGER PRIMARY KEY, kind INTEGER NOT NULL, step INTEGER, epoch INTEGER,
    time REAL NOT NULL, loss REAL, loss_nan INTEGER NOT NULL, lr REAL, step_ms REAL, tokens_per_s REAL,
    predicted REAL, full_acc TEXT, cond_acc TEXT, loss_k TEXT);
CREATE INDEX IF NOT EXISTS records_step ON records (kind, step);
"""
COLUMNS = ("offset", "kind", "step", "epoch", "time", "loss", "loss_nan", "lr", "step_ms", "tokens_per_s", "predicted",
           "full_acc", "cond_acc", "loss_k")


def path_of(job_dir):
    return os.path.join(job_dir, FILE_NAME)


def _finite(value):
    return value if isinstance(value, (int, float)) and math.isfinite(value) else None


def _array(values):
    return json.dumps([v if math.isfinite(v) else None for v in values]) if values else None


class StepWriter:
    """The sampler's side: one connection per followed run, rows added in one transaction per read."""

    def __init__(self, job_dir):
        self.conn = sqlite3.connect(path_of(job_dir), isolation_level=None, check_same_thread=False)
        self.conn.execute("PRAGMA journal_mode = WAL").fetchall()
        self.conn.execute("PRAGMA synchronous = NORMAL")
        self.conn.executescript(SCHEMA)

    def add(self, stamped):
        """Write [(offset, public record, time)] (curves.public_record's form) in one transaction;
        rows already there are kept."""
        rows = []
        for offset, public, time_s in stamped:
            loss = public.get("loss")
            rows.append((offset, STEP if public["kind"] == "step" else VALIDATION, public.get("step"), public.get("epoch"),
                         time_s, _finite(loss), int(isinstance(loss, str)), _finite(public.get("lr")),
                         _finite(public.get("step_ms")), _finite(public.get("tokens_per_s")),
                         _finite(public.get("predicted_accept_length")), _array(public.get("full_acc")),
                         _array(public.get("cond_acc")), _array(public.get("loss_k"))))
        if not rows:
            return
        self.conn.execute("BEGIN")
        try:
            self.conn.executemany("INSERT OR IGNORE INTO records VALUES (%s)" % ", ".join("?" * len(COLUMNS)), rows)
            self.conn.execute("COMMIT")
        except BaseException:
            self.conn.execute("ROLLBACK")
            raise

    def validation_of(self, epoch):
        """The newest validation record of `epoch` (as training.curves gives it), or None."""
        return self._one("SELECT * FROM records WHERE kind = 1 AND epoch = ? ORDER BY offset DESC LIMIT 1", (epoch,),
                         _validation_entry)

    def validation_at(self, step):
        """The newest validation record at `step` (SpecForge's evaluations), or None."""
        return self._one("SELECT * FROM records WHERE kind = 1 AND step = ? ORDER BY offset DESC LIMIT 1", (step,),
                         _validation_entry)

    def step_at(self, step):
        """The step record of `step` (the newest, should the log repeat it), or None."""
        return self._one("SELECT * FROM records WHERE kind = 0 AND step = ? ORDER BY offset DESC LIMIT 1", (step,), _step_entry)

    def _one(self, query, args, entry):
        cursor = self.conn.cursor()
        cursor.row_factory = sqlite3.Row
        row = cursor.execute(query, args).fetchone()
        return entry(row) if row is not None else None

    def close(self):
        self.conn.close()


def exists(job_dir):
    return os.path.exists(path_of(job_dir))


def read(job_dir, points, start=None, end=None):
    """(steps, validation, bucket_steps, first NaN step or None) over the records stamped in
    [start, end] (None: no bound)."""
    conn = sqlite3.connect(path_of(job_dir), isolation_level=None)  # callers ask exists() first: connect would create it
    conn.row_factory = sqlite3.Row
    try:
        conn.execute("BEGIN")  # one snapshot for every query: the sampler writes meanwhile
        if conn.execute("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'records'").fetchone() is None:
            return [], [], 1, None  # the sampler has just created the file, not its table yet
        window = (" AND time >= :start" if start is not None else "") + (" AND time <= :end" if end is not None else "")
        args = {"start": start, "end": end}
        count, low, high = conn.execute("SELECT COUNT(*), MIN(step), MAX(step) FROM records WHERE kind = 0 AND step IS NOT NULL"
                                        + window, args).fetchone()
        if count <= points:
            width = 1
            rows = conn.execute("SELECT * FROM records WHERE kind = 0 AND step IS NOT NULL%s ORDER BY offset" % window, args)
            steps = [_step_entry(row) for row in rows]
        else:
            width = max(1, -(-(high - low + 1) // points))
            steps = _buckets(conn, window, dict(args, low=low, width=width))
        validation = [_validation_entry(row) for row in conn.execute(
            "SELECT * FROM (SELECT * FROM records WHERE kind = 1%s ORDER BY offset DESC LIMIT %d) ORDER BY offset" % (window, MAX_VALIDATION),
            args)]
        nan_step = conn.execute("SELECT step FROM records WHERE kind = 0 AND loss_nan = 1%s ORDER BY offset LIMIT 1" % window,
                                args).fetchone()
        return steps, validation, width, (nan_step[0] if nan_step else None)
    finally:
        conn.close()


def _positions(row):
    return {"full_acc": json.loads(row["full_acc"] or "[]"), "cond_acc": json.loads(row["cond_acc"] or "[]"),
            "loss_k": json.loads(row["loss_k"] or "[]")}


def _step_entry(row):
    entry = {"time": row["time"], "step": row["step"], "epoch": row["epoch"], "loss": "nan" if row["loss_nan"] else row["loss"],
             "lr": row["lr"], "step_ms": row["step_ms"], "tokens_per_s": row["tokens_per_s"], "predicted_accept_length": row["predicted"],
             "step_min": row["step"], "step_max": row["step"], "loss_min": row["loss"], "loss_max": row["loss"],
             "predicted_accept_length_min": row["predicted"], "predicted_accept_length_max": row["predicted"], "count": 1}
    entry.update(_positions(row))
    return entry


BUCKETS = """SELECT (step - :low) / :width AS bucket, MAX(offset) AS last, MIN(step) AS step_min, MAX(step) AS step_max,
    MAX(time) AS time, MAX(epoch) AS epoch, AVG(loss) AS loss, MIN(loss) AS loss_min, MAX(loss) AS loss_max,
    MAX(loss_nan) AS loss_nan, AVG(lr) AS lr, AVG(step_ms) AS step_ms, AVG(tokens_per_s) AS tokens_per_s,
    AVG(predicted) AS predicted, MIN(predicted) AS predicted_min, MAX(predicted) AS predicted_max, COUNT(*) AS count
    FROM records WHERE kind = 0 AND step IS NOT NULL{window} GROUP BY bucket ORDER BY bucket"""


def _buckets(conn, window, args):
    rows = conn.execute(BUCKETS.format(window=window), args).fetchall()
    # The per-position figures of each bucket's last record, in a few more queries.
    last = {}
    offsets = [row["last"] for row in rows]
    for chunk in range(0, len(offsets), 500):
        part = offsets[chunk:chunk + 500]
        for row in conn.execute("SELECT offset, full_acc, cond_acc, loss_k FROM records WHERE offset IN (%s)" % ",".join("?" * len(part)), part):
            last[row["offset"]] = _positions(row)
    steps = []
    for row in rows:
        loss = row["loss"]
        if loss is None and row["loss_nan"]:
            loss = "nan"
        entry = {"time": row["time"], "step": row["step_max"], "epoch": row["epoch"], "loss": loss, "lr": row["lr"],
                 "step_ms": row["step_ms"], "tokens_per_s": row["tokens_per_s"], "predicted_accept_length": row["predicted"],
                 "step_min": row["step_min"], "step_max": row["step_max"], "loss_min": row["loss_min"], "loss_max": row["loss_max"],
                 "predicted_accept_length_min": row["predicted_min"], "predicted_accept_length_max": row["predicted_max"],
                 "count": row["count"]}
        entry.update(last.get(row["last"]) or {"full_acc": [], "cond_acc": [], "loss_k": []})
        steps.append(entry)
    return steps


def _validation_entry(row):
    return {"time": row["time"], "epoch": row["epoch"], "step": row["step"], "loss": "nan" if row["loss_nan"] else row["loss"],
            "predicted_accept_length": row["predicted"], "full_acc": json.loads(row["full_acc"] or "[]"),
            "cond_acc": json.loads(row["cond_acc"] or "[]")}


def logged_range(job_dir, start=None, end=None):
    """The run's first and last step records stamped in [start, end], as they were logged (in
    log order; whole steps and the values printed, not a bucket's means): `{first: {step, loss,
    time}, last: {...}, count}`, or None when it logged no step there."""
    if not exists(job_dir):
        return None
    conn = sqlite3.connect(path_of(job_dir), isolation_level=None)
    conn.row_factory = sqlite3.Row
    try:
        conn.execute("BEGIN")
        if conn.execute("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'records'").fetchone() is None:
            return None
        window, args = _window(start, end)
        where = "kind = 0 AND step IS NOT NULL" + window
        count = conn.execute("SELECT COUNT(*) FROM records WHERE " + where, args).fetchone()[0]
        if not count:
            return None
        ends = [conn.execute("SELECT step, loss, loss_nan, time FROM records WHERE %s ORDER BY offset %s LIMIT 1" % (where, order),
                             args).fetchone() for order in ("ASC", "DESC")]
        first, last = ({"step": row["step"], "loss": "nan" if row["loss_nan"] else row["loss"], "time": row["time"]} for row in ends)
        return {"first": first, "last": last, "count": count}
    finally:
        conn.close()


def step_times(job_dir, start=None, end=None):
    """The times of the run's step records stamped in [start, end], in log order, with the last
    one stamped before `start` first (a gap that began before the window ends in it)."""
    if not exists(job_dir):
        return []
    conn = sqlite3.connect(path_of(job_dir), isolation_level=None)
    try:
        conn.execute("BEGIN")
        if conn.execute("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'records'").fetchone() is None:
            return []
        window, args = _window(start, end)
        times = array("d")
        if start is not None:
            before = conn.execute("SELECT time FROM records WHERE kind = 0 AND time < :start ORDER BY offset DESC LIMIT 1",
                                  args).fetchone()
            if before is not None:
                times.append(before[0])
        for row in conn.execute("SELECT time FROM records WHERE kind = 0%s ORDER BY offset" % window, args):
            times.append(row[0])
        return times
    finally:
        conn.close()


def _window(start, end):
    window = (" AND time >= :start" if start is not None else "") + (" AND time <= :end" if end is not None else "")
    return window, {"start": start, "end": end}
