"""Asking the host a question: one call, run on a worker thread, that gives a result or a
`HostError` carrying a typed `Failure` (the host's refusal, a lost link, or a fault of the
console's own), whichever of the client's exceptions was raised."""

from remote.core.protocol import RemoteError

from ..transport.client import ConnectError
from ..messages import AgentError

NOT_CONNECTED = "not connected to the host yet"


class Failure(str):
    """Why a request failed, one human line; `error_type` is the host's error type
    (`NotFound`, `BadRequest`...), `NotConnected` when the host could not be asked, or
    `InternalError` for an exception of the console's own."""

    def __new__(cls, message, error_type):
        failure = super().__new__(cls, message)
        failure.error_type = error_type
        return failure


class HostError(Exception):
    """A question to the host that got no answer; `failure` says why."""

    def __init__(self, failure):
        super().__init__(str(failure))
        self.failure = failure


def call(client, method, params=None, timeout=60.0):
    """`method` on the host, on the calling (worker) thread: its result, or HostError."""
    if client is None:
        raise HostError(Failure(NOT_CONNECTED, "NotConnected"))
    try:
        return client.call(method, params or {}, timeout=timeout)
    except RemoteError as exc:
        raise HostError(Failure(exc.message, exc.type)) from exc
    except ConnectError as exc:
        raise HostError(Failure(str(exc), "NotConnected")) from exc


class Question:
    """One question asked for `owner` (a Widget, Screen or App), run on a worker thread; the
    answer comes back to the owner as an `Answered` message (tui/host/model.py)."""

    def __init__(self, owner, client, method, params, done, failed, title, timeout, notify, prepare, answered):
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
        self.answered = answered  # the message class carrying (callback, value) back

    def run(self):
        try:
            params = self.params() if callable(self.params) else self.params or {}
            result = None if params is None else call(self.client, self.method, params, self.timeout)
            if self.prepare is not None:
                result = self.prepare(result)
        except HostError as exc:
            failure = exc.failure
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
            self.owner.post_message(self.answered(callback, value))
