"""Wire methods of the morning report: the report over a window, the stream a console follows
while it watches (so the daemon knows when nobody did), and the daily digest's time."""

import threading
import time

from .. import AGENT_VERSION
from ..core import streams
from ..core.protocol import BadRequest
from ..core.services import Service
from ..core.windows import window_bounds
from ..core.wire import method
from . import build, digest, presence, text


class ReportService(Service):
    """Records the daemon's start and holds when a console last followed it."""

    name = "report"
    interval_s = 60.0

    def __init__(self, daemon):
        self.daemon = daemon
        self.presence = None
        self._lock = threading.Lock()

    def start(self):
        with self._lock:  # the service's thread and a request may come first at the same time
            if self.presence is None:
                self.presence = presence.Presence()
                presence.record_start(self.daemon.started_at, self.daemon.hello.get("daemon_pid"), AGENT_VERSION)

    def step(self):
        pass

    def detail(self):
        return {"last_watched_at": self.presence.last_watched_at if self.presence else None}


# The daemon starts these with itself (see remote/core/wire.py, area_services).
SERVICES = (ReportService, digest.DigestService)


def _presence(call):
    found = call.service(ReportService.name)
    found.start()
    return found.presence


@method("report.get")
def report_get(call):
    """The night on this host in one screen. Params: `since_s` (the window's length, s; default
    12 h) or `start`, `end` (s since the epoch; default now), `text` (true: add the report as
    text, as `specdeck report` prints it). Reply: `{since, until, host, jobs: [{id, name, kind,
    state, exit_code, signal, started_at, ended_at, started_in_window, running, runtime_s,
    gpu_utilization_percent: {mean, max} | null}], training: [{id, name, state, steps: {from,
    to}, loss: {from, to}, checkpoints, best_checkpoint: {name, step, verdict,
    predicted_accept_length, measured_accept_length} | null}], servers: [{id, name, state,
    accept_length: {min, median, max} | null, samples, break_even, under_break_even_s}],
    downloads: [{id, repo, state, finished, verdict, bytes_total, bytes_done, ended_at, error}],
    alerts: [{id, time, kind, title, urgent, job_id, channels: [{channel, state: sent | pending
    | expired, tries, error}]}], disks: [{path, lowest_free_bytes, lowest_at, free_bytes_now,
    total_bytes}], daemon: {started_at, uptime_s, pid, restart_count, restarts: [{at, pid, version}],
    service_restarts: [{name, restarts}]}, errors: {section: why it could not be read}, cut:
    [sections not read before the deadline], took_s, last_watched_at, text?}`. At most 200 rows
    a section (the newest)."""
    try:
        since, until = window_bounds(time.time(), call.param("start", float), call.param("end", float),
                                     call.param("since_s", float), default_s=12 * 3600.0)
    except ValueError as exc:
        raise BadRequest(str(exc))
    report = build.build(call.daemon, since, until)
    report["last_watched_at"] = _presence(call).last_watched_at
    if call.param("text", bool):
        report["text"] = text.render(report)
    return report


@method("report.watch")
def report_watch(call):
    """Follow while a console watches this host: the stream sends nothing, and while it is open
    the daemon counts as watched. Params: `stream`. Reply: `{stream, seq, snapshot,
    last_watched_at}`: when a console last followed before this one (null: never)."""
    found = _presence(call)
    last = found.last_watched_at
    reply = streams.follow(call, presence.WatchSource(found))
    reply["last_watched_at"] = last
    return reply


@method("notify.digest")
def notify_digest(call):
    """Send the report's text as one message each day at a time of the host's clock, through every
    channel. Params: `at` (`08:00`, `08:00:30`, or `off` to stop). Reply: `{digest: {at, set_at,
    last_day, last_sent_at, last_results: {channel: null (delivered) | why not}, next_at} |
    null}`."""
    at = call.param("at", str, required=True)
    store = digest.DigestStore()
    now = time.time()
    if at.strip().lower() == "off":
        store.remove()
        return {"digest": None}
    try:
        entry = store.set(at, now)
    except ValueError as exc:
        raise BadRequest(str(exc))
    call.daemon.services.wake(digest.DigestService.name)
    return {"digest": digest.public(entry, now)}


@method("notify.digest_get")
def notify_digest_get(call):
    """The daily digest, as notify.digest sets it, or null. Params: none. Reply: `{digest}`."""
    return {"digest": digest.public(digest.DigestStore().get(), time.time())}
