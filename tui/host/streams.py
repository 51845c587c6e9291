"""A stream a view follows through its host's model: the model starts it on the host's client,
pauses it while its view is hidden and resumes it from the last sequence number delivered, on
whichever client the host has then. The client drops repeated frames (tui/client.py checks each
frame's seq once, for every subscription); the stream only gathers frames for the UI thread."""

import threading

from textual.message import Message


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
