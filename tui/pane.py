"""What every pane shares: the client, requests run off the UI thread with failures reported in
one place (tui/requests.py, which screens use too), a status line, job events from the app, and
streams, paused while the pane is hidden unless they must not be (alerts).

A pane is a `Pane` subclass with a `PANE_TITLE` (its tab, and the id other code switches to),
its `BINDINGS`, and optionally `HELP_BINDINGS` (keys of its child widgets to list in help).
The app sets `active` when the pane's tab is shown or hidden (attributes down); the pane
posts messages up (`OpenCheckpoint`, `AgentError`). Panes never call each other.
"""

import threading
import time

from rich.text import Text
from textual.message import Message
from textual.reactive import reactive
from textual.widget import Widget
from textual.widgets import Static

from remote.core.protocol import RemoteError

from .transport.client import ConnectError
from .display import safe_text
from .messages import AgentError
from .requests import NOT_CONNECTED, RequestDone, Requests

__all__ = ["Pane", "PaneStream", "RequestDone", "StreamData"]

SAID_HOLD_S = 8.0  # how long a line said to the user (Pane.say) stays in the status line


class StreamData(Message):
    """Frames of one of a pane's streams, gathered on the client's thread."""

    def __init__(self, stream, items, ended=None, due=False):
        super().__init__()
        self.stream = stream
        self.items = items
        self.ended = ended
        self.due = due  # from the timer of a stream that delivers at most every so often


class PaneStream:
    """A stream a pane follows while it is shown: cancelled when hidden, asked again from the
    last seq it delivered when shown again (so nothing is missed or repeated). One that is
    `while_hidden` runs as long as the pane is mounted (alerts must ring on any pane)."""

    def __init__(self, pane, method, params, on_data, on_end=None, prepare=None, every=0.0, while_hidden=False):
        self.pane = pane
        self.while_hidden = while_hidden
        self.every = every  # at most one delivery to the UI this often: a fast log is one repaint per 0.1 s
        self.delivered = 0.0  # monotonic time of the last delivery
        self.waiting = False  # a timer will deliver what is pending
        self.prepare = prepare  # runs on the client's thread: heavy parsing stays off the UI
        self.method = method
        self.params = dict(params)
        self.on_data = on_data  # on the UI thread, with a list of (data, seq)
        self.on_end = on_end
        self.last_seq = self.params.get("after")
        self.subscription = None
        self.ended = False
        self._generation = 0
        self._lock = threading.Lock()
        self._pending = []

    def start(self, client):
        """Subscribe from the last seq (on a worker thread)."""
        with self._lock:
            if self.ended:
                return
            self._generation += 1
            generation = self._generation
        params = dict(self.params)
        if self.last_seq is not None:
            params["after"] = self.last_seq
        subscription = client.subscribe(
            self.method, params, lambda data, seq: self._data(generation, data, seq), lambda data: self._end(generation, data)
        )
        with self._lock:
            if generation == self._generation:
                self.subscription = subscription
                return
        subscription.cancel()  # paused while it was starting

    def pause(self):
        with self._lock:
            self._generation += 1  # frames still in flight for the old subscription are dropped
            subscription, self.subscription = self.subscription, None
        if subscription is not None:
            threading.Thread(target=subscription.cancel, name="specdeck-pause", daemon=True).start()

    def _data(self, generation, data, seq):  # the client's reader thread
        with self._lock:
            if generation != self._generation:
                return
            if seq is not None and self.last_seq is not None and seq <= self.last_seq:
                return
            self.last_seq = seq
            first = not self._pending
            self._pending.append((self.prepare(data, seq) if self.prepare else data, seq))
        if first:
            self.pane.post_message(StreamData(self, None))

    def take(self):
        with self._lock:
            items, self._pending = self._pending, []
        return items

    def _end(self, generation, data):
        with self._lock:
            if generation != self._generation:
                return
            self.ended = True
        self.pane.post_message(StreamData(self, None, ended=data))


