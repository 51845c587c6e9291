"""One host's model on the laptop: the console's one use of the host's client. It answers
questions (`ask`, on a worker, the answer a message back to whoever asked; `call`, on a worker
already), owns every stream a view follows (started, paused while the view is hidden, resumed
from the last seq on whichever client the host has after a reconnect), keeps the host's jobs
from the one `jobs.events` subscription, follows the host's alerts (one `notify.follow`), and
holds the host's state as typed, aged records: the link's, its jobs (tui/host/jobs.py), its servers'
(tui/host/serving.py), its GPU samples (tui/host/telemetry.py), its training runs (tui/host/training.py) and its alerts
(tui/host/alerts.py).
The console keeps one per host link, so a host shown again shows what it held at once.

Views (panes, screens, the app) read it through `model_of(app)` and get its changes as messages
or attributes the app sets; they never reach into the app or into each other.
"""

import threading

from textual.message import Message

from remote.core.protocol import RemoteError

from ..transport.client import ConnectError
from .jobs import JobBook
from ..messages import AgentError, JobEvents, JobEventsEnded
from ..notify.desktop import HostAlerts
from .asking import NOT_CONNECTED, Failure, Question, call
from .alerts import AlertLog
from .records import Connection
from .serving import Serving
from .telemetry import GpuSamples
from .training import TrainingRuns
from .streams import PaneStream, StreamData

__all__ = ["Answered", "HostModel", "NOT_CONNECTED", "StreamData", "model_of"]


class Answered(Message):
    """A question asked in the background came back; `callback(result)` runs on the UI."""

    def __init__(self, callback, result):
        super().__init__()
        self.callback = callback
        self.result = result


