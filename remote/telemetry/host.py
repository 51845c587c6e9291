"""The host's own figures from /proc, for every host, GPU or not: CPU use, memory, load,
network rates, and the free space of the directories specdeck writes to, each disk with its fill
rate (the least-squares slope of its free bytes over the last FILL_WINDOW_S, at most FILL_POINTS
readings kept per disk) and when it will be full at that rate, and the running jobs that write
there.

Rates (CPU, network) come from the difference of two readings, so the first sample has none.
Each file is one small read; a file that is missing (a non-Linux host, a locked-down
container) leaves its fields out instead of failing the sample.
"""

import collections
import os
import time

DISK_REFRESH_S = 10.0  # free space moves slowly: a disk no job writes to is read this rarely
DISKS_MAX = 16  # file systems shown and followed (statvfs of each a job writes to, every sample)
PATHS_MAX = 200  # directories looked at (os.stat) per rebuild of the disk list
JOBS_PER_DISK = 20  # jobs named per disk
FILL_WINDOW_S = 600.0  # the fill rate is the slope of the free bytes over this long
FILL_POINTS = 120  # readings kept per disk: one every FILL_WINDOW_S / FILL_POINTS at most


def read_text(path):
    try:
        with open(path, "rb") as f:
            return f.read().decode("ascii", "replace")
    except OSError:
        return None


def cpu_times():
    """(busy, total) jiffies of all CPUs together, from the first line of /proc/stat."""
    data = read_text("/proc/stat")
    if not data or not data.startswith("cpu "):
        return None
    values = [int(v) for v in data.split("\n", 1)[0].split()[1:]]
    idle = values[3] + (values[4] if len(values) > 4 else 0)  # idle + iowait
    total = sum(values[:8])  # guest time is counted inside user already
    return total - idle, total


def memory():
    """(used bytes, total bytes): used is what is not available to new work (MemAvailable)."""
    data = read_text("/proc/meminfo")
    if not data:
        return None, None
    fields = {}
    for line in data.splitlines():
        name, _, rest = line.partition(":")
        if name in ("MemTotal", "MemAvailable", "MemFree"):
            fields[name] = int(rest.split()[0]) * 1024
    total = fields.get("MemTotal")
    available = fields.get("MemAvailable", fields.get("MemFree"))
    if total is None or available is None:
        return None, total
    return total - available, total


def load_average():
    data = read_text("/proc/loadavg")
    if not data:
        return None
    return [float(v) for v in data.split()[:3]]


def network_bytes():
    """(received, sent) bytes of every interface but loopback."""
    data = read_text("/proc/net/dev")
    if not data:
        return None
    received = sent = 0
    for line in data.splitlines()[2:]:
        name, _, rest = line.partition(":")
        if name.strip() == "lo":
            continue
        values = rest.split()
        if len(values) >= 9:
            received += int(values[0])
            sent += int(values[8])
    return received, sent


def disk_space(path):
    """(free bytes for this user, total bytes) of the file system holding `path`."""
    try:
        st = os.statvfs(path)
    except OSError:
        return None
    return st.f_bavail * st.f_frsize, st.f_blocks * st.f_frsize


def device_of(path, levels=8):
    """(st_dev, the path) of `path`'s file system, or of its nearest existing parent's (a save
    directory not made yet fills the disk it will be made on), or (None, None)."""
    for _ in range(levels):
        try:
            return os.stat(path).st_dev, path
        except OSError:
            parent = os.path.dirname(path.rstrip("/"))
            if not parent or parent == path:
                return None, None
            path = parent
    return None, None


class FillRate:
    """A disk's free bytes over the last `window_s` (at most FILL_POINTS readings) and the rate
    it fills at: the least-squares slope, so one burst (a checkpoint written) weighs as much as
    its share of the window, not as a rate of its own."""

    __slots__ = ("points", "total", "read_at", "read_at_epoch", "free")

    def __init__(self):
        self.points = collections.deque(maxlen=FILL_POINTS)
        self.total = None
        self.read_at = None  # monotonic time of the last reading
        self.read_at_epoch = None
        self.free = None

    def add(self, now_monotonic, now, free, total, window_s):
        if total != self.total:  # another file system mounted there: its history is not this one's
            self.points.clear()
        self.total, self.free, self.read_at, self.read_at_epoch = total, free, now_monotonic, now
        # The newest reading is always the last point; the others stay window_s / FILL_POINTS apart.
        if len(self.points) >= 2 and now_monotonic - self.points[-2][0] < window_s / FILL_POINTS:
            self.points[-1] = (now_monotonic, free)
        else:
            self.points.append((now_monotonic, free))
        while self.points and now_monotonic - self.points[0][0] > window_s:
            self.points.popleft()

    def rate(self):
        """Bytes per second the disk fills at (negative: it empties), or None before 3 readings."""
        if len(self.points) < 3:
            return None
        t0 = self.points[0][0]
        n = float(len(self.points))
        mean_t = sum(t - t0 for t, _ in self.points) / n
        mean_f = sum(f for _, f in self.points) / n
        spread = sum((t - t0 - mean_t) ** 2 for t, _ in self.points)
        if spread <= 0:
            return None
        slope = sum((t - t0 - mean_t) * (f - mean_f) for t, f in self.points) / spread
        return -slope


