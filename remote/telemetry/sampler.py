"""The telemetry feed (remote/core/feeds.py): one source, the host and its GPUs, read once a
second on a worker thread of its own (an NVML call that hangs leaves the service running and
the figure marked stale): /proc and every GPU (NVML), GPU processes mapped to jobs, the numbers
written to the history store (source "telemetry": GPU series labelled {"gpu": index}, host
series {"device": "host"}), the sample published to the `telemetry` topic (as a delta of the
previous one, with `age_s` and `stale`) and the alerts evaluated. One name, `telemetry`, for
the service, the topic, the history source and the wire methods.

It records while no console is connected. A host without NVML (no driver, no nvidia-ml-py)
still gets its CPU, memory, load, network and disk figures, with the reason in `nvml.reason`.

The GPUs of other machines, the nodes of a cluster job, are sampled on those machines by the
service named `nodes` (remote/slurm/nodes.py), which records their series (labelled by node) and
runs their alerts; each sample here carries the latest of each node under `nodes`, so the one
stream shows the host and the nodes.
"""

import json
import logging
import os
import threading
import time

from ..core import paths
from ..core.feed_source import FeedSource
from ..core.feeds import Feed
from ..core.streams import Topic
from ..core.records import replace_file
from ..core.words import LIVE_STATES as LIVE
from .alerts import DEFAULTS, AlertLog, AlertRules, merge_settings, telemetry_dir
from .host import HostReader
from .nvml import Nvml, load_module
from .processes import ProcessMapper
from .report_points import report_points
from .sample import HOST_SOURCE, delta, rounded, series_points

NVML_RETRY_S = 600.0  # a host without NVML is asked again this rarely (a driver installed later)
DOWNLOAD_DIRS_REFRESH_S = 60.0
SETTINGS_FILE = "settings.json"
SOURCE_KEY = "host"  # the one source: this host and its GPUs
HOST_LABELS = {"device": "host"}  # host series beside the GPUs' {"gpu": index} under one source name
RUNNING_MAX = 100  # running jobs whose directories' disks are followed
NODES_SERVICE = "nodes"  # the service that samples a cluster job's nodes, when the daemon runs one


def load_settings(directory):
    """{alerts: {rule: {...}}, checkpoint_dirs: [...]} from the state directory, over the defaults."""
    settings = {"alerts": DEFAULTS, "checkpoint_dirs": []}
    try:
        with open(os.path.join(directory, SETTINGS_FILE)) as f:
            stored = json.load(f)
        settings["alerts"] = merge_settings(DEFAULTS, stored.get("alerts"))
        settings["checkpoint_dirs"] = [d for d in stored.get("checkpoint_dirs", []) if isinstance(d, str)]
    except (OSError, ValueError, AttributeError):
        pass  # none yet, or unreadable: the defaults
    return settings


def save_settings(directory, settings):
    replace_file(os.path.join(directory, SETTINGS_FILE), json.dumps(settings, indent=1))


class HostSource(FeedSource):
    """The host and its GPUs as a feed source: a read is one sample (published, recorded and
    checked for alerts by the feed's `sample_once`, the same path tests drive with a clock)."""

    interval_s = 1.0
    deadline_s = 2.0  # NVML reads take microseconds; a driver that stalls this long is a failing source

    def __init__(self, key, feed):
        super().__init__(key)
        self.feed = feed

    def read(self, budget):
        return self.feed.sample_once(time.time(), time.monotonic())

    def wire_record(self, record):
        return None  # sample_once publishes the delta

    def stale_marker(self, latest, age_s, error, key_field):
        # A delta that changes nothing but says the figures are old (apply_delta keeps the sample).
        return {"time": (latest or {}).get("time"), "stale": True, "age_s": age_s, "error": error}