class Pane(Requests, Widget):
    """Base of the console's panes."""

    PANE_TITLE = "Pane"
    HELP_BINDINGS = ()

    DEFAULT_CSS = """
    Pane { height: 1fr; }
    Pane > .pane-status { height: auto; color: $text-muted; }
    Pane > .pane-status.error { color: $error; }
    """

    active = reactive(False, init=False)

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self._streams = []
        self._status_before_failure = None  # the status line a failed connection replaced
        self._said = None  # (a line said to the user, until when: monotonic), kept over the pane's own
        self._own_status = ("", False)  # the pane's own status line, shown again once the said line ends

    def on_mount(self):
        # A failed connection is said in every pane too, not only in the header: a pane waiting
        # for its first data would otherwise still read as if it were coming.
        header = getattr(self.app, "header", None)
        if header is not None and hasattr(header, "detail"):
            self.watch(header, "detail", self._connection_changed)

    def _connection_changed(self, detail):
        if self.app.header.state == "failed":
            if self._status_before_failure is None:
                statuses = self.query(".pane-status")
                self._status_before_failure = str(statuses.first().render()) if statuses else ""
            self.set_status("not connected: %s (r tries again)" % ((detail or {}).get("error") or "the connection failed"), error=True)
        elif self._status_before_failure is not None:
            text, self._status_before_failure = self._status_before_failure, None
            self.set_status(text)

    @classmethod
    def pane_id(cls):
        return cls.PANE_TITLE.lower().replace(" ", "-")

    # -- requests (request() itself: tui/requests.py)

    def not_connected(self, failed):
        # The header already says why; a pane asking on its own must not add a toast each time.
        self.set_status(NOT_CONNECTED, error=True)
        super().not_connected(failed)

    # -- the status line

    def status_line(self, text="", id=None):
        """The widget to yield in compose(): one line under the pane."""
        return Static(Text(text), classes="pane-status", id=id)

    def set_status(self, text, error=False):
        self._own_status = (text, error)
        if error:
            self._said = None  # an error (the connection failed) is said at once, over a key's answer
        elif self._said is not None and time.monotonic() < self._said[1]:
            return  # a line said to the user stays its time; this one is shown after it
        self._put_status(text, error)

    def say(self, text, hold_s=SAID_HOLD_S):
        """Say `text` in the status line for `hold_s` seconds, over the pane's own updates (a key
        that did nothing says why where the eye already is), then show the pane's line again."""
        statuses = self.query(".pane-status")
        if statuses and self._said is None:  # what the line says now comes back after
            self._own_status = (str(statuses.first().render()), statuses.first().has_class("error"))
        self._said = (text, time.monotonic() + hold_s)
        self._put_status(text, False)
        self.set_timer(hold_s, self._said_ended)

    def _said_ended(self):
        if self._said is not None and time.monotonic() >= self._said[1]:
            self._said = None
            self._put_status(*self._own_status)

    def _put_status(self, text, error):
        for status in self.query(".pane-status"):
            status.update(Text(safe_text(text, keep="\n")))  # host paths and messages: not markup, no controls
            status.set_class(error, "error")
            break

    # -- streams

    def follow(self, method, params, on_data, on_end=None, prepare=None, every=0.0, while_hidden=False):
        """Follow a stream while this pane is shown (`while_hidden`: while it is mounted).
        `on_data(items)` gets [(data, seq)] batches on the UI thread, at most one batch per
        `every` seconds; `prepare(data, seq)`, if given, turns each frame into an item on the
        client's thread first."""
        stream = PaneStream(self, method, params, on_data, on_end, prepare, every, while_hidden)
        self._streams.append(stream)
        if (self.active or while_hidden) and self.client is not None:
            self._start_streams([stream])
        return stream

    def unfollow(self, stream):
        if stream in self._streams:
            self._streams.remove(stream)
        stream.ended = True
        stream.pause()

    def _start_streams(self, streams):
        client = self.client
        if client is None or not streams:
            return

        def start():
            for stream in streams:
                try:
                    stream.start(client)
                except RemoteError as exc:
                    stream.ended = True
                    self.post_message(AgentError(exc.message, stream.method))
                except ConnectError:
                    pass  # the header says why; the next show tries again

        self.run_worker(start, thread=True, exit_on_error=False, group="pane-streams")

    def on_stream_data(self, message: StreamData):
        message.stop()
        stream = message.stream
        if stream not in self._streams:
            return
        wait = stream.delivered + stream.every - time.monotonic()
        if wait > 0 and message.ended is None and not message.due:
            if not stream.waiting:
                stream.waiting = True
                self.set_timer(wait, lambda: self.post_message(StreamData(stream, None, due=True)))
            return
        stream.waiting = False
        stream.delivered = time.monotonic()
        items = stream.take()
        if items:
            stream.on_data(items)
        if message.ended is not None:
            self._streams.remove(stream)
            if stream.on_end is not None:
                stream.on_end(message.ended)

    def _idle_streams(self, shown):
        """The streams to (re)start: not following, or following a client that was replaced (r
        after a failure makes a new one); only those that run hidden when not `shown`."""
        client = self.client
        return [stream for stream in self._streams if (shown or stream.while_hidden)
                and (stream.subscription is None or stream.subscription.client is not client)]

    def watch_active(self, active):
        if active:
            self._start_streams(self._idle_streams(True))
            self.pane_shown()
        else:
            for stream in self._streams:
                if not stream.while_hidden:
                    stream.pause()

    def on_client_ready(self, message):
        self._start_streams(self._idle_streams(self.active))
        self.client_ready()

    # -- what subclasses override

    def client_ready(self):
        """The client is connected (again, after a reconnect the client resumes streams itself)."""

    def pane_shown(self):
        """The pane's tab was shown: redraw what changed while hidden."""

    def jobs_changed(self, book, changed, records):
        """The host's jobs changed (see tui/jobs/book.py); called by the app, shown or not."""

    def on_unmount(self):
        for stream in self._streams:
            stream.pause()
