"""A cluster node's GPUs, both ends: the agent's `node-sample` command reads them on the node
itself, by a step of the Slurm job that holds it (remote/slurm/nodes.py starts it with srun), one
JSON line a sample on stdout, named by the node (SLURMD_NODENAME); on the login host
`NodeRecorder` records each line as telemetry labelled by node (the history store under the
source `telemetry`, the GPU alert rules per node, the node named in each alert). The same NVML code as the host's sampler reads it, replay included
(SPECDECK_NVML_REPLAY in the job's environment).

Bounded like every source: a line is at most LINE_MAX_BYTES (the process list is cut to fit),
the command ends after `--for` seconds, when its stdout is closed (the daemon or srun went away),
or when Slurm ends the step with the job.
"""

import json
import os
import signal
import sys
import threading
import time

from .alerts import AlertRules
from .host import HostReader
from .nvml import Nvml, load_module
from .processes import COMMAND_MAX_CHARS, boot_time, read_bytes, stat_fields
from .sample import HOST_SOURCE, rounded, series_points
from .sampler import HOST_LABELS, NODES_SERVICE  # noqa: F401 (NODES_SERVICE: the feed's name, for remote/slurm)

LINE_MAX_BYTES = 64 << 10  # 8 GPUs take ~6 KB; the processes are cut before a line grows past this
PROCESSES_MAX = 64
SLURM_JOB_MARK = b"SLURM_JOB_ID="
USAGE = "usage: node-sample [--every SECONDS] [--for SECONDS]\n"


def node_name():
    """The node's name as Slurm knows it (the step's SLURMD_NODENAME), else the host name."""
    return os.environ.get("SLURMD_NODENAME") or os.uname()[1].split(".")[0]


def job_gpus():
    """The GPU indices Slurm gave the job on this node (SLURM_JOB_GPUS, else the step's), or None
    when it says nothing (a job that holds whole nodes without GPU resources)."""
    for name in ("SLURM_JOB_GPUS", "SLURM_STEP_GPUS"):
        text = os.environ.get(name)
        if text:
            try:
                return [int(part) for part in text.split(",") if part.strip()]
            except ValueError:
                return None
    return None


class ProcessReader:
    """A GPU process on this node: its command, start and the Slurm job its environment names;
    looked up once per process (its start time notices a recycled pid)."""

    def __init__(self):
        self.clock_ticks_per_s = os.sysconf("SC_CLK_TCK")
        self.boot_time = boot_time()
        self._known = {}

    def describe(self, pid):
        fields = stat_fields(pid)
        if fields is None or fields[0] == b"Z":
            return {"pid": pid, "other_namespace": True}
        start_ticks = int(fields[19])
        known = self._known.get(pid)
        if known is not None and known[0] == start_ticks:
            return known[1]
        raw = read_bytes("/proc/%d/cmdline" % pid) or b""
        command = raw.rstrip(b"\0").replace(b"\0", b" ").decode("utf-8", "replace")[:COMMAND_MAX_CHARS]
        slurm_job = None
        for entry in (read_bytes("/proc/%d/environ" % pid) or b"").split(b"\0"):
            if entry.startswith(SLURM_JOB_MARK):
                slurm_job = entry[len(SLURM_JOB_MARK):].decode("ascii", "replace")
        description = {"pid": pid, "command": command or None, "slurm_job_id": slurm_job,
                       "started_at": self.boot_time + start_ticks / float(self.clock_ticks_per_s) if self.boot_time else None}
        self._known[pid] = (start_ticks, description)
        return description

    def forget_except(self, pids):
        for pid in set(self._known) - set(pids):
            del self._known[pid]


class NodeSampler:
    """One node's samples: the node's own CPU and memory, every GPU, the GPU processes."""

    def __init__(self, nvml_module=None):
        self.node = node_name()
        self.slurm_job_id = os.environ.get("SLURM_JOB_ID")
        self.job_gpus = job_gpus()
        self.host = HostReader()
        self.processes = ProcessReader()
        module, reason = (nvml_module, None) if nvml_module is not None else load_module()
        self.nvml = None
        self.nvml_state = {"available": False, "reason": reason, "driver_version": None}
        if module is not None:
            session = Nvml(module)
            if session.open():
                self.nvml = session
                self.nvml_state = {"available": True, "reason": session.reason, "driver_version": session.driver_version}
            else:
                self.nvml_state["reason"] = session.reason

    def sample(self, now, now_monotonic):
        gpus, held = [], []
        if self.nvml is not None:
            self.nvml.drain_xid()
            for reader in self.nvml.gpus:
                gpus.append(rounded(reader.read(now_monotonic)))
                held += [(reader.index,) + process for process in reader.processes()]
        processes = [dict(self.processes.describe(pid), gpu_index=index, memory_bytes=memory, kind=kind)
                     for index, pid, memory, kind in held[:PROCESSES_MAX]]
        self.processes.forget_except(pid for _, pid, _, _ in held)
        return {"node": self.node, "slurm_job_id": self.slurm_job_id, "job_gpus": self.job_gpus, "time": round(now, 3),
                "host": rounded(self.host.read(now_monotonic)), "nvml": self.nvml_state, "gpus": gpus, "processes": processes,
                "processes_cut": max(0, len(held) - PROCESSES_MAX)}

    def close(self):
        if self.nvml is not None:
            self.nvml.close()


