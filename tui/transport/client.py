"""The console's side of the wire: requests, replies, streams, and a link that heals.

`AgentClient` is thread-safe and blocking: the CLI calls it directly and the console
calls it from worker threads. With `reconnect=True` a dead link (no byte for
`dead_after_s`, although a ping goes out every `heartbeat_s`) is dropped, a new one is
made with backoff, and every open stream is asked again from the last sequence number
it delivered, so nothing is lost or shown twice. A failure that trying again cannot cure
(ConnectError.permanent: a changed host key, a refused login) ends the healing: the state
becomes `failed`, as when the first connection fails.

A client made without `reconnect` (a headless command's) reads the link on the thread that
calls, until a subscription needs frames that come unasked: a command of one request then
starts no thread. Each start is a wait on the scheduler, for the new thread and then for its
starter, and on a laptop whose cores are busy each was milliseconds of every command. Calls
from several threads take turns at reading, each handing on the replies it reads to their
callers; the heartbeat is kept by whoever reads.

A line from the agent that is not a frame is skipped and logged (logger `tui.client`; the
CLI sends it to a log file, and to stderr with -v: see tui/cli/common.py).
"""

import itertools
import socket
import threading
import time

from remote import PROTOCOL_VERSION
from remote.core.protocol import FrameReader, ProtocolError, RemoteError, encode

from .. import logs

log = logs.get("tui.client")  # the name --verbose lines have always carried

HELLO_TIMEOUT_S = 30.0
# Seconds from the start of one reconnect attempt to the start of the next (the last repeats).
# For the first ~5 s after a drop a try starts every half second, so a link that comes back
# (a Wi-Fi blip, a laptop waking up) is used within a second; a host that stays away is then
# asked less and less often, up to every 15 s.
RETRY_INTERVALS_S = (0.0, 0.25) + (0.5,) * 8 + (1, 2, 4, 8, 15)


def not_utf8_message(params):
    """One line naming the first field of a request that cannot go out as UTF-8 (a byte that
    is not UTF-8 on the command line arrives in Python as a lone surrogate)."""
    pending = [(name, value) for name, value in sorted((params or {}).items())]
    while pending:
        field, value = pending.pop(0)
        if isinstance(value, dict):
            pending[:0] = [("%s key %s" % (field, shown(key)), key) for key in value]
            pending[:0] = [("%s[%s]" % (field, shown(key)), item) for key, item in value.items()]
        elif isinstance(value, (list, tuple)):
            pending[:0] = [("%s[%d]" % (field, index), item) for index, item in enumerate(value)]
        elif isinstance(value, str):
            try:
                value.encode("utf-8")
            except UnicodeEncodeError as exc:
                return "%s is not UTF-8 (the byte %s at position %d): the host takes text in UTF-8 only; nothing was sent" % (
                    field, shown(value[exc.start]), exc.start)
    return "the request holds text that is not UTF-8; nothing was sent"


def shown(text):
    """`text` for a message: a byte that is not UTF-8 as \\xNN."""
    try:
        return text.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")
    except UnicodeEncodeError:  # a surrogate no byte stands for
        return text.encode("utf-8", "backslashreplace").decode()


class ConnectError(Exception):
    """The host could not be reached or the agent could not be started: one human line.

    `permanent` errors are not cured by trying again (a changed host key, a refused login).
    """

    permanent = False

    def __init__(self, message, permanent=None):
        super().__init__(message)
        if permanent is not None:
            self.permanent = permanent


class Disconnected(ConnectError):
    """The link dropped before the reply came."""


