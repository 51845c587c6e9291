"""Requests to the host off the UI thread, for panes and screens alike: the mixin through which
a Widget or a Screen asks its host's model (tui/host/model.py), so that a failure is reported
once and the same way everywhere.

`request(method, params, done, failed)` calls `method` on a thread worker and runs
`done(result)` or `failed(failure)` on the UI thread. A refusal or a lost link is one
notification (an `AgentError`, shown by the app) unless the caller shows it itself; an
unexpected exception also reaches `failed`, then the app's one handler of worker errors.
"""

from .host.asking import NOT_CONNECTED, Failure
from .host.model import Answered, model_of

RequestDone = Answered  # the name panes' tests and handlers know

__all__ = ["Failure", "NOT_CONNECTED", "RequestDone", "Requests"]


class Requests:
    """Mixin: `request()` for a Widget or a Screen (anything with `app`, `run_worker` and
    `post_message`)."""

    @property
    def model(self):
        return model_of(self.app)

    @property
    def client(self):
        return self.model.client

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
        if self.client is None:
            self.not_connected(failed)
            return None
        return self.model.ask(self, method, params, done, failed, title, timeout, group, exclusive, notify, prepare)

    def not_connected(self, failed):
        """No client yet: the header already says why; the caller's own state is put right."""
        if failed is not None:
            failed(Failure(NOT_CONNECTED, "NotConnected"))

    def on_answered(self, message: Answered):
        message.stop()
        message.callback(message.result)
