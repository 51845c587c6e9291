"""The alert queue: `notify.sqlite` beside the history store, so that what is not yet delivered
survives the daemon's restart (and SIGKILL: each change is one committed transaction).

Tables: `alerts` (each alert once, by its key: an alert raised again, after a restart, is not
queued again), `deliveries` (one row per alert and channel: pending, sent or expired, its tries
and last error), `channels` (each channel's run of failures, when it may be tried next, its last
error and last success), `watched` (jobs whose end someone asked to hear about) and `meta` (when
the queue was created: job ends before it are not alerts).

Timing (all from `clock`, a function returning s since the epoch; the delivery service passes
its own, so a test or benchmark can move time on instead of waiting): an alert is due
GATHER_S after it was raised (alerts that come together go out together), a channel that failed
is tried again after RETRY_S[n] (10 s, 30 s, 1 min ... then every 30 min), and a delivery
still pending RETRY_FOR_S (two days) after its alert is given up as expired.
"""

import json
import os
import sqlite3
import threading
import time

from ..core import paths

FILE_NAME = "notify.sqlite"
GATHER_S = 1.0
RETRY_S = (10.0, 30.0, 60.0, 120.0, 300.0, 600.0, 900.0, 1800.0)
RETRY_FOR_S = 2 * 86400.0
FAILING_AFTER = 3  # failures in a row before a channel is shown as failing (not just retrying)
KEEP_SENT_S = 7 * 86400.0

SCHEMA = """
CREATE TABLE IF NOT EXISTS alerts (key TEXT PRIMARY KEY, raised_at REAL NOT NULL, urgent INTEGER NOT NULL, body TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS deliveries (key TEXT NOT NULL, channel TEXT NOT NULL, state TEXT NOT NULL, due_at REAL NOT NULL,
    tries INTEGER NOT NULL DEFAULT 0, last_error TEXT, sent_at REAL, PRIMARY KEY (key, channel));
CREATE INDEX IF NOT EXISTS deliveries_pending ON deliveries (channel, state, due_at);
CREATE TABLE IF NOT EXISTS channels (channel TEXT PRIMARY KEY, failures INTEGER NOT NULL DEFAULT 0, next_try_at REAL,
    last_error TEXT, last_error_at REAL, last_ok_at REAL, sent INTEGER NOT NULL DEFAULT 0, requests INTEGER NOT NULL DEFAULT 0);
CREATE TABLE IF NOT EXISTS watched (job TEXT PRIMARY KEY, asked_at REAL NOT NULL);
CREATE TABLE IF NOT EXISTS meta (name TEXT PRIMARY KEY, value TEXT);
"""


def default_path():
    return os.path.join(paths.state_dir(), FILE_NAME)


def retry_after(failures):
    return RETRY_S[min(failures, len(RETRY_S)) - 1]