class TelemetrySampler(Feed):
    """`daemon.services.get("telemetry")`: `latest` is the newest full sample."""

    name = "telemetry"
    key_field = "host"
    topic_capacity = 600

    def __init__(self, daemon, nvml_module=None):
        super().__init__(daemon)
        self.nvml_module = nvml_module  # a stand-in for pynvml (a recorder, a replay); None: the real one
        self.jobs = daemon.jobs
        self.alert_topic = daemon.topics.setdefault("alerts", Topic("alerts", capacity=256))
        self.directory = telemetry_dir()
        self.settings = load_settings(self.directory)
        self.alert_log = AlertLog(self.directory)
        self.rules = AlertRules(self.alert_log, self.settings["alerts"])
        self.latest = None
        self.samples = 0
        self.sample_cpu_s = 0.0
        self._sample_lock = threading.Lock()
        self._nvml = None
        self._nvml_state = {"available": False, "reason": "not started yet", "driver_version": None}
        self._nvml_tried_at = None
        self._download_dirs = []
        self._download_dirs_at = None
        self._job_seq = None
        self._running = {}  # running job id -> [(role, path)] of the directories it writes to

    # -- the service

    def start(self):
        self.host = HostReader()
        self.mapper = ProcessMapper(self.jobs.root)
        self._open_nvml()
        job_topic = self.daemon.topics.get("jobs")
        self._job_seq = job_topic.last_seq if job_topic is not None else None
        for job in self.jobs.list():
            self._follow_job(job)
        for alert in self.rules.missed_job_failures(self.jobs.list(), time.time()):
            self._raise(alert)

    def stop(self):
        super().stop()  # the worker first: it reads NVML
        if self._nvml is not None:
            self._nvml.close()
            self._nvml = None

    def discover(self):
        return {SOURCE_KEY: None}

    def make_source(self, key, spec):
        return HostSource(key, self)

    def sample_once(self, now, now_monotonic):
        """One sample at `now` (s since the epoch): store, stream, alerts. Tests pass their own clock."""
        cpu_began = time.thread_time()
        if self._nvml is None and now_monotonic - self._nvml_tried_at >= NVML_RETRY_S:
            self._open_nvml()
        sample = self.take_sample(now, now_monotonic)
        with self._sample_lock:
            previous, self.latest = self.latest, sample
        # The latest sample first, then the record: a reader that takes a snapshot between the
        # two gets this sample twice, never misses it (a delta applied twice changes nothing).
        self.topic.publish(dict(delta(previous, sample), age_s=0.0, stale=False))
        history = getattr(self.daemon, "history", None)
        if history is not None:
            history.add_many([(self.name, name, HOST_LABELS if source == HOST_SOURCE else labels, value, now)
                              for source, name, labels, value in series_points(sample) + report_points(sample)])
        for alert in self.rules.check_sample(sample, now) + self._job_alerts(now):
            self._raise(alert)
        self.samples += 1
        self.sample_cpu_s += time.thread_time() - cpu_began
        return sample

    def detail_extra(self):
        nvml = self._nvml
        return {
            "gpus": len(nvml.gpus) if nvml else 0,
            "nvml": self._nvml_state,
            "samples": self.samples,
            "cpu_ms_per_sample": round(1000 * self.sample_cpu_s / self.samples, 3) if self.samples else None,
            "nvml_errors": dict(nvml.error_counts) if nvml else {},
            "last_seq": self.topic.last_seq,
        }

    # -- one sample

    def take_sample(self, now, now_monotonic):
        self.host.fill_window_s = float(self.settings["alerts"]["disk_filling"]["window_s"]) or 1.0
        host = rounded(self.host.read(now_monotonic, self._disk_paths(now_monotonic), now))
        gpus, held = [], []
        nvml = self._nvml
        if nvml is not None:
            nvml.drain_xid()
            for reader in nvml.gpus:
                gpus.append(rounded(reader.read(now_monotonic)))
                held += [(reader.index,) + process for process in reader.processes()]
        described = self.mapper.describe_all({pid for _, pid, _, _ in held}, now_monotonic)
        processes = [dict(described[pid], gpu_index=index, memory_bytes=memory, kind=kind) for index, pid, memory, kind in held]
        sample = {"time": round(now, 3), "host": host, "nvml": self._nvml_state, "gpus": gpus, "processes": processes}
        nodes = self._node_samples()
        if nodes:  # only while a cluster job runs; a delta says when a node is gone
            sample["nodes"] = nodes
        return sample

    def _node_samples(self):
        """{node: its latest sample with its job, age and error} of the cluster jobs' nodes."""
        services = getattr(self.daemon, "services", None)
        nodes = services.get(NODES_SERVICE) if services is not None else None
        return nodes.node_samples() if nodes is not None else {}

    def _open_nvml(self):
        self._nvml_tried_at = time.monotonic()
        module, reason = (self.nvml_module, None) if self.nvml_module is not None else load_module()
        if module is None:
            self._nvml_state = {"available": False, "reason": reason, "driver_version": None}
            return
        session = Nvml(module)
        if not session.open():
            self._nvml_state = {"available": False, "reason": session.reason, "driver_version": None}
            return
        self._nvml = session
        self._nvml_state = {"available": True, "reason": session.reason, "driver_version": session.driver_version}
        logging.getLogger("specdeck.telemetry").info("NVML %s: %d GPUs", session.driver_version, len(session.gpus))

    def _disk_paths(self, now_monotonic):
        """(role, path[, job id]) of the directories whose free space matters: the state
        directory, where downloads go, the checkpoint directories named in the settings, and
        each running job's save directory, download directory and working directory."""
        if self._download_dirs_at is None or now_monotonic - self._download_dirs_at >= DOWNLOAD_DIRS_REFRESH_S:
            dirs = []
            for job in self.jobs.list(kind="download"):
                local_dir = (job.get("meta") or {}).get("local_dir")
                if local_dir and local_dir not in dirs:
                    dirs.append(local_dir)
            self._download_dirs, self._download_dirs_at = dirs, now_monotonic
        return ([("state", paths.state_dir())] + [("downloads", d) for d in self._download_dirs]
                + [("checkpoints", d) for d in self.settings["checkpoint_dirs"]]
                + [(role, path, job_id) for job_id, written in self._running.items() for role, path in written])

    def _follow_job(self, job):
        """Keep (or drop) a job's directories as written to while it runs, from its record."""
        if job.get("process_state") not in LIVE:
            self._running.pop(job.get("id"), None)
            return
        if job["id"] not in self._running and len(self._running) >= RUNNING_MAX:
            return
        meta = job.get("meta") or {}
        written = [(role, path) for role, path in (("checkpoints", meta.get("save_dir")), ("downloads", meta.get("local_dir")),
                                                   ("jobs", job.get("cwd"))) if isinstance(path, str) and path]
        self._running[job["id"]] = written

    # -- alerts

    def _job_alerts(self, now):
        topic = self.daemon.topics.get("jobs")
        if topic is None or self._job_seq is None:
            return []
        records, self._job_seq, _ = topic.after(self._job_seq)
        alerts = []
        for record in records:
            if record.get("event") == "removed":
                self._running.pop(record.get("id"), None)
            elif record.get("job"):
                self._follow_job(record["job"])
            if record.get("event") == "ended":
                alert = self.rules.check_job(record["job"], now)
                if alert is not None:
                    alerts.append(alert)
        return alerts

    def _raise(self, alert):
        self.alert_log.append(alert)
        self.alert_topic.publish(alert)

    # -- questions from wire methods

    def latest_sample(self):
        with self._sample_lock:
            return self.latest

    def aged_sample(self):
        """The newest sample with `age_s` and `stale` (older than the source's interval plus its
        deadline) as of now, and `error` when the source is failing; None before the first."""
        with self._sample_lock:
            latest = self.latest
        if latest is None:
            return None
        worker = next(iter(self.workers()), None)
        if worker is None:  # sampled by hand (no worker): judge by the sample's own time
            age = max(0.0, time.time() - latest["time"])
            return dict(latest, age_s=round(age, 3), stale=age > HostSource.interval_s + HostSource.deadline_s)
        return self.aged(worker, latest)

    def snapshot(self):
        return self.aged_sample()

    def configure(self, alerts=None, checkpoint_dirs=None):
        """Change the alert settings (merged over the current ones) and the checkpoint
        directories; kept in the state directory. Returns the settings now in force."""
        with self._sample_lock:
            settings = dict(self.settings)
            if alerts is not None:
                settings["alerts"] = merge_settings(self.settings["alerts"], alerts)
            if checkpoint_dirs is not None:
                settings["checkpoint_dirs"] = [os.path.expanduser(d) for d in checkpoint_dirs]
            save_settings(self.directory, settings)
            self.settings = settings
            self.rules.settings = settings["alerts"]
            self._download_dirs_at = None  # the disk list is rebuilt at the next sample
            return settings
