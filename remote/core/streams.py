"""Streams: one way to send a growing source to a client, resumable by sequence number.

A source is anything the daemon can read "after seq N" and wait on: a job's log (seq = byte
offset), or a `Topic`, an in-memory ring of records that a service publishes to (job events,
telemetry, speculation stats, training curves). `serve()` pumps one source to one client
connection on its own thread; resuming after a cut link, de-duplication (seq only grows) and
cancel (`stream.cancel`, a reused stream id, or the client going away) work the same for all.
"""

import collections
import itertools
import logging
import threading
import time

log = logging.getLogger("specdeck.streams")

WAIT_SLICE_S = 0.25  # how often a waiting stream looks at its cancel flag


class Batch:
    """What a source has after a seq: `data` to send (or None), the `seq` it brings the reader to,
    and whether the source has ended (then `data` is the end frame's data)."""

    __slots__ = ("data", "seq", "ended", "more")

    def __init__(self, data, seq, ended=False, more=False):
        self.data = data
        self.seq = seq
        self.ended = ended
        self.more = more  # a full batch: read again at once, without gathering


class Source:
    """A stream's source. `gather_s`: after a small batch, wait that long so a chatty source
    goes out as fewer, larger frames."""

    gather_s = 0.0

    def first_seq(self, after):
        """Where a stream that asks for `after` (None: from now) starts."""
        return after

    def read(self, after):
        """A Batch of what came after `after`; Batch(None, after) when there is nothing yet."""
        raise NotImplementedError

    def wait(self, after, timeout_s):
        """Block until something may have come after `after`, or `timeout_s` passed."""
        time.sleep(timeout_s)


class Topic:
    """A ring of the latest records of one kind, with sequence numbers that keep growing across
    daemon restarts (they start from the clock in microseconds), so a client's old `after`
    never hides new records. A reader that fell behind the ring gets `gap: true`."""

    def __init__(self, name, capacity=4096):
        self.name = name
        self._records = collections.deque(maxlen=capacity)
        self._first_seq = int(time.time() * 1e6)
        self._last_seq = self._first_seq
        self._changed = threading.Condition()

    @property
    def last_seq(self):
        return self._last_seq

    def publish(self, record):
        with self._changed:
            self._last_seq += 1
            self._records.append((self._last_seq, record))
            self._changed.notify_all()
            return self._last_seq

    def after(self, seq, limit=1000):
        """(records after seq, the seq of the last one, gap): gap when some were dropped, or were
        made by an earlier daemon, so the reader should take a fresh snapshot."""
        with self._changed:
            oldest = self._last_seq - len(self._records) + 1  # seqs in the ring are consecutive
            gap = seq < self._first_seq or seq < oldest - 1
            start = max(0, seq - oldest + 1)
            picked = list(itertools.islice(self._records, start, start + limit))
            if not picked:
                return [], max(seq, self._first_seq) if gap else seq, gap
            return [record for _, record in picked], picked[-1][0], gap

    def wait(self, seq, timeout_s):
        with self._changed:
            if seq is None or self._last_seq <= seq:
                self._changed.wait(timeout_s)


class TopicSource(Source):
    """A Topic as a stream: `{"records": [...]}` per frame. With `snapshot`, a function that
    returns the whole current state, a new reader (or one that missed records) first gets
    `{"snapshot": ..., "records": []}`, so it never has to ask for the state separately."""

    gather_s = 0.05

    def __init__(self, topic, snapshot=None):
        self.topic = topic
        self.snapshot = snapshot
        self._need_snapshot = False

    def first_seq(self, after):
        if after is None or after < 0:
            self._need_snapshot = self.snapshot is not None
            return self.topic.last_seq
        return after

    def read(self, after):
        if self._need_snapshot:
            self._need_snapshot = False
            seq = self.topic.last_seq
            return Batch({"snapshot": self.snapshot(), "records": []}, seq)
        records, seq, gap = self.topic.after(after)
        if gap and self.snapshot is not None:
            seq = self.topic.last_seq
            return Batch({"snapshot": self.snapshot(), "records": [], "gap": True}, seq)
        if not records:
            return Batch(None, after)
        return Batch({"records": records, "gap": gap} if gap else {"records": records}, seq)

    def wait(self, after, timeout_s):
        self.topic.wait(after, timeout_s)


def serve(connection, stream_id, source, after):
    """Pump `source` to `connection` as stream `stream_id` from `after`, on a thread of its own.

    A stream id the connection already uses is cancelled first (a client that reuses an id
    after a reconnect must not leave a follower behind that nobody can cancel). Returns the
    seq the stream starts from.
    """
    start = source.first_seq(after)
    stop = threading.Event()
    previous = connection.streams.pop(stream_id, None)
    if previous is not None:
        previous.set()
    connection.streams[stream_id] = stop
    threading.Thread(target=_pump, args=(connection, stream_id, source, start, stop), name="stream-%s" % stream_id, daemon=True).start()
    return start


def cancel(connection, stream_id):
    stop = connection.streams.pop(stream_id, None)
    if stop is not None:
        stop.set()
    return stop is not None


def _pump(connection, stream_id, source, seq, stop):
    try:
        while not stop.is_set() and not connection.closed.is_set():
            batch = source.read(seq)
            if batch.ended:
                connection.send({"stream": stream_id, "end": True, "seq": batch.seq, "data": batch.data or {}})
                return
            if batch.data is None:
                source.wait(seq, WAIT_SLICE_S)
                continue
            if not connection.send({"stream": stream_id, "seq": batch.seq, "data": batch.data}):
                return
            seq = batch.seq
            if source.gather_s and not batch.more:
                stop.wait(source.gather_s)
    except Exception as exc:  # a stream that fails tells its client, and the daemon goes on
        log.exception("stream %s failed", stream_id)
        connection.send({"stream": stream_id, "end": True, "seq": seq, "data": {"error": "%s: %s" % (type(exc).__name__, exc)}})
    finally:
        if connection.streams.get(stream_id) is stop:
            connection.streams.pop(stream_id, None)