class Subscription:
    def __init__(self, client, stream_id, method, params, on_data, on_end):
        self.client = client
        self.id = stream_id
        self.method = method
        self.params = params
        self.on_data = on_data
        self.on_end = on_end
        self.last_seq = params.get("after")
        self.start_seq = None  # where the host said the stream starts: a quiet stream resumes from there
        self.ended = threading.Event()

    def deliver(self, frame):
        seq = frame.get("seq")
        if frame.get("end"):
            self.ended.set()
            if self.on_end:
                self.on_end(frame.get("data") or {})
            return
        if seq is not None and self.last_seq is not None and seq <= self.last_seq:
            return  # already delivered before a reconnect
        self.last_seq = seq
        self.on_data(frame.get("data") or {}, seq)

    def resume_params(self):
        params = dict(self.params, stream=self.id)
        after = self.last_seq if self.last_seq is not None else self.start_seq
        if after is not None:
            params["after"] = after  # else a stream cut before its first frame would skip what came meanwhile
        return params

    def started(self, reply):
        """The opening reply `{stream, seq, snapshot}`: where to resume if no frame comes before
        a cut (not when the first frame is a snapshot: asked again from now, a new one comes)."""
        if isinstance(reply, dict) and isinstance(reply.get("seq"), int) and not reply.get("snapshot"):
            if self.start_seq is None:
                self.start_seq = reply["seq"]

    def cancel(self):
        self.client._subscriptions.pop(self.id, None)
        self.ended.set()
        try:
            self.client.call("stream.cancel", {"stream": self.id}, timeout=5)
        except (RemoteError, ConnectError):
            pass


