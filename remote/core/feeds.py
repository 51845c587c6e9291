"""Feeds: daemon services that read figures from many sources (inference servers, training
runs, the host's GPUs), each source on a worker thread of its own with its own deadline per
read, size cap, error, backoff and age, so a source that fails, hangs or floods never delays
or stops the others and never takes the service down.

A feed publishes each good record to the topic named after it, writes its series to the
history store under the same name (one name per capability: service, topic, history source),
keeps the latest record of each source and tells, wherever a figure is shown, how old it is:
`age_s` and `stale` (older than the source's `stale_after_s`, its interval plus its read
deadline) are computed when a reply or frame is made, and a source whose figure turns stale
gets a marker record on the topic (its last figures with `stale: true`, `age_s` and `error`),
so a follower never shows a stale figure as current.

How to define a feed
--------------------
1. Subclass `FeedSource` (feed_source.py, which says what to set and override).
2. Subclass `Feed` (a Service). Set `name`, `key_field` (the record field that names a source,
   e.g. "server" or "job"), implement `discover()` -> {key: spec} (called once a second on the
   service's thread: which sources exist now; cheap, no network) and `make_source(key, spec)`
   -> a FeedSource. A source whose spec changes is replaced; one that disappears is closed.
3. List the Feed class in the area's `SERVICES`. Wire methods use `feed.figure(key)` (the
   latest record with its age), `feed.snapshot()`, `feed.source(key)`, `feed.wake(key)`,
   `feed.await_read(until, timeout_s)` (a first read waited for, under a deadline), and
   from remote/core/feed_wire.py `follow(call, feed)`, `history_window(call)` and
   `query_history(call, source, name, labels, start, end, resolution_s)`.
"""

import logging
import threading
import time

from .feed_source import Budget, SourceError
from .services import Service
from .streams import Topic

log = logging.getLogger("specdeck.feeds")

MAX_SOURCES = 64  # per feed: each is a thread; more are refused with a reason in the status
MARK_EVERY_S = 5.0  # a stale source's marker is repeated this often (and at once when its error changes)
STOP_WAIT_S = 1.0  # a worker stuck in a read is not waited for longer at stop (its thread is a daemon)


class _Worker:
    """One source's thread and what is known about it."""

    def __init__(self, feed, source, spec):
        self.feed = feed
        self.source = source
        self.spec = spec
        self.state = "starting"
        self.error = None
        self.failures = 0
        self.next_try_at = None
        self.latest = None
        self.last_good_at = None  # the `time` of the latest good record
        self.reads = 0
        self.cpu_s = 0.0
        self.read_began = None  # monotonic, while a read runs
        self.series = set()
        self.series_dropped = 0
        self.marked = None  # (monotonic, error) of the last stale marker
        self.slowed_to_s = None  # the interval its CPU cost stretched it to, when it did
        self._stopping = threading.Event()
        self._wake = threading.Event()
        self.thread = threading.Thread(target=self._run, name="feed-%s-%s" % (feed.name, source.key), daemon=True)

    def age_s(self, now):
        return None if self.last_good_at is None else max(0.0, now - self.last_good_at)

    def overdue(self):
        """A read that has run past its deadline and one interval more (it ignores its budget)."""
        began = self.read_began
        return began is not None and time.monotonic() - began > self.source.deadline_s + self.source.interval_s

    def is_stale(self, now):
        age = self.age_s(now)
        # A source read less often for its CPU cost is judged against the interval it runs at.
        return age is None or age > self.source.stale_after_s + max(0.0, (self.slowed_to_s or 0.0) - self.source.interval_s)

    def _run(self):
        opened = False
        source = self.source
        while not self._stopping.is_set():
            began, began_cpu = time.monotonic(), time.thread_time()
            failed = None
            try:
                if not opened:
                    source.open()
                    opened = True
                self.read_began = began
                record = source.read(Budget(source.deadline_s, source.max_bytes))
                if record is not None and not self._stopping.is_set():
                    self.feed._accept(self, record, began)
            except SourceError as exc:
                failed = str(exc)
            except Exception as exc:  # a bug or a surprise in one source: that source retries, the rest go on
                failed = "%s: %s" % (type(exc).__name__, exc)
                log.warning("feed %s source %s failed: %s", self.feed.name, source.key, failed, exc_info=self.failures == 0)
                if opened:
                    opened = self._close()
            finally:
                self.read_began = None
                self.reads += 1
                read_cpu_s = time.thread_time() - began_cpu
                self.cpu_s += read_cpu_s
                with self.feed._read_done:
                    self.feed._read_done.notify_all()
            if failed is None:
                self.state, self.error, self.failures, self.next_try_at = "running", None, 0, None
                # A source whose reads cost more CPU than its share waits longer: a server that
                # exports megabytes each second costs the daemon a bounded share of a core.
                interval_s = max(source.interval_s, read_cpu_s / source.max_cpu_share)
                self.slowed_to_s = interval_s if interval_s > source.interval_s * 1.05 else None
                wait_s = max(0.0, interval_s - (time.monotonic() - began))
            else:
                self.failures += 1
                wait_s = source.backoff_s[min(self.failures, len(source.backoff_s)) - 1]
                self.state, self.error, self.next_try_at = "retrying", failed, time.time() + wait_s
            self._wake.wait(wait_s)
            self._wake.clear()
        if opened:
            self._close()
        self.state = "stopped"

    def _close(self):
        try:
            self.source.close()
        except Exception:
            log.exception("feed %s source %s failed to close", self.feed.name, self.source.key)
        return False

    def status(self, now):
        state = "overdue" if self.overdue() else self.state  # this source waits; the others do not
        age = self.age_s(now)
        return {"key": self.source.key, "state": state, "error": self.error, "failures": self.failures,
                "next_try_at": self.next_try_at, "last_good_at": self.last_good_at,
                "age_s": None if age is None else round(age, 3), "stale": self.is_stale(now), "reads": self.reads,
                "cpu_ms_per_read": round(1000.0 * self.cpu_s / self.reads, 3) if self.reads else None,
                "series": len(self.series), "series_dropped": self.series_dropped,
                "slowed_to_s": None if self.slowed_to_s is None else round(self.slowed_to_s, 2)}