class AlertQueue:
    """One connection, used under a lock by the service's thread and the senders' threads."""

    def __init__(self, path=None, clock=time.time):
        self.path = path or default_path()
        self.clock = clock
        self._lock = threading.Lock()
        self._conn = sqlite3.connect(self.path, timeout=10.0, isolation_level=None, check_same_thread=False)
        os.chmod(self.path, 0o600)
        self._conn.execute("PRAGMA journal_mode=WAL")
        self._conn.executescript(SCHEMA)
        self._conn.execute("INSERT OR IGNORE INTO meta VALUES ('created_at', ?)", (repr(self.clock()),))

    def close(self):
        with self._lock:
            self._conn.close()

    def created_at(self):
        with self._lock:
            return float(self._conn.execute("SELECT value FROM meta WHERE name = 'created_at'").fetchone()[0])

    # -- raising

    def raise_alert(self, alert, channel_ids):
        """Queue `alert` for each of `channel_ids`, once: False when its key was queued before."""
        now = self.clock()
        with self._lock, self._conn:
            self._conn.execute("BEGIN IMMEDIATE")
            cursor = self._conn.execute("INSERT OR IGNORE INTO alerts VALUES (?, ?, ?, ?)",
                                        (alert["id"], now, int(bool(alert.get("urgent"))), json.dumps(alert)))
            if cursor.rowcount == 0:
                return False
            self._conn.executemany("INSERT OR IGNORE INTO deliveries (key, channel, state, due_at) VALUES (?, ?, 'pending', ?)",
                                   [(alert["id"], channel, now + GATHER_S) for channel in channel_ids])
            return True

    def known(self, key):
        with self._lock:
            return self._conn.execute("SELECT 1 FROM alerts WHERE key = ?", (key,)).fetchone() is not None

    # -- delivering

    def channels_due(self, quiet_until):
        """Channel ids with a delivery due now (`quiet_until(channel)`: the end of its quiet hours
        or None; while quiet only urgent alerts are due)."""
        now = self.clock()
        with self._lock:
            rows = self._conn.execute(
                "SELECT d.channel, MAX(a.urgent) FROM deliveries d JOIN alerts a ON a.key = d.key LEFT JOIN channels c ON c.channel = d.channel "
                "WHERE d.state = 'pending' AND d.due_at <= ? AND (c.next_try_at IS NULL OR c.next_try_at <= ?) GROUP BY d.channel",
                (now, now)).fetchall()
        return [channel for channel, urgent in rows if urgent or quiet_until(channel) is None]

    def take(self, channel, limit, urgent_only=False):
        """The pending deliveries of a channel that are due, oldest first: [(key, alert)]; those
        past RETRY_FOR_S are marked expired instead."""
        now = self.clock()
        with self._lock, self._conn:
            self._conn.execute("BEGIN IMMEDIATE")
            self._conn.execute("UPDATE deliveries SET state = 'expired' WHERE channel = ? AND state = 'pending' AND key IN "
                               "(SELECT key FROM alerts WHERE raised_at < ?)", (channel, now - RETRY_FOR_S))
            rows = self._conn.execute(
                "SELECT a.key, a.body FROM deliveries d JOIN alerts a ON a.key = d.key WHERE d.channel = ? AND d.state = 'pending' "
                "AND d.due_at <= ? %s ORDER BY a.raised_at, a.key LIMIT ?" % ("AND a.urgent = 1" if urgent_only else ""),
                (channel, now, limit)).fetchall()
        return [(key, json.loads(body)) for key, body in rows]

    def delivered(self, channel, keys):
        now = self.clock()
        with self._lock, self._conn:
            self._conn.execute("BEGIN IMMEDIATE")
            self._conn.executemany("UPDATE deliveries SET state = 'sent', sent_at = ?, tries = tries + 1 WHERE key = ? AND channel = ?",
                                   [(now, key, channel) for key in keys])
            self._conn.execute("INSERT OR IGNORE INTO channels (channel) VALUES (?)", (channel,))
            self._conn.execute("UPDATE channels SET failures = 0, next_try_at = NULL, last_ok_at = ?, sent = sent + ?, "
                               "requests = requests + 1 WHERE channel = ?", (now, len(keys), channel))

    def failed(self, channel, keys, error):
        """A try that failed: the channel waits its next backoff, the deliveries stay pending."""
        now = self.clock()
        with self._lock, self._conn:
            self._conn.execute("BEGIN IMMEDIATE")
            self._conn.executemany("UPDATE deliveries SET tries = tries + 1, last_error = ? WHERE key = ? AND channel = ?",
                                   [(error, key, channel) for key in keys])
            self._conn.execute("INSERT OR IGNORE INTO channels (channel) VALUES (?)", (channel,))
            failures = self._conn.execute("SELECT failures FROM channels WHERE channel = ?", (channel,)).fetchone()[0] + 1
            self._conn.execute("UPDATE channels SET failures = ?, next_try_at = ?, last_error = ?, last_error_at = ?, "
                               "requests = requests + 1 WHERE channel = ?", (failures, now + retry_after(failures), error, now, channel))

    def tested(self, channel, error):
        """A `--test` send: it says how the channel is doing, and a success lets a waiting queue go now."""
        now = self.clock()
        with self._lock, self._conn:
            self._conn.execute("INSERT OR IGNORE INTO channels (channel) VALUES (?)", (channel,))
            if error is None:
                self._conn.execute("UPDATE channels SET failures = 0, next_try_at = NULL, last_ok_at = ? WHERE channel = ?", (now, channel))
            else:
                self._conn.execute("UPDATE channels SET last_error = ?, last_error_at = ? WHERE channel = ?", (error, now, channel))

    def retry_now(self, channel=None):
        """Forget the backoff of one channel (or all): its pending alerts are tried at once."""
        with self._lock, self._conn:
            if channel is None:
                self._conn.execute("UPDATE channels SET next_try_at = NULL")
            else:
                self._conn.execute("UPDATE channels SET next_try_at = NULL WHERE channel = ?", (channel,))

    def forget_channel(self, channel):
        with self._lock, self._conn:
            self._conn.execute("DELETE FROM deliveries WHERE channel = ?", (channel,))
            self._conn.execute("DELETE FROM channels WHERE channel = ?", (channel,))

    def status(self, channel):
        """{state: ok|retrying|failing|new, failures, last_error, last_error_at, last_ok_at,
        next_try_at, pending, sent, expired, requests}."""
        with self._lock:
            row = self._conn.execute("SELECT failures, next_try_at, last_error, last_error_at, last_ok_at, sent, requests "
                                     "FROM channels WHERE channel = ?", (channel,)).fetchone()
            counts = dict(self._conn.execute("SELECT state, COUNT(*) FROM deliveries WHERE channel = ? GROUP BY state", (channel,)).fetchall())
        failures, next_try_at, last_error, last_error_at, last_ok_at, sent, requests = row or (0, None, None, None, None, 0, 0)
        state = "failing" if failures >= FAILING_AFTER else "retrying" if failures else "ok" if last_ok_at else "new"
        return {"state": state, "failures": failures, "last_error": last_error, "last_error_at": last_error_at,
                "last_ok_at": last_ok_at, "next_try_at": next_try_at, "pending": counts.get("pending", 0),
                "sent": sent, "expired": counts.get("expired", 0), "requests": requests}

    def recent(self, limit=50):
        """The newest alerts raised, newest first."""
        with self._lock:
            rows = self._conn.execute("SELECT body FROM alerts ORDER BY raised_at DESC LIMIT ?", (limit,)).fetchall()
        return [json.loads(body) for body, in rows]

    def prune(self):
        """Alerts no channel still waits for, older than KEEP_SENT_S, go."""
        cut = self.clock() - KEEP_SENT_S
        with self._lock, self._conn:
            self._conn.execute("DELETE FROM deliveries WHERE state != 'pending' AND key IN (SELECT key FROM alerts WHERE raised_at < ?)", (cut,))
            self._conn.execute("DELETE FROM alerts WHERE raised_at < ? AND key NOT IN (SELECT key FROM deliveries)", (cut,))

    # -- watched jobs

    def watch(self, job_id):
        with self._lock, self._conn:
            self._conn.execute("INSERT OR REPLACE INTO watched VALUES (?, ?)", (job_id, self.clock()))

    def is_watched(self, job_id):
        with self._lock:
            return self._conn.execute("SELECT 1 FROM watched WHERE job = ?", (job_id,)).fetchone() is not None

    # -- what a heartbeat tells

    def raised_since(self, since):
        """The alerts raised at or after `since`, oldest first, and the keys of those since (a
        follow-up names what it follows: `KEY:resumed`)."""
        with self._lock:
            rows = self._conn.execute("SELECT key, body FROM alerts WHERE raised_at >= ? ORDER BY raised_at", (since,)).fetchall()
        return [json.loads(body) for _, body in rows], {key for key, _ in rows}