def line_of(sample):
    """The sample as one line within LINE_MAX_BYTES: the process list shortened when it does not fit."""
    line = json.dumps(sample, separators=(",", ":"))
    while len(line) >= LINE_MAX_BYTES and sample["processes"]:
        keep = len(sample["processes"]) // 2
        sample = dict(sample, processes=sample["processes"][:keep], processes_cut=sample["processes_cut"] + len(sample["processes"]) - keep)
        line = json.dumps(sample, separators=(",", ":"))
    return line + "\n"


def parse_args(argv):
    every_s, for_s = 1.0, None
    rest = list(argv)
    while rest:
        flag = rest.pop(0)
        if flag not in ("--every", "--for") or not rest:
            raise ValueError(USAGE.strip())
        try:
            value = float(rest.pop(0))
        except ValueError:
            raise ValueError("%s takes a number of seconds" % flag)
        if not value > 0:
            raise ValueError("%s takes a number of seconds > 0" % flag)
        if flag == "--every":
            every_s = value
        else:
            for_s = value
    return every_s, for_s


def main(argv):
    """`node-sample [--every S] [--for S]`: sample until stdout closes, the deadline, or SIGTERM."""
    try:
        every_s, for_s = parse_args(argv)
    except ValueError as exc:
        sys.stderr.write("node-sample: %s\n" % exc)
        return 2
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    out = sys.stdout.buffer
    sampler = NodeSampler()
    began = time.monotonic()
    try:
        while for_s is None or time.monotonic() - began < for_s:
            tick = time.monotonic()
            out.write(line_of(sampler.sample(time.time(), tick)).encode("utf-8"))
            out.flush()
            time.sleep(max(0.0, every_s - (time.monotonic() - tick)))
    except BrokenPipeError:
        # Nobody reads any more (the daemon stopped the step): end quietly, stderr too.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    finally:
        sampler.close()
    return 0


class NodeRecorder:
    """On the login host: the nodes' samples recorded as the host's own are (a cluster job's
    feed, remote/slurm/nodes.py, hands each line here), its alerts raised by the telemetry
    service and ended with the job."""

    def __init__(self, daemon):
        self.daemon = daemon
        self._rules = {}  # (job id, node) -> AlertRules
        self._lock = threading.Lock()

    def record(self, job_id, slurm_id, node, sample):
        """One node's sample of job `job_id` (Slurm's `slurm_id`): its series to the history
        store, the alert rules on the job's GPUs of that node."""
        history = getattr(self.daemon, "history", None)
        if history is not None:
            history.add_many([("telemetry", name, dict(HOST_LABELS, node=node) if kind == HOST_SOURCE else labels, value, sample["time"])
                              for kind, name, labels, value in series_points(sample, node)])
        telemetry = self.daemon.services.get("telemetry")
        if telemetry is None:
            return
        with self._lock:
            rules = self._rules.get((job_id, node))
            if rules is None:
                rules = self._rules[(job_id, node)] = AlertRules(telemetry.alert_log, telemetry.settings["alerts"], node=node)
        rules.settings = telemetry.settings["alerts"]
        # The job's GPUs on the node: those Slurm gave it, else those its processes hold, else
        # all of them (a job that holds whole nodes).
        gpus = [gpu["index"] for gpu in sample["gpus"]]
        given = sample.get("job_gpus")
        held = {p.get("gpu_index") for p in sample["processes"] if p.get("slurm_job_id") == slurm_id}
        mine = [i for i in gpus if i in given] if isinstance(given, list) else [i for i in gpus if i in held] if held else gpus
        checked = {"gpus": sample["gpus"], "processes": [{"gpu_index": i, "job_id": job_id} for i in mine]}
        for alert in rules.check_sample(checked, time.time()):
            telemetry._raise(alert)

    def end(self, job_id):
        """The job ended: its nodes' alerts end with it."""
        telemetry = self.daemon.services.get("telemetry")
        with self._lock:
            ended = [(key, rules) for key, rules in self._rules.items() if key[0] == job_id]
            for key, _ in ended:
                del self._rules[key]
        for _, rules in ended:
            for alert in rules.check_sample({"gpus": [], "processes": []}, time.time()):
                if telemetry is not None:
                    telemetry._raise(alert)
