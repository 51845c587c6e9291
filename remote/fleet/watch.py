"""The fleet watch: a daemon service that keeps, in memory, the two things `fleet.summary` would
otherwise read from disk at every request: which jobs run (from the job watcher's `jobs` topic,
after one listing at start) and the alerts of the last hour that are not resolved (from the
`notify` topic, after the notify queue's newest at start; a GPU alert is resolved when the
`alerts` topic says its condition ended). A server's break-even line is the serving feed's
(its one rule, which caches it), asked through the daemon's services.

Other areas are read only through the daemon: its topics and its services by name, never by
importing them (the core imports no area; areas do not lean on each other's internals).
"""

import collections
import threading
import time

from ..core.words import LIVE_STATES as LIVE
from ..core.services import Service

ALERT_WINDOW_S = 3600.0
ALERTS_KEPT = 200
GPU_ALERT_PREFIX = "gpu:"  # the notify area's key of an alert raised from a GPU alert: gpu:<its id>


class FleetWatch(Service):
    name = "fleet"
    interval_s = 0.25

    def __init__(self, daemon):
        self.daemon = daemon
        self._lock = threading.Lock()
        self._running = None  # job id -> kind, of the jobs that run; None until the first listing
        self._alerts = collections.deque(maxlen=ALERTS_KEPT)  # notify alerts, oldest first
        self._resolved = {}  # GPU alert id -> when its condition ended
        self._cursors = {}

    # -- the service

    def start(self):
        # Cursors first, then what is on disk: a change in between is applied twice, never missed.
        for name in ("jobs", "notify", "alerts"):
            topic = self.daemon.topics.get(name)
            self._cursors[name] = topic.last_seq if topic is not None else None
        self._list_jobs()
        self._load_alerts()

    def step(self):
        for name, handle in (("jobs", self._job_record), ("notify", self._alert_record), ("alerts", self._gpu_alert_record)):
            topic = self.daemon.topics.get(name)
            if topic is None:
                continue
            if self._cursors.get(name) is None:
                self._cursors[name] = topic.last_seq
            while True:
                records, seq, gap = topic.after(self._cursors[name])
                self._cursors[name] = seq
                if gap and name == "jobs":
                    self._list_jobs()  # fell behind the ring: the disk says which jobs run
                if not records:
                    break
                for record in records:
                    handle(record)

    def detail(self):
        with self._lock:
            return {"jobs_running": None if self._running is None else len(self._running), "alerts_kept": len(self._alerts)}

    def _list_jobs(self):
        running = {job["id"]: job.get("kind") for job in self.daemon.jobs.list() if job.get("process_state") in LIVE}
        with self._lock:
            self._running = running

    def _job_record(self, record):
        job, job_id = record.get("job"), record.get("id")
        with self._lock:
            if self._running is None or not job_id:
                return
            if record.get("event") == "removed" or not job or job.get("process_state") not in LIVE:
                self._running.pop(job_id, None)
            else:
                self._running[job_id] = job.get("kind")

    def _load_alerts(self):
        cut = time.time() - ALERT_WINDOW_S
        notify = self.daemon.services.get("notify")
        recent = notify.open_queue().recent(ALERTS_KEPT) if notify is not None else []
        telemetry = self.daemon.services.get("telemetry")
        ended = telemetry.alert_log.list(cut) if telemetry is not None else []
        with self._lock:
            known = {alert.get("id") for alert in self._alerts}
            for alert in reversed(recent):  # recent() is newest first
                if (alert.get("time") or 0) >= cut and alert.get("id") not in known:
                    self._alerts.append(alert)
            for alert in ended:
                if alert.get("ended_at"):
                    self._resolved[alert["id"]] = alert["ended_at"]

    def _alert_record(self, record):
        with self._lock:
            self._alerts.append(record)

    def _gpu_alert_record(self, record):
        if record.get("ended_at") and record.get("id"):
            with self._lock:
                self._resolved[record["id"]] = record["ended_at"]

    # -- questions from fleet.summary

    def jobs_running(self):
        """How many jobs run now (None before the first listing)."""
        with self._lock:
            return None if self._running is None else len(self._running)

    def is_running(self, job_id):
        with self._lock:
            return self._running is not None and job_id in self._running

    def open_alerts(self, now, limit):
        """The alerts raised within ALERT_WINDOW_S of `now` that are not resolved, newest first."""
        cut = now - ALERT_WINDOW_S
        with self._lock:
            alerts = list(self._alerts)
            resolved = dict(self._resolved)
            for gpu_id, ended_at in list(self._resolved.items()):
                if ended_at < cut:
                    del self._resolved[gpu_id]  # its alert has left the window too
        found = []
        for alert in sorted(alerts, key=lambda a: a.get("time") or 0, reverse=True):
            if (alert.get("time") or 0) < cut:
                break
            key = alert.get("id") or ""
            if key.startswith(GPU_ALERT_PREFIX) and key[len(GPU_ALERT_PREFIX):] in resolved:
                continue
            found.append(alert)
            if len(found) >= limit:
                break
        return found

    def break_even(self, server_id):
        """A server's break-even line `{accept_length, source, how}`, or None: the serving feed's
        rule, the one the notify rules and the records use."""
        serving = self.daemon.services.get("serving")
        line = serving.break_even(server_id) if serving is not None else None
        return line if isinstance(line, dict) else None
