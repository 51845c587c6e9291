"""Alerts a babysitter wants, evaluated on the host once a sample so they fire while the laptop
sleeps: a GPU idle while the job holding it still runs (a stalled training, a hung collective),
GPU memory close to full, heat, throttling, and a job that ends with a non-zero code.

Each alert names its kind (`kind`, and `title` as a person reads it: `download failed`, `GPU
temperature`) and its source (`source`: `GPU 2`, `job j7`, `download j4`, `n2 GPU 5` for a GPU
of a cluster job's node), and its `message` says both: `download j4: verification failed (2
files differ: ...)`, `GPU 2: temperature 91 °C`, `n2 GPU 5: idle 12 min while j9 runs, ...`.

Each rule has a threshold and a duration (the condition must hold that long); the console
sends the per-host settings with `telemetry.configure` and they are kept in the state
directory, so they hold while no console is connected. Alerts are appended to a JSON-lines
file there (one line when one fires, one when it ends) and published to the `alerts` topic;
the host remembers up to when a console has seen them, so the next console shows the rest.
"""

import copy
import itertools
import json
import os
import threading
import time

from ..core import paths
from ..core.records import replace_file, write_json
from ..core.words import how_it_ended, minutes

# One count for every rule set of the daemon: the rules of two nodes fire in the same millisecond
# (their samples arrive together) and their alerts must not share an id.
_ALERT_NUMBERS = itertools.count(1)

# threshold: the rule's own unit (see UNITS); duration_s: how long the condition must hold.
DEFAULTS = {
    "gpu_idle": {"enabled": True, "threshold": 5, "duration_s": 600},
    "memory_full": {"enabled": True, "threshold": 95, "duration_s": 120},
    "temperature": {"enabled": True, "threshold": 85, "duration_s": 60},
    "throttle": {"enabled": True, "reasons": ["hw_slowdown", "hw_thermal", "sw_thermal", "hw_power_brake"], "duration_s": 60},
    "job_failed": {"enabled": True},
    # A disk a running job writes to (remote/notify/disks.py): told when its fill rate says it is
    # full within the later of horizon_s and the jobs' remaining ETA, and again under low_percent
    # free; the rate is the slope over the last window_s (remote/telemetry/host.py).
    "disk_filling": {"enabled": True, "horizon_s": 3600, "low_percent": 2, "window_s": 600},
}
UNITS = {"gpu_idle": "% utilisation, below", "memory_full": "% of GPU memory, above", "temperature": "°C, at or above"}
LOG_MAX_BYTES = 1 << 20  # then the log is rewritten with its newest half
RECENT_JOB_END_S = 86400.0  # at start, failed jobs this recent without an alert get one


def telemetry_dir():
    path = os.path.join(paths.state_dir(), "telemetry")
    os.makedirs(path, mode=0o700, exist_ok=True)
    return path


def merge_settings(base, changes):
    """`base` with the rules and keys of `changes` that it knows; anything else is refused."""
    merged = copy.deepcopy(base)
    for rule, values in (changes or {}).items():
        if rule not in DEFAULTS or not isinstance(values, dict):
            raise ValueError("no alert rule %r (rules: %s)" % (rule, ", ".join(DEFAULTS)))
        for key, value in values.items():
            if key not in DEFAULTS[rule]:
                raise ValueError("alert rule %s has no setting %r (it has %s)" % (rule, key, ", ".join(DEFAULTS[rule])))
            expected = type(DEFAULTS[rule][key])
            if expected in (int, float):
                if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0:
                    raise ValueError("%s.%s must be a number >= 0" % (rule, key))
            elif not isinstance(value, expected):
                raise ValueError("%s.%s must be a %s" % (rule, key, expected.__name__))
            merged[rule][key] = value
    return merged


def clock(epoch):
    return time.strftime("%H:%M", time.localtime(epoch))


# What each rule's alert is called where a person reads it (a notification's title).
KIND_TITLES = {"gpu_idle": "GPU idle", "memory_full": "GPU memory full", "temperature": "GPU temperature",
               "throttle": "GPU throttled", "job_failed": "job failed"}
# A job's kind as a person names the job: `download j4`, `server j5`, `job j7` (a plain command).
JOB_WORDS = {"command": "job", "verify": "verification", "benchmark": "benchmark", "datagen": "data generation"}


def alert_source(alert):
    """What an alert is about: `GPU 2`, `job j7`, `download j4`, `server j5`."""
    if alert.get("source"):
        return alert["source"]
    if alert["kind"] == "job_failed":
        kind = alert.get("job_kind") or "command"
        return "%s %s" % (JOB_WORDS.get(kind, kind), alert.get("job_id"))
    if alert.get("node"):
        return "%s GPU %s" % (alert["node"], alert.get("gpu_index"))
    return "GPU %s" % alert.get("gpu_index")


