"""Streams: one way to send a growing source to a client, resumable by sequence number.

A source is anything the daemon can read "after seq N" and wait on: a job's log (seq = byte
offset), or a `Topic`, an in-memory ring of records that a service publishes to (job events,
telemetry, speculation stats, training curves). `serve()` pumps one source to one client
connection on its own thread; resuming after a cut link, de-duplication (seq only grows) and
cancel (`stream.cancel`, a reused stream id, or the client going away) work the same for all.
Every stream that is not cancelled by its client ends with an end frame, `data.error` saying
what went wrong when something did.
"""

import collections
import itertools
import logging
import threading
import time

from .protocol import BadRequest, Busy

log = logging.getLogger("specdeck.streams")

WAIT_SLICE_S = 0.25  # how often a waiting stream looks at its cancel flag
MAX_SEQ = 2**53  # seqs beyond it lose precision in a JavaScript client and overflow file offsets
MAX_STREAMS = 32  # per connection: each stream is a thread

_registry_lock = threading.Lock()


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
    goes out as fewer, larger frames. `starts_with_snapshot`: set by first_seq when the first
    frame will hold the whole state."""

    gather_s = 0.0
    starts_with_snapshot = False

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
            self._need_snapshot = self.starts_with_snapshot = self.snapshot is not None
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


class Stream:
    """One open stream of a connection: the thread that pumps it and how it was asked to stop."""

    __slots__ = ("id", "stopped", "reason", "thread", "sending")

    def __init__(self, stream_id):
        self.id = stream_id
        self.stopped = threading.Event()
        self.reason = None
        self.thread = None
        self.sending = threading.Lock()  # held while a frame goes out: stop() waits for it

    def stop(self, reason=None):
        """Stop pumping. With a `reason`, the client gets an end frame with it as `data.error`;
        without (cancelled, or its id reused), nothing more is sent under this id once stop()
        returns (a frame already being written finishes first; a client that reads nothing is
        not waited for beyond a few seconds)."""
        acquired = self.sending.acquire(timeout=5.0)
        try:
            self.reason = reason
            self.stopped.set()
        finally:
            if acquired:
                self.sending.release()


def check_seq(after):
    """BadRequest unless `after` is None or within [-MAX_SEQ, MAX_SEQ]."""
    if after is not None and not -MAX_SEQ <= after <= MAX_SEQ:
        raise BadRequest("after must be between -2^53 and 2^53, not %d" % after)
    return after


def serve(connection, stream_id, source, after):
    """Pump `source` to `connection` as stream `stream_id` from `after`, on a thread of its own.

    A stream id the connection already uses is cancelled first (a client that reuses an id
    after a reconnect must not leave a follower behind that nobody can cancel). Returns the
    seq the stream starts from. Busy when the connection has MAX_STREAMS open.
    """
    start = source.first_seq(check_seq(after))
    stream = Stream(stream_id)
    with _registry_lock:  # two requests of one connection may reuse an id at the same instant
        previous = connection.streams.pop(stream_id, None)
        if previous is not None:
            previous.stop()
        if len(connection.streams) >= MAX_STREAMS:
            raise Busy("this connection has %d open streams; cancel one first" % MAX_STREAMS)
        connection.streams[stream_id] = stream
    stream.thread = threading.Thread(target=_pump, args=(connection, stream, source, start), name="stream-%s" % stream_id, daemon=True)
    stream.thread.start()
    return start


def follow(call, source):
    """Serve `source` as the stream a `*.follow` call names (params `stream`, `after`). The reply,
    `{stream, seq, snapshot}`: a client that gets no frame before its link drops asks again
    `after: seq` (nothing that came meanwhile is lost), or from now when `snapshot` is true
    (the first frame, which it missed, holds the whole state; a new one comes)."""
    stream_id = call.param("stream", str, required=True)
    seq = serve(call.connection, stream_id, source, call.param("after", int))
    return {"stream": stream_id, "seq": seq, "snapshot": source.starts_with_snapshot}


def cancel(connection, stream_id):
    """Stop stream `stream_id` of `connection` without an end frame; False when none was open."""
    with _registry_lock:
        stream = connection.streams.pop(stream_id, None)
    if stream is not None:
        stream.stop()
    return stream is not None


def end_all(connection, reason, wait_s=2.0):
    """Stop every stream of `connection`, each with an end frame saying `reason`, and wait
    (a bounded time) for their last frames to be written."""
    with _registry_lock:
        open_streams = list(connection.streams.values())
        connection.streams.clear()
    for stream in open_streams:
        stream.stop(reason)
    deadline = time.monotonic() + wait_s
    for stream in open_streams:
        if stream.thread is not None:
            stream.thread.join(max(0.0, deadline - time.monotonic()))


def _pump(connection, stream, source, seq):
    end = None  # (seq, data) of the end frame, once the stream has one
    try:
        while not stream.stopped.is_set() and not connection.closed.is_set():
            batch = source.read(seq)
            if batch.ended:
                end = (batch.seq, batch.data or {})
                break
            if batch.data is None:
                source.wait(seq, WAIT_SLICE_S)
                continue
            with stream.sending:
                if stream.stopped.is_set():
                    break
                if not connection.send({"stream": stream.id, "seq": batch.seq, "data": batch.data}):
                    return
            seq = batch.seq
            if source.gather_s and not batch.more:
                stream.stopped.wait(source.gather_s)
    except Exception as exc:  # a stream that fails tells its client, and the daemon goes on
        log.exception("stream %s failed", stream.id)
        end = (seq, {"error": "%s: %s" % (type(exc).__name__, exc)})
    finally:
        if end is None and stream.reason is not None:
            end = (seq, {"error": stream.reason})
        elif end is None and not stream.stopped.is_set() and not connection.closed.is_set():
            end = (seq, {"error": "the stream stopped unexpectedly"})  # whatever got past `except`
        with _registry_lock:
            if connection.streams.get(stream.id) is stream:
                del connection.streams[stream.id]
        if end is not None:
            _send_end(connection, stream.id, *end)


def _send_end(connection, stream_id, seq, data):
    try:
        connection.send({"stream": stream_id, "end": True, "seq": seq, "data": data})
    except Exception as exc:  # an end frame too large (a huge job description) still ends the stream
        connection.send({"stream": stream_id, "end": True, "seq": seq, "data": {"error": "%s: %s" % (type(exc).__name__, exc)}})
