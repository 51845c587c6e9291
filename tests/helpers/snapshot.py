"""The console with a fixed host state, for snapshot tests: no connection, a fixed clock, and
the job events a real agent sent for a few typical jobs (ids, states, progress), so each pane
renders the same screen on every machine."""

import json
import types
from pathlib import Path

from tui import app as app_module
from tui.messages import JobEvents
from remote.training import curves, logparse
from tui.downloads.pane import DownloadsPane
from tui.telemetry.pane import GpusPane
from tui.training.pane import TrainingPane

DATA = Path(__file__).resolve().parent.parent / "data"  # tests/data
NOW = 1_780_000_000.0  # a fixed "now" for runtimes

JOBS = [
    {"id": "j7", "name": "AQ-MedAI/Kimi-K2-Instruct-eagle3 -> /data/k2-eagle3", "kind": "download", "state": "verified",
     "process_state": "succeeded", "exit_code": 0, "signal": None, "submitted_at": NOW - 7200, "started_at": NOW - 7200,
     "ended_at": NOW - 7159, "pid": 4100, "log_bytes": 812, "error": None,
     "meta": {"repo": "AQ-MedAI/Kimi-K2-Instruct-eagle3", "repo_type": "model", "local_dir": "/data/k2-eagle3", "files": [], "include": [], "exclude": []},
     "progress": {"job": "download", "repo": "AQ-MedAI/Kimi-K2-Instruct-eagle3", "local_dir": "/data/k2-eagle3", "state": "verified", "final": True,
                  "file_counts": {"total": 2, "done": 2, "verified": 2, "failed": 0, "working": 0}, "current_files": [], "failed_files": [],
                  "bytes_total": 2382320506, "bytes_done": 2382320506, "bytes_checked": 2382320506, "rate_bytes_per_s": 0, "eta_s": 0.0,
                  "verdict": {"status": "verified", "message": "2 files match the hub's sha256"}, "error": None}},
    {"id": "j8", "name": "vllm serve K2.5 + eagle3 (K=3)", "kind": "server", "state": "running", "process_state": "running",
     "exit_code": None, "signal": None, "submitted_at": NOW - 11525, "started_at": NOW - 11525, "ended_at": None, "pid": 5120,
     "log_bytes": 90211, "error": None, "meta": {}},
    {"id": "j9", "name": "finetune aq-k2 -> k2.5", "kind": "training", "state": "failed", "process_state": "failed",
     "exit_code": 1, "signal": None, "submitted_at": NOW - 20411, "started_at": NOW - 20411, "ended_at": NOW - 3000, "pid": 6001,
     "log_bytes": 3_000_000, "error": None, "meta": {}},
    {"id": "j10", "name": "team/tiny-drafter -> /data/tiny", "kind": "download", "state": "downloading", "process_state": "running",
     "exit_code": None, "signal": None, "submitted_at": NOW - 30, "started_at": NOW - 30, "ended_at": None, "pid": 7000,
     "log_bytes": 100, "error": None, "meta": {"repo": "team/tiny-drafter", "local_dir": "/data/tiny"},
     "progress": {"job": "download", "repo": "team/tiny-drafter", "local_dir": "/data/tiny", "state": "downloading", "final": False,
                  "file_counts": {"total": 2, "done": 1, "verified": 1, "failed": 0, "working": 1}, "failed_files": [],
                  "current_files": [{"path": "model.safetensors", "bytes_total": 1_000_000_000, "bytes_done": 420_000_000, "bytes_checked": 420_000_000, "state": "downloading"}],
                  "bytes_total": 1_000_000_900, "bytes_done": 420_000_900, "bytes_checked": 420_000_900, "rate_bytes_per_s": 52_400_000, "eta_s": 11.1,
                  "verdict": None, "error": None}},
    {"id": "j11", "name": "speculators train tiny eagle3 (CPU)", "kind": "training", "state": "training", "process_state": "running",
     "exit_code": None, "signal": None, "submitted_at": NOW - 40, "started_at": NOW - 40, "ended_at": None, "pid": 8200,
     "log_bytes": 41_000, "error": None,
     "meta": {"save_dir": "/data/runs/tiny-eagle3", "break_even": 2.46, "epochs_total": 2, "steps_total": None},
     "progress": {"state": "training", "step": 21, "steps_total": None, "epoch": 1, "epochs_total": 2, "steps_per_s": 0.62,
                  "eta_s": 0.0, "loss": 0.075, "predicted_accept_length": 1.03, "validation_predicted_accept_length": 1.03,
                  "updated_at": NOW - 2}},
]

