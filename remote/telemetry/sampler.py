"""The telemetry sampler: a daemon service that once a second reads the host (/proc) and every
GPU (NVML), maps GPU processes to jobs, writes the numbers to the history store, publishes the
sample to the `gpus` topic (as a delta of the previous one) and evaluates the alerts.

It records while no console is connected. A host without NVML (no driver, no nvidia-ml-py)
still gets its CPU, memory, load, network and disk figures, with the reason in `nvml.reason`.
"""

import json
import logging
import os
import threading
import time

from ..core import paths
from ..core.streams import Topic
from ..core.services import Service
from ..core.records import replace_file
from .alerts import DEFAULTS, AlertLog, AlertRules, merge_settings, telemetry_dir
from .host import HostReader
from .nvml import Nvml, load_module
from .processes import ProcessMapper
from .sample import delta, rounded, series_points

NVML_RETRY_S = 600.0  # a host without NVML is asked again this rarely (a driver installed later)
DOWNLOAD_DIRS_REFRESH_S = 60.0
SETTINGS_FILE = "settings.json"


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


class TelemetrySampler(Service):
    """`daemon.services.get("telemetry")`: `latest` is the newest full sample."""

    name = "telemetry"
    interval_s = 1.0

    def __init__(self, daemon, nvml_module=None):
        self.daemon = daemon
        self.nvml_module = nvml_module  # a stand-in for pynvml (a recorder, a replay); None: the real one
        self.jobs = daemon.jobs
        self.topic = daemon.topics.setdefault("gpus", Topic("gpus", capacity=600))
        self.alert_topic = daemon.topics.setdefault("alerts", Topic("alerts", capacity=256))
        self.directory = telemetry_dir()
        self.settings = load_settings(self.directory)
        self.alert_log = AlertLog(self.directory)
        self.rules = AlertRules(self.alert_log, self.settings["alerts"])
        self.latest = None
        self.samples = 0
        self.sample_cpu_s = 0.0
        self._lock = threading.Lock()
        self._nvml = None
        self._nvml_state = {"available": False, "reason": "not started yet", "driver_version": None}
        self._nvml_tried_at = None
        self._download_dirs = []
        self._download_dirs_at = None
        self._job_seq = None

    # -- the service

    def start(self):
        self.host = HostReader()
        self.mapper = ProcessMapper(self.jobs.root)
        self._open_nvml()
        job_topic = self.daemon.topics.get("jobs")
        self._job_seq = job_topic.last_seq if job_topic is not None else None
        for alert in self.rules.missed_job_failures(self.jobs.list(), time.time()):
            self._raise(alert)

    def stop(self):
        if self._nvml is not None:
            self._nvml.close()
            self._nvml = None

    def step(self):
        self.sample_once(time.time(), time.monotonic())

    def sample_once(self, now, now_monotonic):
        """One sample at `now` (s since the epoch): store, stream, alerts. Tests pass their own clock."""
        cpu_began = time.thread_time()
        if self._nvml is None and now_monotonic - self._nvml_tried_at >= NVML_RETRY_S:
            self._open_nvml()
        sample = self.take_sample(now, now_monotonic)
        with self._lock:
            previous, self.latest = self.latest, sample
        # The latest sample first, then the record: a reader that takes a snapshot between the
        # two gets this sample twice, never misses it (a delta applied twice changes nothing).
        self.topic.publish(delta(previous, sample))
        history = getattr(self.daemon, "history", None)
        if history is not None:
            history.add_many([point + (now,) for point in series_points(sample)])
        for alert in self.rules.check_sample(sample, now) + self._job_alerts(now):
            self._raise(alert)
        self.samples += 1
        self.sample_cpu_s += time.thread_time() - cpu_began

    def detail(self):
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
        host = rounded(self.host.read(now_monotonic, self._disk_paths(now_monotonic)))
        gpus, held = [], []
        nvml = self._nvml
        if nvml is not None:
            nvml.drain_xid()
            for reader in nvml.gpus:
                gpus.append(rounded(reader.read(now_monotonic)))
                held += [(reader.index,) + process for process in reader.processes()]
        described = self.mapper.describe_all({pid for _, pid, _, _ in held}, now_monotonic)
        processes = [dict(described[pid], gpu_index=index, memory_bytes=memory, kind=kind) for index, pid, memory, kind in held]
        return {"time": round(now, 3), "host": host, "nvml": self._nvml_state, "gpus": gpus, "processes": processes}

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
        """(role, path) of the directories whose free space matters: the state directory, where
        downloads go, and the checkpoint directories named in the settings."""
        if self._download_dirs_at is None or now_monotonic - self._download_dirs_at >= DOWNLOAD_DIRS_REFRESH_S:
            dirs = []
            for job in self.jobs.list(kind="download"):
                local_dir = (job.get("meta") or {}).get("local_dir")
                if local_dir and local_dir not in dirs:
                    dirs.append(local_dir)
            self._download_dirs, self._download_dirs_at = dirs, now_monotonic
        return ([("state", paths.state_dir())] + [("downloads", d) for d in self._download_dirs]
                + [("checkpoints", d) for d in self.settings["checkpoint_dirs"]])

    # -- alerts

    def _job_alerts(self, now):
        topic = self.daemon.topics.get("jobs")
        if topic is None or self._job_seq is None:
            return []
        records, self._job_seq, _ = topic.after(self._job_seq)
        alerts = []
        for record in records:
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
        with self._lock:
            return self.latest

    def configure(self, alerts=None, checkpoint_dirs=None):
        """Change the alert settings (merged over the current ones) and the checkpoint
        directories; kept in the state directory. Returns the settings now in force."""
        with self._lock:
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