class HostModel:
    """The shown host, as the console knows it. `app` runs the workers and hears job events."""

    def __init__(self, app, client=None, host=""):
        self.app = app
        self.client = client
        self.host = host  # the host's name as typed (alerts carry it to the desktop)
        self.connection = Connection()
        self.book = JobBook()
        self.serving = Serving(self)  # the host's inference servers, as typed, aged records
        self.gpus = GpuSamples()  # the host's latest GPU sample, aged
        self.alerts = AlertLog()  # the host's newest alerts, as AlertRecords
        self.training = TrainingRuns()  # the host's training and data-generation runs, as RunRecords
        self.streams = []  # every stream a view follows, shown or not
        self._events = None  # the jobs.events subscription, of self.client
        self._alerts_client = None  # the client whose alerts are followed (or being subscribed)
        self._alerts = None  # the notify.follow subscription

    # -- questions

    def ask(self, owner, method, params=None, done=None, failed=None, title=None, timeout=60.0, group="request",
            exclusive=False, notify=True, prepare=None):
        """Ask `method` on a worker of `owner`; `done(result)` or `failed(failure)` runs on the UI
        thread (tui/requests.py says the rest). Without a client, `failed` hears it at once and
        None is returned."""
        if self.client is None:
            if failed is not None:
                failed(Failure(NOT_CONNECTED, "NotConnected"))
            return None
        question = Question(owner, self.client, method, params, done, failed, title or method, timeout, notify, prepare, Answered)
        return owner.run_worker(question.run, thread=True, exit_on_error=False, group=group, exclusive=exclusive)

    def call(self, method, params=None, timeout=60.0):
        """On a worker thread: `method`'s result, or HostError with a typed Failure."""
        return call(self.client, method, params, timeout)

    # -- streams

    def follow(self, owner, method, params, on_data, on_end=None, prepare=None, every=0.0, while_hidden=False):
        """A stream `owner` follows while it is `active` (or, `while_hidden`, while it is mounted):
        started now if it is, and whenever `resume(owner)` finds it idle."""
        stream = PaneStream(owner, method, params, on_data, on_end, prepare, every, while_hidden)
        self.streams.append(stream)
        self.resume(owner, [stream])
        return stream

    def unfollow(self, stream):
        if stream in self.streams:
            self.streams.remove(stream)
        stream.ended = True
        stream.pause()

    def cut_off(self, stream):
        """`stream` ended on a client that is no longer the host's (r closed it, and its agent
        ended its streams): not an end to show, but a stream to resume on the host's client."""
        subscription = stream.subscription
        if subscription is None or subscription.client is self.client:
            return False
        stream.pause()
        stream.ended = False
        self.resume(stream.pane, [stream])
        return True

    def streams_of(self, owner):
        return [stream for stream in self.streams if stream.pane is owner]

    def resume(self, owner, streams=None):
        """(Re)start `owner`'s streams that should run and do not, on the client of now: after
        its tab is shown, after a reconnect (r makes a new client), after a stream was added."""
        client = self.client
        if client is None:
            return
        shown = getattr(owner, "active", True)
        idle = [stream for stream in (self.streams_of(owner) if streams is None else streams)
                if not stream.ended and (shown or stream.while_hidden)
                and (stream.subscription is None or stream.subscription.client is not client)]
        if not idle:
            return

        def start():
            for stream in idle:
                try:
                    stream.start(client)
                except RemoteError as exc:
                    stream.ended = True
                    stream.pane.post_message(AgentError(exc.message, stream.method))
                except ConnectError:
                    pass  # the header says why; the next show or reconnect tries again

        owner.run_worker(start, thread=True, exit_on_error=False, group="pane-streams")

    def pause(self, owner):
        """`owner` was hidden: its streams stop, but those that must ring on any pane."""
        for stream in self.streams_of(owner):
            if not stream.while_hidden:
                stream.pause()

    def forget(self, owner):
        """`owner` went away: its streams end."""
        for stream in self.streams_of(owner):
            self.streams.remove(stream)
            stream.pause()
        self.serving.forget(owner)

    # -- the host's alerts

    def follow_alerts(self):
        """Every alert the host raises while the console is open, from one notify.follow per
        client (the client resumes it after a cut link), to the app as HostAlerts: the desktop
        rings, the servers' records take a below_break_even; first the newest it raised before
        (notify.list), for the records only. True when it starts following a new client."""
        client = self.client
        if client is None or self._alerts_client is client:
            return False
        self._alerts_client = client
        post, host = self.app.post_message, self.host

        def follow():
            try:
                recent = [a for a in client.call("notify.list", {}, timeout=15).get("recent") or ()
                          if isinstance(a, dict) and isinstance(a.get("time"), (int, float))]
                post(HostAlerts(sorted(recent, key=lambda a: a["time"]), host, recent=True))
                self._alerts = client.subscribe("notify.follow", {}, lambda data, seq: post(HostAlerts(data.get("records") or [], host)))
            except (RemoteError, ConnectError):
                pass  # an older agent without notifications, or the link dropped: the GPU pane still rings

        self.app.run_worker(follow, thread=True, exit_on_error=False, group="host-alerts")
        return True

    @property
    def alerts_followed(self):
        """Whether the host's alerts reach the console from its client of now."""
        return self._alerts is not None and self._alerts.client is self.client

    def alerts_came(self, message):
        """HostAlerts of this host, on the UI thread: kept as AlertRecords; the servers' records
        take theirs."""
        self.alerts.take(message.alerts, self.host)
        self.serving.take_alerts(message.alerts)

    # -- the host's jobs

    def follow_job_events(self):
        """Subscribe once per client; the client resumes the stream itself after a cut link."""
        client = self.client
        if client is None or (self._events is not None and self._events.client is client):
            return

        def subscribe():
            try:
                self._events = client.subscribe("jobs.events", {}, lambda data, seq: self.app.post_message(JobEvents(data)),
                                                lambda data: self.app.post_message(JobEventsEnded(data)))
            except RemoteError as exc:
                self.app.post_message(AgentError(exc.message, "job events"))
            except ConnectError:
                pass  # the next connection tries again

        self.app.run_worker(subscribe, thread=True, exclusive=True, group="job-events", exit_on_error=False)

    def job_events_ended(self):
        self._events = None

    def apply_job_events(self, data):
        """One frame of job events: (changed ids, records), as JobBook.apply gives them."""
        return self.book.apply(data)

    def close(self):
        """The console shows another host: this one's job events are not for its panes (its
        alerts still reach the desktop, and its records wait for the host to be shown again)."""
        events, self._events = self._events, None
        if events is not None:
            threading.Thread(target=events.cancel, name="specdeck-cancel", daemon=True).start()


def model_of(app):
    """The model of the host `app` shows. An App that is not a console (a test's own) gets one
    on its client as it set it."""
    model = getattr(app, "model", None)
    if not isinstance(model, HostModel):
        model = HostModel(app, getattr(app, "client", None))
        app.model = model
    return model
