"""What every pane shares: its host's model (tui/host/), through which it asks questions
(tui/requests.py, which screens use too) and follows streams, paused while the pane is hidden
unless they must not be (alerts); a status line; job events and the link's state from the app.

A pane is a `Pane` subclass with a `PANE_TITLE` (its tab, and the id other code switches to),
its `BINDINGS`, and optionally `HELP_BINDINGS` (keys of its child widgets to list in help).
The app sets `active` when the pane's tab is shown or hidden and `connection` when the link
changes (attributes down); the pane posts messages up (`OpenCheckpoint`, `AgentError`). Panes never call each other.
"""

import time

from rich.text import Text
from textual.css.query import NoMatches
from textual.reactive import reactive
from textual.widget import Widget
from textual.widgets import Static

from .display import safe_text
from .host.model import model_of
from .host.records import Connection
from .host.streams import PaneStream, StreamData
from .requests import NOT_CONNECTED, RequestDone, Requests

__all__ = ["Pane", "PaneStream", "RequestDone", "StreamData"]

SAID_HOLD_S = 8.0  # how long a line said to the user (Pane.say) stays in the status line


class Pane(Requests, Widget):
    """Base of the console's panes."""

    PANE_TITLE = "Pane"
    SHORT_TITLE = ""  # its tab's title on a narrow terminal (default: PANE_TITLE; tui/widgets/pane_tabs.py)
    HELP_BINDINGS = ()

    DEFAULT_CSS = """
    Pane { height: 1fr; }
    Pane > .pane-status { height: auto; color: $text-muted; }
    Pane > .pane-status.error { color: $error; }
    """

    active = reactive(False, init=False)
    connection = reactive(Connection, init=False, always_update=True)  # the link's state, set by the app

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self._status_before_failure = None  # the status line a failed connection replaced
        self._said = None  # (a line said to the user, until when: monotonic), kept over the pane's own
        self._own_status = ("", False)  # the pane's own status line, shown again once the said line ends
        self._model = None  # the model of the host it was made for, kept as the console shows another

    @property
    def model(self):
        """The model of the host this pane shows (the console's shown host when it was mounted)."""
        if self._model is None:
            self._model = model_of(self.app)
        return self._model

    def on_mount(self):
        connection = self.model.connection
        if connection.failed:  # made while the link is down (a host switched to)
            self.connection = connection

    def watch_connection(self, connection):
        # A failed connection is said in every pane too, not only in the header: a pane waiting
        # for its first data would otherwise still read as if it were coming.
        if connection.failed:
            if self._status_before_failure is None:
                statuses = self.query(".pane-status")
                self._status_before_failure = str(statuses.first().render()) if statuses else ""
            self.set_status("not connected: %s (r tries again)" % connection.error, error=True)
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
        """Follow a stream, through the host's model, while this pane is shown (`while_hidden`:
        while it is mounted). `on_data(items)` gets [(data, seq)] batches on the UI thread, at
        most one batch per `every` seconds; `prepare(data, seq)`, if given, turns each frame
        into an item on the client's thread first."""
        return self.model.follow(self, method, params, on_data, on_end, prepare, every, while_hidden)

    def unfollow(self, stream):
        self.model.unfollow(stream)

    def on_stream_data(self, message: StreamData):
        message.stop()
        stream = message.stream
        model = self.model
        if stream not in model.streams:
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
            if model.cut_off(stream):
                return  # the link it came on was closed (r): it goes on, on the new client
            model.unfollow(stream)
            if stream.on_end is not None:
                stream.on_end(message.ended)

    def watch_active(self, active):
        if active:
            self.model.resume(self)
            self.pane_shown()
        else:
            self.model.pause(self)

    def on_client_ready(self, message):
        self.model.resume(self)
        self.client_ready()

    def jobs_told(self, book, changed, records):
        """The app tells the pane the host's jobs changed; nothing to draw while it closes."""
        if not self.is_attached or self._closing:
            return
        try:
            self.jobs_changed(book, changed, records)
        except NoMatches:
            # Its widgets are being removed (the app is closing; events still come from the
            # client's thread meanwhile): nothing to draw, and the book has the jobs.
            pass

    # -- what subclasses override

    def client_ready(self):
        """The client is connected (again, after a reconnect the client resumes streams itself)."""

    def pane_shown(self):
        """The pane's tab was shown: redraw what changed while hidden."""

    def jobs_changed(self, book, changed, records):
        """The host's jobs changed (see tui/host/jobs.py); called by the app, shown or not."""

    def on_unmount(self):
        self.model.forget(self)  # its host's model: the console may show another host by now