# download.files of the download the pane shows, as the host answers it (the records above carry only a summary).
FILES = {
    "j10": [{"path": "config.json", "bytes_total": 900, "bytes_done": 900, "bytes_checked": 900, "state": "verified"},
            {"path": "model.safetensors", "bytes_total": 1_000_000_000, "bytes_done": 420_000_000, "bytes_checked": 420_000_000, "state": "downloading"}],
}


def training_curves():
    """training.curves of j11 as the host answers it: the steps and validations of a real
    speculators CPU run's log (tests/data), its two checkpoints, the second being measured."""
    records = logparse.parse_text((DATA / "speculators-train-80cols.log").read_text())
    steps, validation = [], []
    for record in records:
        public = curves.public_record(record, record["time"])
        if record["kind"] == "step":
            steps.append(public)
        else:
            public["step"] = steps[-1]["step"]
            validation.append(public)
    listed = []
    for epoch, entry in enumerate(validation):
        listed.append({"path": "/data/runs/tiny-eagle3/%d" % epoch, "name": str(epoch), "step": entry["step"], "epoch": epoch,
                       "format": "speculators", "verdict": "below break-even", "best": epoch == 1,
                       "validation": {"loss": entry["loss"]}, "predicted_accept_length": entry["predicted_accept_length"],
                       "predicted_from": "validation",
                       "measured_accept_length": None,
                       "measure": {"state": "running", "phase": "baseline", "job": "j12"} if epoch == 1 else None})
    return {"id": "j11", "steps": steps, "validation": validation, "latest": steps[-1],
            "predicted_accept_length": validation[-1]["predicted_accept_length"], "steps_per_s": 0.62, "eta_s": 0.0,
            "break_even": 2.46, "break_even_source": "run", "alerts": [], "checkpoints": listed}


class FixedClock:
    """Stands in for the `time` module inside the pane modules: runtimes use a fixed now."""

    def __init__(self, real):
        self._real = real

    def time(self):
        return NOW

    def strftime(self, fmt, t=None):
        return self._real.strftime(fmt, self._real.gmtime(NOW) if t is None else t)

    def __getattr__(self, name):
        return getattr(self._real, name)


class SnapshotApp(app_module.SpecdeckApp):
    """The console as it looks connected to `gpu01` with the jobs above."""

    CSS_PATH = str(Path(app_module.__file__).with_name("app.tcss"))  # not relative to tests/

    def _connect(self):
        header = self.header
        header.host_label, header.hostname = "root@gpu01", "gpu01"
        header.state, header.rtt_s = "connected", 0.011
        self.connection_state = "connected"
        self.post_message(JobEvents({"snapshot": [dict(job) for job in JOBS], "records": []}))
        # 20 s of 8 GPUs as the sampler streamed them (a replay of the H200 recording, two of its
        # GPUs played as eight), delivered as the telemetry stream would.
        samples = json.loads((DATA / "snapshot_gpus.json").read_text())
        self.query_one(GpusPane)._on_samples([(sample, number) for number, sample in enumerate(samples)])
        self.query_one(TrainingPane)._loaded("j11", training_curves())
        # The page of files the Downloads pane would ask for, of the download it selects (the newest).
        self.query_one(DownloadsPane).files_page = {"id": "j10", "total": 2, "offset": 0, "files": FILES["j10"], "final": True}

    def _show_rtt(self):
        pass


def freeze(monkeypatch):
    """Fixed time for everything a pane shows (runtimes, start times, the header clock)."""
    import time as real_time

    from tui import display
    from tui.jobs import model as jobs_model
    from tui.jobs import pane as jobs_pane
    from tui.widgets import header

    clock = FixedClock(real_time)
    for module in (display, jobs_model, jobs_pane, header):
        monkeypatch.setattr(module, "time", clock)
    monkeypatch.setattr(display, "format_time", lambda epoch: "-" if not epoch else "%02d:%02d" % divmod(int((epoch % 86400) // 60), 60))
    return types.SimpleNamespace(now=NOW)


class NoGpuSnapshotApp(SnapshotApp):
    """The same console on a host without GPUs (NVML did not load): the same 20 s of host
    figures, with a CPU that climbs, and no GPU, so the GPUs pane charts the host."""

    def _connect(self):
        super()._connect()
        samples = json.loads((DATA / "snapshot_gpus.json").read_text())
        for number, sample in enumerate(samples):
            sample["gpus"], sample["processes"] = [], []
            sample["nvml"] = {"available": False, "reason": "NVML did not start: NVML Shared Library Not Found", "driver_version": None}
            sample["host"]["cpu_percent"] = 10.0 + 4 * number
        pane = self.query_one(GpusPane)
        pane.model.gpus.latest = None
        pane.series = {}
        pane._on_samples([(sample, number) for number, sample in enumerate(samples)])