class HostReader:
    """Reads the host's figures; `read(now)` gives one sample's `host` part."""

    def __init__(self):
        self.cpu_count = os.cpu_count()
        self._cpu = None
        self._network = None  # (monotonic time, received, sent)
        self._devices = []  # [{device, path, role, jobs}], one per file system
        self._devices_at = None
        self._disk_paths = None
        self._fills = {}  # device -> FillRate
        self.fill_window_s = FILL_WINDOW_S

    def read(self, now_monotonic, disk_paths=(), now=None):
        # The same keys in every sample (None when unknown): the stream's deltas cannot remove one.
        host = {"cpu_count": self.cpu_count, "cpu_percent": None, "load_1m": None, "load_5m": None, "load_15m": None,
                "network_rx_bytes_per_s": None, "network_tx_bytes_per_s": None}
        times = cpu_times()
        if times is not None:
            if self._cpu is not None and times[1] > self._cpu[1]:
                host["cpu_percent"] = 100.0 * (times[0] - self._cpu[0]) / (times[1] - self._cpu[1])
            self._cpu = times
        used, total = memory()
        host["memory_used_bytes"], host["memory_total_bytes"] = used, total
        load = load_average()
        if load:
            host["load_1m"], host["load_5m"], host["load_15m"] = load
        counters = network_bytes()
        if counters is not None:
            if self._network is not None and now_monotonic > self._network[0]:
                elapsed_s = now_monotonic - self._network[0]
                host["network_rx_bytes_per_s"] = max(0, counters[0] - self._network[1]) / elapsed_s
                host["network_tx_bytes_per_s"] = max(0, counters[1] - self._network[2]) / elapsed_s
            self._network = (now_monotonic,) + counters
        host["disks"] = self.disks(now_monotonic, disk_paths, time.time() if now is None else now)
        return host

    def disks(self, now_monotonic, disk_paths, now=None):
        """[{path, role, free_bytes, total_bytes, fill_rate_bytes_per_s, full_in_s, jobs, read_at}],
        one per file system: the first path naming it, with the roles of all (`state, downloads`
        when both live on one disk) and the running jobs writing there. `disk_paths`: (role, path)
        or (role, path, job id). A disk a job writes to is read every sample, any other every
        DISK_REFRESH_S; `read_at` is when (s since the epoch), so its figures carry their age."""
        now = time.time() if now is None else now
        disk_paths = list(disk_paths)
        if self._devices_at is None or now_monotonic - self._devices_at >= DISK_REFRESH_S or disk_paths != self._disk_paths:
            self._map_devices(disk_paths, now_monotonic)
        disks = []
        for entry in self._devices:
            fill = self._fills.get(entry["device"])
            if fill is None:
                fill = self._fills[entry["device"]] = FillRate()
            if entry["jobs"] or fill.read_at is None or now_monotonic - fill.read_at >= DISK_REFRESH_S:
                space = disk_space(entry["path"])
                if space is not None:
                    fill.add(now_monotonic, now, space[0], space[1], self.fill_window_s)
            if fill.read_at is None:
                continue
            rate = fill.rate()
            disks.append({"path": entry["path"], "role": entry["role"], "free_bytes": fill.free, "total_bytes": fill.total,
                          "fill_rate_bytes_per_s": None if rate is None else int(round(rate)),
                          "full_in_s": round(fill.free / rate, 1) if rate and rate > 0 else None,
                          "jobs": list(entry["jobs"]), "read_at": round(fill.read_at_epoch, 1)})
        return disks

    def _map_devices(self, disk_paths, now_monotonic):
        """Which file system each path is on (os.stat), at most PATHS_MAX paths and DISKS_MAX disks."""
        self._disk_paths, self._devices_at = disk_paths, now_monotonic
        devices, by_device = [], {}
        for item in disk_paths[:PATHS_MAX]:
            role, path, job_id = (tuple(item) + (None,))[:3]
            device, path = device_of(path)
            if device is None:
                continue
            entry = by_device.get(device)
            if entry is None:
                if len(devices) >= DISKS_MAX:
                    continue
                entry = by_device[device] = {"device": device, "path": path, "role": role, "jobs": []}
                devices.append(entry)
            elif role not in entry["role"].split(", "):
                entry["role"] += ", " + role
            if job_id and job_id not in entry["jobs"] and len(entry["jobs"]) < JOBS_PER_DISK:
                entry["jobs"].append(job_id)
        self._devices = devices
        for device in set(self._fills) - set(by_device):
            del self._fills[device]  # a disk no longer written to: its history goes with it
