"""Messages that worker threads and the client's callbacks post to the console's widgets.

Each is a small dataclass. High-rate snapshots (connection state) replace an older one still
waiting in the queue; job events never do, since each holds a change that would be lost.
"""

from dataclasses import dataclass, field
from typing import Any, Dict

from textual.message import Message


@dataclass
class ConnectionChanged(Message):
    """The link to the host changed state: connecting, connected, reconnecting, failed or closed."""

    state: str
    detail: Dict[str, Any] = field(default_factory=dict)
    host: str = ""  # the host as typed; "" in a console of one host's panes

    def can_replace(self, message: Message) -> bool:
        return isinstance(message, ConnectionChanged) and message.host == self.host


@dataclass
class ClientReady(Message, bubble=False):
    """A host's client is connected; sent to the app, which sets `app.client` when the host is
    the one shown and then sends it on to every pane."""

    hostname: str = ""
    user: str = ""
    host: str = ""  # the host as typed


@dataclass
class AgentError(Message):
    """A request failed: `message` is one human line for a notification."""

    message: str
    title: str = ""


@dataclass
class LogSaved(Message):
    """A job's full log was written to a local file."""

    job_id: str
    path: str
    size_bytes: int


@dataclass
class JobEvents(Message):
    """A frame of the host's job events (tui/host/jobs.py applies it). Never merged: each
    record is a change some pane may announce."""

    data: Dict[str, Any]


@dataclass
class JobEventsEnded(Message):
    """The host ended the job events stream; `data` is its end frame's (`error` says why)."""

    data: Dict[str, Any]


@dataclass
class OpenCheckpoint(Message):
    """Open `path` (a directory or file on the host) in the Tensors pane."""

    path: str