def alert_title(alert):
    """A notification's title: the alert's kind (`download failed`, `verification failed`, `GPU
    temperature`): a download that came whole but does not match is a verification that failed."""
    if alert["kind"] == "job_failed" and alert.get("job_kind") == "download" and (alert.get("detail") or "").startswith("verification failed"):
        return "verification failed"
    if alert["kind"] == "job_failed" and alert.get("job_kind") not in (None, "command"):
        return "%s failed" % JOB_WORDS.get(alert["job_kind"], alert["job_kind"])
    return KIND_TITLES.get(alert["kind"], alert["kind"].replace("_", " "))


def alert_text(alert):
    """One line for a person, naming the alert's source, in this process's local time:
    `GPU 3: idle 40 min while j9 ran, 02:10-02:50`, `job j7 exited 1 at 03:12`,
    `download j4: verification failed (2 files differ: ...) at 03:12`."""
    kind, source = alert["kind"], alert_source(alert)
    if kind == "job_failed":
        detail = alert.get("detail") or "failed"
        # `job j7 exited 3`; a reason of its own after a colon: `download j4: verification failed (...)`
        joined = "%s %s" % (source, detail) if detail.startswith(("exited", "was ", "failed")) else "%s: %s" % (source, detail)
        return "%s at %s" % (joined, clock(alert["started_at"]))
    ended = alert.get("ended_at")
    span = "%s-%s" % (clock(alert["started_at"]), clock(ended)) if ended else "since %s" % clock(alert["started_at"])
    held = minutes((ended or time.time()) - alert["started_at"])
    if kind == "gpu_idle":
        return "%s: idle %s while %s %s, %s" % (source, held, alert.get("job_id"), "ran" if ended else "runs", span)
    if kind == "memory_full":
        return "%s: memory %s%% full for %s, %s" % (source, alert.get("value"), held, span)
    if kind == "temperature":
        return "%s: temperature %s °C for %s, %s" % (source, alert.get("value"), held, span)
    if kind == "throttle":
        return "%s: throttled (%s) for %s, %s" % (source, alert.get("value"), held, span)
    return "%s: %s, %s" % (source, kind.replace("_", " "), span)


def job_failure_detail(job):
    """Why a job ended badly, in a few words: a download's verdict (`verification failed (2
    files differ: ...)`), a server's first error line, else how its process ended."""
    progress = job.get("progress") or {}
    verdict = progress.get("verdict") or {}
    if verdict.get("status") == "mismatch":
        # The verdict names the first few mismatched files and counts the rest in files_more.
        more = verdict.get("files_more")
        count = len(verdict.get("files") or [verdict.get("file")]) + (more if isinstance(more, int) and more > 0 else 0)
        return "verification failed (%s: %s)" % ("1 file differs" if count == 1 else "{:,} files differ".format(count), verdict.get("message"))
    if verdict.get("status") == "corrupt":
        return "verification failed (%s)" % verdict.get("message")
    if job.get("signal"):
        ended = "was killed by signal %d" % job["signal"]
    elif job.get("exit_code") is not None:
        ended = "exited %d" % job["exit_code"]
    else:
        ended = how_it_ended(job) if job.get("process_state") == "lost" else "failed"
    reason = progress.get("first_error") or progress.get("error")
    if reason is None and job.get("kind") == "server":
        reason = _server_first_error(job["id"])
    if reason is None and verdict.get("status") == "error":
        reason = verdict.get("message")
    if reason and not reason.startswith(ended):
        return "%s: %s" % (ended, reason)
    return reason or ended


def _server_first_error(job_id):
    """The engine's first error line in a server job's log (the alert fires before the serving
    feed notes it in the job's progress)."""
    from ..serving.root_cause import first_error_in

    return first_error_in(os.path.join(paths.jobs_dir(), job_id, "output.log"))


