"""Heartbeats: the daemon pings a URL (a GET) every period, so a service that expects the pings
(healthchecks.io, Uptime Kuma's push monitors, Better Stack heartbeats) raises its own alarm
when they stop, and a host that went away (a kernel panic, power, the daemon killed) is told by
someone other than itself.

Kept in `notify/heartbeats.json` of the state directory, 0600 like the channels (a ping URL is a
secret: whoever has it can say the host is well): `{id: h1, url, every_s, created_at}`. The
daemon starts the pinger with itself, so a heartbeat survives its restarts; the first ping after
a start goes at once.

While an alert of category `failed` or `stalled` is open, a Healthchecks URL is pinged at
`URL/fail` (the check turns down with a reason, not only late); other services have no such
endpoint and get the same URL. A Healthchecks URL: on hc-ping.com or healthchecks.io, or a
self-hosted instance's `/ping/<uuid or slug>` path. Open: a stall until its `resumed` follow-up
or its job's end; a failure for FAILED_OPEN_S after it was raised, unless what failed was done
again since and came out well (closed): a job of the same command and directory that succeeded
(a server: that runs again), a download or verification of the same directory that verified (a
repaired file). What holds the heartbeat on `/fail` is kept with its last ping (`held_by`: the
alerts' ids, titles and jobs), so `notify HOST` can name it.

Each ping is one bounded try (send.py: TRY_DEADLINE_S for the whole of it), its result kept in
memory (`last_at`, `last_error`, `next_at`); a ping that fails is not retried before its next
period: the receiving service's grace is for that.
"""

import json
import os
import re
import threading
import time
from urllib.parse import urlsplit, urlunsplit

from ..core.records import replace_file
from ..core.services import Service
from ..core.windows import parse_duration
from .channels import check_url, mask_url, notify_dir
from .send import get

FILE_NAME = "heartbeats.json"
MIN_EVERY_S = 5.0
# A test's shorter floor (tests/test_notify_heartbeat.py); never below 0.2 s.
MIN_EVERY_ENV = "SPECDECK_HEARTBEAT_MIN_S"
DEFAULT_EVERY_S = 300.0
MAX_HEARTBEATS = 20
FAILED_OPEN_S = 3600.0
STALL_OPEN_MAX_S = 2 * 86400.0
HEALTHCHECKS_HOSTS = ("hc-ping.com", "healthchecks.io")
HEALTHCHECKS_PATH = re.compile(r"^/ping/[A-Za-z0-9_-]+(/[A-Za-z0-9_-]+)?/?$")
ALARM_CATEGORIES = ("failed", "stalled")


def min_every_s():
    try:
        floor = float(os.environ.get(MIN_EVERY_ENV) or MIN_EVERY_S)
    except ValueError:
        return MIN_EVERY_S
    return max(0.2, min(MIN_EVERY_S, floor))


def parse_every(every):
    """Seconds between pings from `5m`, `30s` or a number; ValueError under the floor (5 s)."""
    seconds = float(every) if isinstance(every, (int, float)) and not isinstance(every, bool) else parse_duration(every)
    if not seconds >= min_every_s() or seconds > 86400.0:
        raise ValueError("a heartbeat's period is from %g s to 1 d, not %s" % (min_every_s(), every))
    return seconds


def is_healthchecks(url):
    """Whether `url` is a Healthchecks check (it has a `/fail` endpoint)."""
    parts = urlsplit(url)
    host = (parts.hostname or "").lower()
    if any(host == h or host.endswith("." + h) for h in HEALTHCHECKS_HOSTS):
        return True
    return bool(HEALTHCHECKS_PATH.match(parts.path))


def ping_url(url, alarm):
    """The URL to GET: `URL/fail` while an alarm is open and the URL is a Healthchecks one."""
    if not alarm or not is_healthchecks(url):
        return url
    parts = urlsplit(url)
    return urlunsplit((parts.scheme, parts.netloc, parts.path.rstrip("/") + "/fail", parts.query, parts.fragment))


def public(heartbeat, state=None):
    """A heartbeat as replies show it: the URL masked, and how its pings go."""
    shown = {"id": heartbeat["id"], "url": mask_url(heartbeat["url"]), "every_s": heartbeat["every_s"],
             "created_at": heartbeat.get("created_at"), "healthchecks": is_healthchecks(heartbeat["url"])}
    shown.update(state or {"last_at": None, "last_error": None, "last_fail": False, "held_by": [], "next_at": None, "pings": 0,
                                 "failures": 0})
    return shown


def same_work(failed, other):
    """Whether job `other` does what job `failed` did: a download or verification of the same
    directory, else the same command in the same directory."""
    if failed.get("kind") == "download" or other.get("kind") == "download":
        where = (failed.get("meta") or {}).get("local_dir")
        return other.get("kind") == failed.get("kind") and bool(where) and (other.get("meta") or {}).get("local_dir") == where
    return (other.get("kind"), other.get("argv"), other.get("cwd")) == (failed.get("kind"), failed.get("argv"), failed.get("cwd"))


def done_again(job_id, jobs):
    """Whether the failed job `job_id` was done again later and came out well: a job of the same
    work submitted after it that succeeded (a server: that runs)."""
    failed = next((job for job in jobs if job.get("id") == job_id), None)
    if failed is None or not failed.get("argv"):
        return False
    for job in jobs:
        if job is failed or (job.get("submitted_at") or 0) <= (failed.get("submitted_at") or 0) or not same_work(failed, job):
            continue
        if job.get("process_state") == "succeeded" or (job.get("kind") == "server" and job.get("process_state") == "running"):
            return True
    return False


