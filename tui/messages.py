"""Messages that worker threads and the client's callbacks post to the console's widgets.

Each is a small dataclass. High-rate snapshots (connection state, the job list) replace an
older one still waiting in the queue; log chunks never do, since each holds text that
would be lost: the jobs pane batches them instead.
"""

from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional

from textual.message import Message


@dataclass
class ConnectionChanged(Message):
    """The link to the host changed state: connecting, connected, reconnecting, failed or closed."""

    state: str
    detail: Dict[str, Any] = field(default_factory=dict)

    def can_replace(self, message: Message) -> bool:
        return isinstance(message, ConnectionChanged)


@dataclass
class ClientReady(Message, bubble=False):
    """The client is connected and `app.client` is set; sent to the app and to every pane."""

    hostname: str = ""
    user: str = ""


@dataclass
class AgentError(Message):
    """A request failed: `message` is one human line for a notification."""

    message: str
    title: str = ""


@dataclass
class JobsListed(Message):
    """A fresh snapshot of the host's jobs (jobs.list)."""

    jobs: List[Dict[str, Any]]

    def can_replace(self, message: Message) -> bool:
        return isinstance(message, JobsListed)


@dataclass
class JobSubmitted(Message):
    """A job was started from the console."""

    job: Dict[str, Any]


@dataclass
class JobStopRequested(Message):
    """The agent accepted a stop: TERM was sent, KILL follows after the grace period."""

    job: Dict[str, Any]


@dataclass
class LogOpened(Message):
    """The tail of a job's log (whole lines), shown before following it from `next_offset`."""

    job_id: str
    generation: int
    lines: List[str]
    width: int
    offset: int
    next_offset: int


@dataclass
class LogChunk(Message):
    """New whole log lines from the follow stream, up to byte `next_offset` of the job's log."""

    job_id: str
    generation: int
    lines: List[str]
    width: int
    next_offset: int


@dataclass
class LogEnded(Message):
    """The followed job ended and its log is complete; `job` is its final description."""

    job_id: str
    generation: int
    job: Optional[Dict[str, Any]] = None
    error: str = ""


@dataclass
class LogSaved(Message):
    """A job's full log was written to a local file."""

    job_id: str
    path: str
    size_bytes: int