class Feed(Service):
    """A service that reads many sources, one worker thread each (see the module docstring)."""

    name = "feed"
    key_field = "source"
    interval_s = 1.0  # how often sources are discovered and stale ones marked
    topic_capacity = 4096
    restart_on_failure = False  # a failed discovery keeps the sources that run

    def __init__(self, daemon):
        self.daemon = daemon
        self.topic = daemon.topics.setdefault(self.name, Topic(self.name, capacity=self.topic_capacity))
        self.refused = []  # keys not started: more than MAX_SOURCES
        self._workers = {}
        self._lock = threading.Lock()
        self._read_done = threading.Condition()  # notified after each read of any source

    # -- to override

    def discover(self):
        """{key: spec} of the sources that exist now."""
        return {}

    def make_source(self, key, spec):
        raise NotImplementedError

    def detail_extra(self):
        """Feed-specific figures for the service status."""
        return {}

    # -- the service

    def step(self):
        try:
            wanted = self.discover()
        finally:
            self._mark_stale()
        with self._lock:
            for key in [k for k, w in self._workers.items() if k not in wanted or w.spec != wanted[k]]:
                self._stop_worker(self._workers.pop(key))
            refused = []
            for key, spec in wanted.items():
                if key in self._workers:
                    continue
                if len(self._workers) >= MAX_SOURCES:
                    refused.append(key)
                    continue
                worker = _Worker(self, self.make_source(key, spec), spec)
                self._workers[key] = worker
                worker.thread.start()
            self.refused = refused

    def stop(self):
        with self._lock:
            workers, self._workers = list(self._workers.values()), {}
        for worker in workers:
            worker._stopping.set()
            worker._wake.set()
        deadline = time.monotonic() + STOP_WAIT_S
        for worker in workers:
            worker.thread.join(max(0.0, deadline - time.monotonic()))

    def _stop_worker(self, worker):
        worker._stopping.set()
        worker._wake.set()  # it closes its source and ends on its own thread; nothing waits for it here

    def detail(self):
        now = time.time()
        sources = [w.status(now) for w in self.workers()]
        detail = {"sources": len(sources), "failing": sum(1 for s in sources if s["state"] != "running"),
                  "stale": sum(1 for s in sources if s["stale"])}
        detail.update(self.detail_extra())
        # One flat line a source, as the console's host screen shows a detail's plain values.
        for status in sources:
            detail["source %s" % status["key"]] = _source_line(status, now)
        if self.refused:
            detail["refused"] = "%d sources beyond the %d this feed reads: %s" % (len(self.refused), MAX_SOURCES, ", ".join(self.refused[:5]))
        detail["source_list"] = sources
        return detail

    # -- what the workers call

    def _accept(self, worker, record, began_monotonic):
        now = time.time()
        record.setdefault("time", now - (time.monotonic() - began_monotonic))
        worker.latest, worker.last_good_at, worker.marked = record, record["time"], None
        on_wire = worker.source.wire_record(record)
        if on_wire is not None:
            self.topic.publish(dict(on_wire, age_s=round(max(0.0, now - record["time"]), 3), stale=False))
        points = worker.source.history_points(record)
        history = getattr(self.daemon, "history", None)
        if points and history is not None:
            kept = []
            for name, labels, value in points:
                series = (name, tuple(sorted(labels.items())))
                if series not in worker.series:
                    if len(worker.series) >= worker.source.max_series:
                        worker.series_dropped += 1
                        continue
                    worker.series.add(series)
                kept.append((self.name, name, labels, value, record["time"]))
            history.add_many(kept)

    def _mark_stale(self):
        now, now_monotonic = time.time(), time.monotonic()
        for worker in self.workers():
            overdue = worker.overdue()
            if not worker.is_stale(now) or (worker.state == "starting" and not overdue):
                continue
            began = worker.read_began
            error = worker.error or ("a read has run %.0f s, past its %.1f s deadline" % (now_monotonic - began, worker.source.deadline_s)
                                     if overdue and began is not None else "no new figure")
            if worker.marked is not None and now_monotonic - worker.marked[0] < MARK_EVERY_S and worker.marked[1] == error:
                continue
            worker.marked = (now_monotonic, error)
            age = worker.age_s(now)
            marker = worker.source.stale_marker(worker.latest, None if age is None else round(age, 3), error, self.key_field)
            if marker is not None:
                self.topic.publish(marker)

    # -- questions from wire methods

    def workers(self):
        with self._lock:
            return list(self._workers.values())

    def source(self, key):
        """The FeedSource of `key`, or None."""
        with self._lock:
            worker = self._workers.get(key)
        return worker.source if worker else None

    def source_status(self, key):
        with self._lock:
            worker = self._workers.get(key)
        return worker.status(time.time()) if worker else None

    def wake(self, key=None):
        """Read source `key` now (None: every source) rather than at the end of its wait."""
        for worker in self.workers():
            if key is None or worker.source.key == key:
                worker._wake.set()

    def await_read(self, until, timeout_s):
        """Block until `until()` holds, asking again after each read of any of this feed's
        sources (a daemon just started, a source just woken: its first figures are a read
        away); False when `timeout_s` passes first. A wire method's one way to wait for a read."""
        with self._read_done:
            return self._read_done.wait_for(until, timeout_s)

    def aged(self, worker, record, now=None):
        """`record` with `age_s`, `stale` and (when failing) `error`, as of now."""
        now = time.time() if now is None else now
        age = worker.age_s(now)
        out = dict(record, age_s=None if age is None else round(age, 3), stale=worker.is_stale(now))
        if worker.error and "error" not in record:
            out["error"] = worker.error
        return out

    def figure(self, key):
        """The latest record of source `key` with its age; None when it is not read or has none."""
        with self._lock:
            worker = self._workers.get(key)
        if worker is None or worker.latest is None:
            return None
        return self.aged(worker, worker.latest)

    def snapshot(self):
        """{key: latest record with its age} of every source that has one (a follower's first frame)."""
        now = time.time()
        return {w.source.key: self.aged(w, w.latest, now) for w in self.workers() if w.latest is not None}


def _source_line(status, now):
    parts = [status["state"]]
    parts.append("figure %s" % ("none yet" if status["age_s"] is None else "%.0f s old%s" % (status["age_s"], ", stale" if status["stale"] else "")))
    if status["error"]:
        parts.append(status["error"])
    if status["next_try_at"]:
        parts.append("next try in %d s" % max(0, round(status["next_try_at"] - now)))
    if status["slowed_to_s"]:
        parts.append("read every %.1f s (its reads cost %.0f ms CPU)" % (status["slowed_to_s"], status["cpu_ms_per_read"] or 0))
    if status["series_dropped"]:
        parts.append("%d points of series beyond the cap dropped" % status["series_dropped"])
    return "; ".join(parts)