class HeartbeatStore:
    """heartbeats.json, read at each use and written whole (0600)."""

    def __init__(self, directory=None):
        self.path = os.path.join(directory or notify_dir(), FILE_NAME)
        self._lock = threading.Lock()

    def list(self):
        try:
            with open(self.path) as f:
                found = json.load(f).get("heartbeats")
        except (OSError, ValueError, AttributeError):
            return []
        return [h for h in found or [] if isinstance(h, dict) and isinstance(h.get("id"), str) and isinstance(h.get("url"), str)
                and isinstance(h.get("every_s"), (int, float))]

    def add(self, url, every):
        check_url(url)
        heartbeat = {"url": url, "every_s": parse_every(DEFAULT_EVERY_S if every is None else every), "created_at": time.time()}
        with self._lock:
            heartbeats = self.list()
            if len(heartbeats) >= MAX_HEARTBEATS:
                raise ValueError("a host keeps at most %d heartbeats" % MAX_HEARTBEATS)
            numbers = [int(h["id"][1:]) for h in heartbeats if h["id"][1:].isdigit()]
            heartbeat["id"] = "h%d" % (max(numbers + [0]) + 1)
            heartbeats.append(heartbeat)
            replace_file(self.path, json.dumps({"heartbeats": heartbeats}, indent=1), mode=0o600)
        return heartbeat

    def remove(self, heartbeat_id):
        with self._lock:
            heartbeats = self.list()
            kept = [h for h in heartbeats if h["id"] != heartbeat_id]
            if len(kept) == len(heartbeats):
                return False
            replace_file(self.path, json.dumps({"heartbeats": kept}, indent=1), mode=0o600)
            return True


class HeartbeatService(Service):
    """Pings each heartbeat when due, each ping on a thread of its own (a receiver that never
    answers costs that heartbeat its bounded try, never the others' schedule)."""

    name = "heartbeat"
    interval_s = 0.25

    def __init__(self, daemon):
        self.daemon = daemon
        self.store = HeartbeatStore()
        self._due = {}  # id -> monotonic time of its next ping
        self._state = {}  # id -> what public() shows of its pings
        self._busy = set()
        self._lock = threading.Lock()

    def step(self):
        heartbeats = self.store.list()
        now = time.monotonic()
        ids = {h["id"] for h in heartbeats}
        with self._lock:
            for gone in set(self._due) - ids:
                self._due.pop(gone, None)
                self._state.pop(gone, None)
        alarm = None
        for heartbeat in heartbeats:
            with self._lock:
                due = self._due.setdefault(heartbeat["id"], now)
                if due > now or heartbeat["id"] in self._busy:
                    continue
                self._busy.add(heartbeat["id"])
                # On its own period, not drifting by each ping's length; never a burst to catch up.
                self._due[heartbeat["id"]] = max(due + heartbeat["every_s"], now + heartbeat["every_s"] / 2)
            if alarm is None:
                alarm = self.holding()
            threading.Thread(target=self._ping, args=(heartbeat, alarm), name="heartbeat-%s" % heartbeat["id"], daemon=True).start()

    def _ping(self, heartbeat, alarm):
        try:
            url = ping_url(heartbeat["url"], bool(alarm))
            error = get(url)
        except Exception as exc:  # a ping always ends with a result
            error = type(exc).__name__
        finally:
            with self._lock:
                self._busy.discard(heartbeat["id"])
        with self._lock:
            if heartbeat["id"] not in self._due:
                return  # removed meanwhile
            state = self._state.setdefault(heartbeat["id"], {"pings": 0, "failures": 0})
            state.update(last_at=time.time(), last_error=error, last_fail=url != heartbeat["url"], pings=state["pings"] + 1,
                         failures=state["failures"] + (error is not None), held_by=list(alarm) if url != heartbeat["url"] else [])

    def state(self, heartbeat_id):
        with self._lock:
            state = dict(self._state.get(heartbeat_id) or {"pings": 0, "failures": 0, "last_at": None, "last_error": None,
                                                           "last_fail": False, "held_by": []})
            due = self._due.get(heartbeat_id)
        state["next_at"] = None if due is None else time.time() + max(0.0, due - time.monotonic())
        return state

    def forget(self, heartbeat_id):
        with self._lock:
            self._due.pop(heartbeat_id, None)
            self._state.pop(heartbeat_id, None)

    def alarm_open(self):
        """Whether an alert of category failed or stalled is open (see the module's text)."""
        return bool(self.holding())

    def holding(self):
        """The open alerts of category failed or stalled, as `{id, title, job_id}`, oldest first."""
        notify = self.daemon.services.get("notify")
        if notify is None:
            return []
        now = time.time()
        alerts, keys = notify.open_queue().raised_since(now - STALL_OPEN_MAX_S)
        held, jobs = [], None
        for alert in alerts:
            categories = alert.get("categories") or ()
            if alert.get("kind") == "resumed" or not set(categories) & set(ALARM_CATEGORIES):
                continue
            if "stalled" in categories:
                if alert["id"] + ":resumed" in keys or not self._running(alert.get("job_id")):
                    continue
            elif now - (alert.get("time") or 0) >= FAILED_OPEN_S:
                continue
            elif alert.get("job_id"):
                if jobs is None:
                    jobs = self._jobs()
                if done_again(alert["job_id"], jobs):
                    continue
            held.append({"id": alert["id"], "title": alert.get("title"), "job_id": alert.get("job_id")})
        return held

    def _jobs(self):
        try:
            return self.daemon.jobs.list()
        except Exception:  # a listing that fails closes nothing
            return []

    def detail(self):
        return {"heartbeats": len(self._due), "pinging": len(self._busy)}
