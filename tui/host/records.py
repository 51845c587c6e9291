"""The host's state as the console holds it: typed records, each with the monotonic time it was
received, so that a view shows how old a figure is instead of passing it off as current."""

import time
from dataclasses import dataclass, field
from typing import Any, Dict


@dataclass(frozen=True)
class Connection:
    """The link's state as last reported: connecting, connected, reconnecting, failed or closed;
    `detail` holds the reason of a failure (`error`) or the wait before the next try."""

    state: str = "connecting"
    detail: Dict[str, Any] = field(default_factory=dict)
    received_s: float = field(default_factory=time.monotonic)

    @property
    def failed(self):
        return self.state == "failed"

    @property
    def error(self):
        return (self.detail or {}).get("error") or "the connection failed"

    def age_s(self, now=None):
        return (time.monotonic() if now is None else now) - self.received_s
