"""One client of the daemon (a relay): frames in, replies and stream frames out, with what a
client can cost the daemon bounded, so that one flooding or stalled client leaves the others be.

- Requests are answered by at most WORKERS threads of the connection, from a queue of at most
  QUEUE_LIMIT; beyond it the reply is `Busy` at once. Cheap methods (ping, stream.cancel) are
  answered by the reader itself: four checkpoints being hashed do not hold up a ping.
- A write waits for a client that reads slowly, and while it waits the reader does not read
  (backpressure: the client's own writes block). A client that has read nothing for
  STALLED_CLIENT_S is dropped, which frees the threads and replies waiting on it.
- A client that half-closes (done sending) gets the reply to every request it sent, then an
  end frame for each open stream; then the daemon closes the connection.
"""

import collections
import logging
import os
import select
import socket
import threading
import time

from . import streams, wire
from .protocol import BadRequest, Busy, FrameReader, ProtocolError, RemoteError, encode

log = logging.getLogger("specdeck.daemon")

WORKERS = 4
QUEUE_LIMIT = 64
INLINE_METHODS = frozenset(("ping", "stream.cancel"))
WORKER_IDLE_S = 10.0  # an idle worker thread ends after this long
STALLED_CLIENT_S = float(os.environ.get("SPECDECK_STALLED_CLIENT_S") or 60.0)
NOTICES_PER_WINDOW = 10  # bad-frame notices to one client per window; the rest are counted
NOTICE_WINDOW_S = 60.0
CLOSING_REASON = "the client closed its side of the connection"


class _Stalled(Exception):
    """The client read nothing for STALLED_CLIENT_S while we had something to write."""


