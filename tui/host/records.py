"""The host's state as the console holds it: typed records, each with the monotonic time it was
received, so that a view shows how old a figure is instead of passing it off as current."""

import time
from collections import deque
from dataclasses import dataclass, field
from typing import Any, Deque, Dict, Optional


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


@dataclass
class Aged:
    """A reply of the host and the monotonic time it came; `key` says what it was asked for
    (a window's seconds), so a view asking for another shows none of it as its own."""

    value: Any
    key: Any = None
    received_s: float = field(default_factory=time.monotonic)

    def age_s(self, now=None):
        return (time.monotonic() if now is None else now) - self.received_s


@dataclass
class ServerRecord:
    """One inference server of the host, as the console last heard of it: its job as the pane
    shows it (name, k, target, drafter, state, how it ended and the engine's first error line;
    None for a server attached by URL), the host's last record and when it came, the chart's points (the
    host's `recent` figures, oldest first), the history store's points per metric, the window's
    figures and advice (one `serving.advise`), its break-even line and saved baseline."""

    id: str
    job: Optional[Dict[str, Any]] = None
    latest: Optional[Aged] = None
    points: Deque[Dict[str, Any]] = field(default_factory=deque)
    history: Dict[str, Aged] = field(default_factory=dict)
    advice: Optional[Aged] = None
    line: Optional[Dict[str, Any]] = None
    baseline: Optional[Dict[str, Any]] = None

    def window(self, window_s):
        """serving.advise's figures over `window_s` ({} before they came for that window)."""
        advice = self.advice
        return (advice.value.get("window") or {}) if advice is not None and advice.key == window_s else {}

    def advice_over(self, window_s):
        advice = self.advice
        return advice.value if advice is not None and advice.key == window_s else None


@dataclass(frozen=True)
class JobRecord:
    """One job of the host as the console last heard of it (`jobs.events`): the job as
    `jobs.get` describes it, and the monotonic time that description came."""

    job: Dict[str, Any]
    received_s: float = field(default_factory=time.monotonic)

    @property
    def id(self):
        return self.job["id"]

    def age_s(self, now=None):
        return (time.monotonic() if now is None else now) - self.received_s


@dataclass(frozen=True)
class AlertRecord:
    """One alert the host raised (notify.list, notify.follow): the alert as the host sent it
    (`{time, kind, category, message, ...}`, its `time` the host's clock) and when it came."""

    alert: Dict[str, Any]
    host: str = ""
    received_s: float = field(default_factory=time.monotonic)

    @property
    def time(self):
        return self.alert.get("time")

    def age_s(self, now=None):
        return (time.monotonic() if now is None else now) - self.received_s
