"""What a feed reads: a source (`FeedSource`), the budget one read of it may spend (`Budget`),
and the errors a read raises (`SourceError`, `BadSample`). The feed (feeds.py) runs each source
on a worker thread of its own.

Subclass `FeedSource` and set `interval_s` (how often it is read), `deadline_s` (one read's
budget of time), `max_bytes` (one read's budget of input) and `backoff_s` (waits after
1, 2, 3 ... failures in a row). Implement `read(budget)`: one read, returning a record (a
dict; `time`, s since the epoch, is set to the read's start when absent) or None when there
is nothing new. Stay within the budget: `budget.remaining_s()` for socket timeouts,
`budget.check()` between steps (raises `SourceError` past the deadline),
`budget.take(n)` as bytes come in (raises `SourceError` past the cap). Raise
`BadSample(reason)` for data that is wrong (a NaN counter) and `SourceError(reason)` for a
source that cannot be read; any other exception counts as a failure too, and then the
source is closed and opened again at the next try. Optional: `open()`, `close()`,
`history_points(record)` -> [(name, labels, value)] (at most `max_series` distinct series
are kept per source; more are dropped and counted), `wire_record(record)` (what goes on the
topic; default the record, None: nothing) and `stale_marker(latest, age_s, error, key_field)`
(what goes on the topic when the figure turns stale; default the latest record marked stale).
"""

import time


class SourceError(Exception):
    """A source could not be read (no answer, past its deadline, over its size cap)."""


class BadSample(SourceError):
    """A source answered with figures that cannot be right (NaN, infinite, negative counters)."""


class Budget:
    """What one read may spend: time until `deadline` (monotonic) and `max_bytes` of input."""

    def __init__(self, deadline_s, max_bytes):
        self.deadline_s = deadline_s
        self.deadline = time.monotonic() + deadline_s
        self.max_bytes = max_bytes
        self.bytes = 0

    def remaining_s(self):
        return self.deadline - time.monotonic()

    def check(self):
        if time.monotonic() >= self.deadline:
            raise SourceError("no complete answer within its %.1f s deadline" % self.deadline_s)

    def take(self, count):
        self.bytes += count
        if self.bytes > self.max_bytes:
            raise SourceError("answer larger than the %d-byte cap (stopped reading at %d bytes)" % (self.max_bytes, self.bytes))


class FeedSource:
    """One thing a feed reads. See the module docstring for what to override."""

    interval_s = 1.0
    deadline_s = 0.8
    max_bytes = 8 << 20
    max_series = 64
    max_cpu_share = 0.05  # of one core: a source whose reads cost more is read less often
    backoff_s = (1.0, 2.0, 4.0, 8.0, 15.0, 30.0, 60.0)

    def __init__(self, key):
        self.key = key

    @property
    def stale_after_s(self):
        """A figure older than this is stale: one interval plus the time a read may take."""
        return self.interval_s + self.deadline_s

    def open(self):
        pass

    def read(self, budget):
        raise NotImplementedError

    def close(self):
        pass

    def history_points(self, record):
        return []

    def wire_record(self, record):
        return record

    def stale_marker(self, latest, age_s, error, key_field):
        """The record a follower gets when this source's figure turns stale."""
        marker = dict(latest or {})
        marker.update({key_field: self.key, "stale": True, "age_s": age_s, "error": error})
        return marker