class AgentClient:
    def __init__(self, connect, reconnect=False, on_state=None, heartbeat_s=1.0, dead_after_s=4.0):
        """`connect(reconnecting=False)` returns a new link (see tui/transport/connection.py) or raises ConnectError."""
        self._connect = connect
        self.reconnect = reconnect
        self.on_state = on_state
        self.heartbeat_s = heartbeat_s
        self.dead_after_s = dead_after_s
        self.hello = None
        self.state = "connecting"
        self.state_detail = {}
        self.rtt_s = None
        self.link = None
        self._ids = itertools.count(1)
        self._stream_ids = itertools.count(1)
        self._pending = {}
        self._subscriptions = {}
        self._write_lock = threading.Lock()
        self._state_lock = threading.Lock()
        self._last_rx = time.monotonic()
        self._connected = threading.Event()
        self._closed = threading.Event()
        self._pings = {}
        # Until the reader and heartbeat threads run (from the start with `reconnect`, else from
        # the first subscription), a caller waiting for its reply reads the link: one at a time,
        # the one reading marked in `_turn`'s `_leader`.
        self._threaded = reconnect
        self._reader = None
        self._turn = threading.Condition()
        self._leader = False

    # -- lifecycle

    def start(self):
        """Connect once; raise ConnectError with a clear line if that fails."""
        self._attach(self._connect())
        if self._threaded:
            threading.Thread(target=self._heartbeat, name="specdeck-heartbeat", daemon=True).start()
        return self

    def _start_threads(self):
        """The reader and the heartbeat from now on: a stream's frames come unasked. A caller
        reading the link finishes its frame first."""
        with self._turn:
            while self._leader:
                self._turn.wait()
            if self._threaded:
                return
            self._threaded = True
            link = self.link
            if link is not None:
                link.settimeout(None)
                threading.Thread(target=self._read_loop, args=(link, self._reader), name="specdeck-reader", daemon=True).start()
            self._turn.notify_all()  # callers waiting for a turn wait for the reader thread instead
        threading.Thread(target=self._heartbeat, name="specdeck-heartbeat", daemon=True).start()

    def close(self):
        self._closed.set()
        self._set_state("closed")
        if self.link:
            self.link.close()

    def _attach(self, link):
        hello, reader = self._read_hello(link)
        if hello.get("protocol") != PROTOCOL_VERSION:
            link.close()
            raise ConnectError(
                "the host agent speaks protocol %s, this console speaks %s (agent %s): reinstall one side to match"
                % (hello.get("protocol"), PROTOCOL_VERSION, hello.get("agent_version")),
                permanent=True,
            )
        self.hello = hello
        self.link = link
        self._reader = reader
        self._last_rx = time.monotonic()
        link.settimeout(None)
        if self._threaded:
            threading.Thread(target=self._read_loop, args=(link, reader), name="specdeck-reader", daemon=True).start()
        for subscription in list(self._subscriptions.values()):
            self._send_subscribe(subscription)
        self._connected.set()
        self._set_state("connected")

    def _read_hello(self, link):
        link.settimeout(HELLO_TIMEOUT_S)
        reader = FrameReader(link.read)
        try:
            for frame in reader:
                if isinstance(frame, ProtocolError):
                    log.info("skipped a line before the agent's hello (%s): a login banner?", frame)
                    continue
                if frame.get("type") == "hello":
                    return frame, reader
        except (OSError, EOFError) as exc:
            reason = link.failure() or "the agent did not answer: %s" % exc
        else:
            reason = link.failure() or "the agent exited before its handshake"
        link.close()  # after failure(): the exit status and stderr are read from the open link
        raise ConnectError(reason)

    def _set_state(self, state, **detail):
        with self._state_lock:
            self.state = state
            self.state_detail = detail
        if self.on_state:
            self.on_state(state, detail)

    # -- reading

    def _read_loop(self, link, reader):
        reason = "the link closed"
        try:
            for frame in reader:
                self._take(frame)
        except Exception as exc:  # a dying link raises all kinds of errors
            reason = str(exc) or type(exc).__name__
        self._lost(link, reason)

    def _read_one(self, link, wait_s):
        """What the reader thread does, once, on a caller's thread: take the next frame, or
        after `wait_s` without one keep the heartbeat."""
        link.settimeout(wait_s)
        try:
            frame = next(self._reader)
        except socket.timeout:
            self._beat(link)
            return
        except StopIteration:
            self._lost(link, "the link closed")
            return
        except Exception as exc:  # a dying link raises all kinds of errors
            self._lost(link, str(exc) or type(exc).__name__)
            return
        self._take(frame)

    def _take(self, frame):
        self._last_rx = time.monotonic()
        if isinstance(frame, ProtocolError):
            log.warning("skipped a malformed frame from the agent: %s", frame)
            waiter = self._pending.pop(getattr(frame, "request_id", None), None)
            if waiter is not None:  # its id could be read: the caller gets an answer now
                waiter["frame"] = {"ok": False, "error": {"type": "ProtocolError", "message": str(frame)}}
                waiter["event"].set()
            return
        self._dispatch(frame)

    def _dispatch(self, frame):
        if "stream" in frame:
            subscription = self._subscriptions.get(frame["stream"])
            if subscription is not None:
                subscription.deliver(frame)
                if frame.get("end"):
                    self._subscriptions.pop(frame["stream"], None)
            return
        request_id = frame.get("id")
        if request_id in self._pings:
            self.rtt_s = time.monotonic() - self._pings.pop(request_id)
            return
        waiter = self._pending.pop(request_id, None)
        if waiter is not None:
            waiter["frame"] = frame
            waiter["event"].set()

    # -- losing and healing the link

    def _lost(self, link, reason):
        with self._state_lock:
            if link is not self.link or self._closed.is_set():
                return
            self.link = None
            self._connected.clear()
        link.close()
        for waiter in list(self._pending.values()):
            waiter["lost"] = reason
            waiter["event"].set()
        self._pending.clear()
        if not self.reconnect:
            self._set_state("failed", error=reason)
            return
        threading.Thread(target=self._reconnect_loop, args=(reason,), name="specdeck-reconnect", daemon=True).start()

    def _reconnect_loop(self, reason):
        last_start = None
        for attempt in itertools.count(1):
            interval_s = RETRY_INTERVALS_S[min(attempt, len(RETRY_INTERVALS_S)) - 1]
            # Counted from the start of the last attempt: a try that itself waited (a TCP connect
            # timing out) does not add its wait to the interval.
            wait_s = 0.0 if last_start is None else max(0.0, last_start + interval_s - time.monotonic())
            self._set_state("reconnecting", error=reason, attempt=attempt, next_try_at=time.time() + wait_s, next_try_in_s=wait_s)
            if self._closed.wait(wait_s):
                return
            last_start = time.monotonic()
            try:
                self._attach(self._connect(reconnecting=True))
                return
            except ConnectError as exc:
                if exc.permanent:
                    self._set_state("failed", error=str(exc))
                    return
                reason = str(exc)
            except Exception as exc:
                reason = "%s: %s" % (type(exc).__name__, exc)

    def _heartbeat(self):
        while not self._closed.wait(self.heartbeat_s / 2):
            link = self.link
            if link is not None:
                self._beat(link)

    def _beat(self, link):
        """Drop a link silent for `dead_after_s`; ask a quiet one for a byte (a ping)."""
        silent_s = time.monotonic() - self._last_rx
        if silent_s > self.dead_after_s:
            self._lost(link, "no answer from the host for %.0f s" % silent_s)
            return
        if silent_s >= self.heartbeat_s / 2:
            request_id = next(self._ids)
            self._pings[request_id] = time.monotonic()
            if len(self._pings) > 100:
                self._pings.clear()
            try:
                self._write(link, {"id": request_id, "method": "ping"})
            except Exception as exc:
                self._lost(link, str(exc))

    # -- writing

    def _write(self, link, frame):
        data = encode(frame)
        with self._write_lock:
            link.write(data)

    def call(self, method, params=None, timeout=60.0):
        """Send a request and wait for its reply; raise RemoteError for an `error` reply."""
        link = self.link
        if link is None:
            deadline = time.monotonic() + timeout
            # While the link heals, wait for it; a client that gave up (failed, closed) answers at once.
            while not (self.reconnect and self._connected.wait(0.1)):
                if not self.reconnect or self.state in ("failed", "closed") or time.monotonic() > deadline:
                    raise Disconnected("not connected to the host (%s)" % self.state_detail.get("error", self.state))
            link = self.link
        request_id = next(self._ids)
        waiter = {"event": threading.Event(), "frame": None}
        self._pending[request_id] = waiter
        try:
            self._write(link, {"id": request_id, "method": method, "params": params or {}})
        except UnicodeEncodeError:  # raised before a byte went out: the link is fine
            self._pending.pop(request_id, None)
            raise RemoteError("BadRequest", not_utf8_message(params)) from None
        except Exception as exc:
            self._pending.pop(request_id, None)
            self._lost(link, str(exc))
            raise Disconnected("the link to the host dropped: %s" % exc)
        if not self._await(waiter, link, timeout):
            self._pending.pop(request_id, None)
            raise ConnectError("the host did not answer %s within %.0f s" % (method, timeout))
        if waiter.get("lost"):
            raise Disconnected("the link to the host dropped: %s" % waiter["lost"])
        frame = waiter["frame"]
        if frame.get("ok"):
            return frame.get("result")
        error = frame.get("error") or {}
        raise RemoteError(error.get("type", "Error"), error.get("message", "the host agent refused the request"))

    def _await(self, waiter, link, timeout):
        """Whether `waiter` has its answer within `timeout`: from the reader thread, or, before
        it runs, by reading `link` on this thread (a heartbeat's wait at a time) when no other
        caller is reading it, else waiting for the one who is to hand it over."""
        event = waiter["event"]
        deadline = time.monotonic() + timeout
        if not self._threaded:
            # No one read the link while no one waited: its silence counts from this request.
            self._last_rx = max(self._last_rx, time.monotonic())
        while not event.is_set():
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return False
            with self._turn:
                while self._leader and not event.is_set() and not self._threaded:
                    if not self._turn.wait(max(0.0, deadline - time.monotonic())):
                        return event.is_set()
                if event.is_set():
                    return True
                if self._threaded:
                    return event.wait(max(0.0, deadline - time.monotonic()))
                if self._closed.is_set() or self.link is not link:
                    waiter["lost"] = "the client was closed"  # no one will read this link again
                    return True
                self._leader = True
            try:
                self._read_one(link, min(remaining, self.heartbeat_s / 2))
            finally:
                with self._turn:
                    self._leader = False
                    self._turn.notify_all()  # a frame for another caller, or their turn to read
        return True

    def subscribe(self, method, params, on_data, on_end=None):
        """Open a stream; `on_data(data, seq)` runs on the reader thread for each frame."""
        self._start_threads()
        stream_id = "c%d" % next(self._stream_ids)
        subscription = Subscription(self, stream_id, method, dict(params), on_data, on_end)
        self._subscriptions[stream_id] = subscription
        try:
            subscription.started(self.call(method, subscription.resume_params()))
        except Exception:
            self._subscriptions.pop(stream_id, None)
            raise
        return subscription

    def _send_subscribe(self, subscription):
        # On a new link: ask again from where the stream stopped. The reply is not awaited here
        # (we are on the thread that attaches the link); an error ends the stream.
        def resubscribe():
            try:
                subscription.started(self.call(subscription.method, subscription.resume_params(), timeout=30))
            except RemoteError as exc:
                self._subscriptions.pop(subscription.id, None)
                subscription.ended.set()
                if subscription.on_end:
                    subscription.on_end({"error": str(exc)})
            except ConnectError:
                pass  # the next link will try again

        threading.Thread(target=resubscribe, daemon=True).start()
