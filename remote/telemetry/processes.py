"""Who holds a GPU: a process id from NVML, mapped to the host's process (its command and start)
and to the specdeck job that owns it.

A job's processes carry SPECDECK_JOB_ID in their environment (the supervisor sets it, and
children inherit it); where the environment cannot be read (another user's process), the
process's group or session is matched against the running jobs' (run.json), then its ancestors
against the jobs' supervisors. A pid that our /proc does not have belongs to another PID
namespace (a container): it is reported as such, never guessed. So is a pid that our /proc
has but that holds no NVIDIA device open: the same number, another namespace's process.
Each process is looked up once; after that only its /proc/PID/stat is read, to notice a
recycled pid.
"""

import json
import os

from ..core import paths

JOBS_REFRESH_S = 5.0
ANCESTORS_MAX = 16
COMMAND_MAX_CHARS = 200
JOB_ID_MARK = b"SPECDECK_JOB_ID="


def read_bytes(path):
    try:
        with open(path, "rb") as f:
            return f.read()
    except OSError:
        return None


def stat_fields(pid):
    """Fields 3.. of /proc/PID/stat (state first), or None when no such process here."""
    data = read_bytes("/proc/%d/stat" % pid)
    if data is None:
        return None
    return data[data.rfind(b")") + 2:].split()


def boot_time():
    data = read_bytes("/proc/stat") or b""
    for line in data.splitlines():
        if line.startswith(b"btime "):
            return int(line.split()[1])
    return None


def holds_nvidia_device(pid, device_prefix="/dev/nvidia"):
    """True or False when /proc/PID/fd can be read; None when it cannot (another user's)."""
    directory = "/proc/%d/fd" % pid
    try:
        names = os.listdir(directory)
    except OSError:
        return None
    for name in names:
        try:
            if os.readlink(os.path.join(directory, name)).startswith(device_prefix):
                return True
        except OSError:
            continue
    return False


def job_from_environment(pid):
    """SPECDECK_JOB_ID from the process's environment; None when absent or unreadable."""
    data = read_bytes("/proc/%d/environ" % pid)
    if not data:
        return None
    for entry in data.split(b"\0"):
        if entry.startswith(JOB_ID_MARK):
            return entry[len(JOB_ID_MARK):].decode("ascii", "replace")
    return None


class ProcessMapper:
    """`describe(pid, now_monotonic)`: {pid, command, started_at, job_id} or {pid, other_namespace}."""

    def __init__(self, jobs_root=None, device_prefix="/dev/nvidia"):
        self.jobs_root = jobs_root or paths.jobs_dir()
        self.device_prefix = device_prefix  # what a GPU process has open (tests name a file of their own)
        self.clock_ticks_per_s = os.sysconf("SC_CLK_TCK")
        self.boot_time = boot_time()
        self._known = {}  # pid -> (start ticks, description)
        self._job_sessions = ({}, {})  # running jobs by process group, by supervisor pid
        self._job_sessions_at = None

    def describe_all(self, pids, now_monotonic):
        described = {pid: self.describe(pid, now_monotonic) for pid in pids}
        for pid in set(self._known) - set(described):
            del self._known[pid]  # gone from every GPU
        return described

    def describe(self, pid, now_monotonic):
        fields = stat_fields(pid)
        if fields is None or fields[0] == b"Z":
            return {"pid": pid, "other_namespace": True}
        start_ticks = int(fields[19])
        known = self._known.get(pid)
        if known is not None and known[0] == start_ticks:
            return known[1]
        description = self._look_up(pid, fields, start_ticks, now_monotonic)
        self._known[pid] = (start_ticks, description)
        return description

    def _look_up(self, pid, fields, start_ticks, now_monotonic):
        if holds_nvidia_device(pid, self.device_prefix) is False:
            return {"pid": pid, "other_namespace": True}
        raw = read_bytes("/proc/%d/cmdline" % pid) or b""
        command = raw.rstrip(b"\0").replace(b"\0", b" ").decode("utf-8", "replace")[:COMMAND_MAX_CHARS]
        started_at = self.boot_time + start_ticks / float(self.clock_ticks_per_s) if self.boot_time else None
        job_id = job_from_environment(pid)
        if job_id is None:
            job_id = self._job_of_process(fields, now_monotonic)
        return {"pid": pid, "command": command or None, "started_at": started_at, "job_id": job_id}

    def _job_of_process(self, fields, now_monotonic):
        """The running job whose process group or session holds the process, or whose supervisor
        is one of its ancestors (a child that made a session of its own)."""
        if self._job_sessions_at is None or now_monotonic - self._job_sessions_at >= JOBS_REFRESH_S:
            self._job_sessions = running_jobs(self.jobs_root)
            self._job_sessions_at = now_monotonic
        groups, supervisors = self._job_sessions
        for group in (int(fields[2]), int(fields[3])):
            if group in groups:
                return groups[group]
        parent = int(fields[1])
        for _ in range(ANCESTORS_MAX):
            if parent in supervisors:
                return supervisors[parent]
            parent_fields = stat_fields(parent) if parent > 1 else None
            if parent_fields is None:
                return None
            parent = int(parent_fields[1])
        return None


def read_record(path):
    """A job record's JSON object; None when missing, reserved (blank) or cut."""
    try:
        with open(path) as f:
            value = json.load(f)
    except (OSError, ValueError):
        return None
    return value if isinstance(value, dict) else None


def running_jobs(jobs_root):
    """({process group: job id}, {supervisor pid: job id}) of the jobs without an exit record."""
    groups, supervisors = {}, {}
    try:
        names = os.listdir(jobs_root)
    except OSError:
        return groups, supervisors
    for name in names:
        directory = os.path.join(jobs_root, name)
        if read_record(os.path.join(directory, "exit.json")) is not None:
            continue
        run = read_record(os.path.join(directory, "run.json"))
        if run is None:
            continue
        if run.get("pgid"):
            groups[run["pgid"]] = name
        if run.get("supervisor_pid"):
            supervisors[run["supervisor_pid"]] = name
    return groups, supervisors