class AlertLog:
    """alerts.jsonl (fired and ended records) and the time up to which a console saw them."""

    def __init__(self, directory=None):
        self.directory = directory or telemetry_dir()
        self.path = os.path.join(self.directory, "alerts.jsonl")
        self._seen_path = os.path.join(self.directory, "alerts-seen.json")
        self._lock = threading.Lock()

    def append(self, alert):
        line = json.dumps(alert, separators=(",", ":")) + "\n"
        with self._lock:
            with open(self.path, "a") as f:
                f.write(line)
            if os.path.getsize(self.path) > LOG_MAX_BYTES:
                self._shrink()

    def _shrink(self):
        alerts = self._read()
        keep = alerts[len(alerts) // 2:]
        replace_file(self.path, "".join(json.dumps(alert, separators=(",", ":")) + "\n" for alert in keep))

    def _read(self):
        """Every alert, the latest record of each id, in the order they fired."""
        alerts = {}
        try:
            with open(self.path) as f:
                for line in f:
                    try:
                        alert = json.loads(line)
                    except ValueError:
                        continue  # a line cut by a crash mid-write
                    alerts[alert["id"]] = alert
        except OSError:
            pass
        return sorted(alerts.values(), key=lambda a: a["fired_at"])

    def list(self, since=None):
        """Alerts that fired or ended after `since` (all when None)."""
        with self._lock:
            alerts = self._read()
        if since is None:
            return alerts
        return [a for a in alerts if a["fired_at"] > since or (a.get("ended_at") or 0) > since]

    def seen_until(self):
        try:
            with open(self._seen_path) as f:
                return float(json.load(f)["until"])
        except (OSError, ValueError, KeyError, TypeError):
            return 0.0

    def mark_seen(self, until):
        until = max(until, self.seen_until())
        write_json(self._seen_path, {"until": until})
        return until


class AlertRules:
    """Evaluates the rules on each sample and on job events; `check()` returns new records. The
    rules of a cluster job's node (`node`: its name) name the node in each alert."""

    def __init__(self, log, settings, node=None):
        self.log = log
        self.settings = settings
        self.node = node
        self._since = {}  # (rule, gpu index) -> (time the condition began, job id)
        self._open = {}  # (rule, gpu index) -> the fired alert

    def _new(self, kind, started_at, now, **fields):
        alert = {"id": "a%d-%d" % (int(now * 1000), next(_ALERT_NUMBERS)), "kind": kind, "started_at": started_at, "fired_at": now,
                 "ended_at": None}
        alert.update(fields)
        if self.node:
            alert["node"] = self.node
        alert["source"] = alert_source(alert)
        alert["title"] = alert_title(alert)
        alert["message"] = alert_text(alert)
        return alert

    def check_sample(self, sample, now):
        """Alerts that fire or end with this sample."""
        jobs_by_gpu = {}
        for process in sample.get("processes", ()):
            if process.get("job_id"):
                jobs_by_gpu.setdefault(process["gpu_index"], process["job_id"])
        conditions = {}
        for gpu in sample.get("gpus", ()):
            index = gpu["index"]
            for rule, value, job_id in self._conditions(gpu, jobs_by_gpu.get(index)):
                conditions[(rule, index)] = (value, job_id)
        changes = []
        for key in list(self._since):
            if key not in conditions:
                del self._since[key]
                alert = self._open.pop(key, None)
                if alert is not None:
                    ended = dict(alert, ended_at=now)
                    ended["message"] = alert_text(ended)
                    changes.append(ended)
        for key, (value, job_id) in conditions.items():
            rule, index = key
            began = self._since.get(key)
            if began is None or began[1] != job_id:  # another job on the GPU: another stall
                began = self._since[key] = (now, job_id)
            if key not in self._open and now - began[0] >= self.settings[rule]["duration_s"]:
                alert = self._new(rule, began[0], now, gpu_index=index, job_id=job_id, value=value)
                self._open[key] = alert
                changes.append(alert)
        return changes

    def _conditions(self, gpu, job_id):
        """(rule, value shown, job id) for each rule whose condition holds on this GPU now."""
        s = self.settings
        utilization = gpu.get("utilization_percent")
        if s["gpu_idle"]["enabled"] and job_id and utilization is not None and utilization < s["gpu_idle"]["threshold"]:
            yield "gpu_idle", utilization, job_id
        used, total = gpu.get("memory_used_bytes"), gpu.get("memory_total_bytes")
        if s["memory_full"]["enabled"] and used is not None and total:
            percent = 100.0 * used / total
            if percent >= s["memory_full"]["threshold"]:
                yield "memory_full", round(percent), job_id
        temperature = gpu.get("temperature_c")
        if s["temperature"]["enabled"] and temperature is not None and temperature >= s["temperature"]["threshold"]:
            yield "temperature", temperature, job_id
        reasons = set(gpu.get("throttle_reasons") or ()) & set(s["throttle"]["reasons"])
        if s["throttle"]["enabled"] and reasons:
            yield "throttle", ", ".join(sorted(reasons)), job_id

    def check_job(self, job, now):
        """An alert for a job that ended badly (not for one stopped on purpose), or None."""
        if not self.settings["job_failed"]["enabled"] or job.get("process_state") not in ("failed", "lost"):
            return None
        ended_at = job.get("ended_at") or now
        return self._new("job_failed", ended_at, now, job_id=job["id"], job_kind=job.get("kind") or "command",
                         detail=job_failure_detail(job), ended_at=ended_at, name=job.get("name"))

    def missed_job_failures(self, jobs, now):
        """At start: failed jobs that ended recently while no daemon watched and have no alert yet."""
        alerted = {a.get("job_id") for a in self.log.list() if a["kind"] == "job_failed"}
        found = []
        for job in jobs:
            if job["id"] in alerted or not job.get("ended_at") or now - job["ended_at"] > RECENT_JOB_END_S:
                continue
            alert = self.check_job(job, now)
            if alert is not None:
                found.append(alert)
        return found
