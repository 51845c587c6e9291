"""Requests to the host off the UI thread, for panes and screens alike: one way to call the
agent from the console, so that a failure is reported once and the same way everywhere.

`Requests` is a mixin for a Widget or a Screen: `request(method, params, done, failed)` calls
`method` on a thread worker and runs `done(result)` or `failed(failure)` on the UI thread. A
refusal or a lost link is one notification (an `AgentError`, shown by the app) unless the
caller shows it itself; an unexpected exception also reaches `failed`, then the app's one
handler of worker errors.
"""

from textual.message import Message

from remote.core.protocol import RemoteError

from .transport.client import ConnectError
from .messages import AgentError

NOT_CONNECTED = "not connected to the host yet"


class Failure(str):
    """Why a request failed, one human line; `error_type` is the host's error type
    (`NotFound`, `BadRequest`...), `NotConnected` when the host could not be asked, or
    `InternalError` for an exception of the console's own."""

    def __new__(cls, message, error_type):
        failure = super().__new__(cls, message)
        failure.error_type = error_type
        return failure


class RequestDone(Message):
    """A request made in the background came back; `callback(result)` runs on the UI."""

    def __init__(self, callback, result):
        super().__init__()
        self.callback = callback
        self.result = result


class Requests:
    """Mixin: `request()` for a Widget or a Screen (anything with `app`, `run_worker` and
    `post_message`)."""

    @property
    def client(self):
        return getattr(self.app, "client", None)

    def request(self, method, params=None, done=None, failed=None, title=None, timeout=60.0, group="request", exclusive=False,
                notify=True, prepare=None):
        """Call `method` on a worker thread; `done(result)` runs on the UI thread.

        `params` may be a function, called on the worker (settings read from a file; when it
        returns None there is nothing to send, and `done` gets None);
        `prepare(result)`, if given, also runs there and its return goes to `done` (work that
        must not block the UI, such as writing the config). A failure is shown once, as a
        notification titled `title` (with `notify=False`, or a lost link when `notify` is
        "refusals", not at all: the caller shows it); `failed(failure)` lets the caller put
        its own state right. `exclusive` cancels the group's earlier request."""
        client = self.client
        if client is None:
            self.not_connected(failed)
            return None
        call = _Call(self, client, method, params, done, failed, title or method, timeout, notify, prepare)
        return self.run_worker(call.run, thread=True, exit_on_error=False, group=group, exclusive=exclusive)

    def not_connected(self, failed):
        """No client yet: the header already says why; the caller's own state is put right."""
        if failed is not None:
            failed(Failure(NOT_CONNECTED, "NotConnected"))

    def on_request_done(self, message: RequestDone):
        message.stop()
        message.callback(message.result)


class _Call:
    """One request, run on a worker thread."""

    def __init__(self, owner, client, method, params, done, failed, title, timeout, notify, prepare):
        self.owner = owner
        self.client = client
        self.method = method
        self.params = params
        self.done = done
        self.failed = failed
        self.title = title
        self.timeout = timeout
        self.notify = notify
        self.prepare = prepare

    def run(self):
        try:
            params = self.params() if callable(self.params) else self.params or {}
            result = None if params is None else self.client.call(self.method, params, timeout=self.timeout)
            if self.prepare is not None:
                result = self.prepare(result)
        except (RemoteError, ConnectError) as exc:
            if isinstance(exc, RemoteError):
                failure = Failure(exc.message, exc.type)
            else:
                failure = Failure(str(exc), "NotConnected")
            if self.notify is True or (self.notify == "refusals" and failure.error_type != "NotConnected"):
                self.owner.post_message(AgentError(str(failure), self.title))
            self._answer(self.failed, failure)
            return
        except Exception as exc:
            self._answer(self.failed, Failure("%s: %s" % (type(exc).__name__, exc), "InternalError"))
            raise  # and the app says it, as for every worker that fails
        self._answer(self.done, result)

    def _answer(self, callback, value):
        if callback is not None:
            self.owner.post_message(RequestDone(callback, value))