class Connection:
    """One client of the daemon: a reader thread (serve), up to WORKERS threads answering, and
    the streams it opened (`streams`: stream id -> streams.Stream)."""

    def __init__(self, sock, daemon):
        self.sock = sock
        self.daemon = daemon
        self.streams = {}
        self.closed = threading.Event()
        self.bad_frames = 0
        self._write_lock = threading.Lock()
        self._work = collections.deque()
        self._work_changed = threading.Condition()
        self._workers = 0
        self._idle_workers = 0
        self._in_flight = 0
        self._draining = False
        self._notice_window = _NoticeWindow()

    # -- out

    def send(self, frame):
        """Write one frame; False when the connection is gone (or just dropped as stalled).
        Raises ProtocolError for a frame above the size limit."""
        data = encode(frame)
        with self._write_lock:
            if self.closed.is_set():
                return False
            try:
                self._write_all(data)
                return True
            except _Stalled:
                log.warning("dropped a client that read nothing for %d s", STALLED_CLIENT_S)
            except (OSError, ValueError):
                pass  # gone; ValueError: its socket already closed
            self._drop()
            return False

    def _write_all(self, data):
        # Not sendall with a timeout: that bounds the whole write, and a 16 MiB reply to a slow
        # but reading client may take minutes. Here only a write with no progress times out.
        view = memoryview(data)
        poller = select.poll()
        poller.register(self.sock.fileno(), select.POLLOUT)
        while view:
            if not poller.poll(STALLED_CLIENT_S * 1000):
                raise _Stalled()
            try:
                sent = self.sock.send(view, socket.MSG_DONTWAIT)
            except (BlockingIOError, InterruptedError):
                continue
            view = view[sent:]

    def _drop(self):
        """Give up on the client: wake the reader, whose `_finish` closes the socket."""
        self.closed.set()
        try:
            self.sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass

    # -- in

    def serve(self):
        try:
            self.send(self.daemon.hello)
            for frame in FrameReader(self.sock.recv):
                if self.closed.is_set():
                    break
                if isinstance(frame, ProtocolError):
                    self._bad_frame(frame)
                elif "method" in frame:
                    self._take(frame)
                # replies from a client are not expected; unknown frames are ignored
        except OSError:
            pass
        finally:
            self._finish()

    def _bad_frame(self, error):
        self.bad_frames += 1
        log.warning("skipped a bad frame: %s", error)  # the log's handler rate-limits repeats
        if error.request_id is not None:
            self.send({"id": error.request_id, "ok": False, "error": BadRequest(str(error)).to_wire()})
            return
        skipped = self._notice_window.take()
        if skipped is not None:
            message = str(error) if not skipped else "%s (and %d more bad frames skipped)" % (error, skipped)
            self.send({"type": "notice", "level": "warning", "message": message})

    def _take(self, frame):
        if frame.get("method") in INLINE_METHODS:
            self._answer(frame)
            return
        with self._work_changed:
            busy = len(self._work) >= QUEUE_LIMIT
            if not busy:
                self._work.append(frame)
                if len(self._work) > self._idle_workers and self._workers < WORKERS:
                    self._workers += 1
                    threading.Thread(target=self._work_loop, name="connection-worker", daemon=True).start()
                self._work_changed.notify()
        if busy:
            error = Busy("%d requests of this connection are waiting; try again" % QUEUE_LIMIT)
            self.send({"id": frame.get("id"), "ok": False, "error": error.to_wire()})

    def _work_loop(self):
        while True:
            with self._work_changed:
                while not self._work or self.closed.is_set():
                    if self.closed.is_set():
                        self._work.clear()  # nobody to answer
                    if self._draining or self.closed.is_set():
                        return self._worker_ends()
                    self._idle_workers += 1
                    woken = self._work_changed.wait(WORKER_IDLE_S)
                    self._idle_workers -= 1
                    if not woken and not self._work:
                        return self._worker_ends()
                frame = self._work.popleft()
                self._in_flight += 1
            try:
                self._answer(frame)
            finally:
                with self._work_changed:
                    self._in_flight -= 1
                    self._work_changed.notify_all()

    def _worker_ends(self):
        self._workers -= 1
        self._work_changed.notify_all()

    def _answer(self, frame):
        request_id = frame.get("id")
        try:
            method = frame.get("method")
            params = frame.get("params") or {}
            if not isinstance(method, str) or not isinstance(params, dict):
                raise BadRequest("a request needs a method name and an object of params")
            result = wire.dispatch(self.daemon, self, method, params)
            reply = {"id": request_id, "ok": True, "result": result}
        except RemoteError as exc:
            reply = {"id": request_id, "ok": False, "error": exc.to_wire()}
        except Exception as exc:  # the answer is always produced, even for a crash
            log.exception("request %r failed", frame.get("method"))
            reply = {"id": request_id, "ok": False, "error": _internal_error(exc)}
        try:
            self.send(reply)
        except ProtocolError as exc:
            self.send({"id": request_id, "ok": False, "error": {"type": "TooLarge", "message": str(exc)}})
        except Exception as exc:  # a result json cannot write
            log.exception("reply to %r could not be written", frame.get("method"))
            self.send({"id": request_id, "ok": False, "error": _internal_error(exc)})

    # -- the end

    def _finish(self):
        """After the client's last frame (or a drop): answer what was asked, end the streams,
        close."""
        with self._work_changed:
            self._draining = True
            self._work_changed.notify_all()
            while (self._work or self._in_flight) and not self.closed.is_set():
                self._work_changed.wait(1.0)
        streams.end_all(self, CLOSING_REASON)
        self._drop()  # a stream still writing to a client that does not read gives up now
        with self._write_lock:
            try:
                self.sock.close()
            except OSError:
                pass
        if self.bad_frames:
            log.info("connection closed after %d bad frames", self.bad_frames)


class _NoticeWindow:
    """How many bad-frame notices a client still gets: NOTICES_PER_WINDOW per NOTICE_WINDOW_S."""

    def __init__(self):
        self.started_at = time.monotonic()
        self.sent = 0
        self.skipped = 0

    def take(self):
        """None: skip this notice; else send it, saying how many were skipped before it."""
        now = time.monotonic()
        if now - self.started_at >= NOTICE_WINDOW_S:
            self.started_at, self.sent = now, 0
        if self.sent >= NOTICES_PER_WINDOW:
            self.skipped += 1
            return None
        self.sent += 1
        skipped, self.skipped = self.skipped, 0
        return skipped


def _internal_error(exc):
    return {"type": "InternalError", "message": "%s: %s" % (type(exc).__name__, exc)}
