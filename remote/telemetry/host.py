"""The host's own figures from /proc, for every host, GPU or not: CPU use, memory, load,
network rates, and the free space of the directories specdeck writes to.

Rates (CPU, network) come from the difference of two readings, so the first sample has none.
Each file is one small read; a file that is missing (a non-Linux host, a locked-down
container) leaves its fields out instead of failing the sample.
"""

import os

DISK_REFRESH_S = 10.0  # free space moves slowly; statvfs every sample would be waste


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


class HostReader:
    """Reads the host's figures; `read(now)` gives one sample's `host` part."""

    def __init__(self):
        self.cpu_count = os.cpu_count()
        self._cpu = None
        self._network = None  # (monotonic time, received, sent)
        self._disks = []
        self._disks_at = None
        self._disk_paths = None

    def read(self, now_monotonic, disk_paths=()):
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
        host["disks"] = self.disks(now_monotonic, disk_paths)
        return host

    def disks(self, now_monotonic, disk_paths):
        """[{path, role, free_bytes, total_bytes}], one per file system: the first path naming it,
        with the roles of all (`state, downloads` when both live on one disk)."""
        disk_paths = list(disk_paths)
        if self._disks_at is not None and now_monotonic - self._disks_at < DISK_REFRESH_S and disk_paths == self._disk_paths:
            return self._disks
        self._disk_paths = disk_paths
        disks, by_device = [], {}
        for role, path in disk_paths:
            try:
                device = os.stat(path).st_dev
            except OSError:
                continue
            if device in by_device:
                if role not in by_device[device]["role"].split(", "):
                    by_device[device]["role"] += ", " + role
                continue
            space = disk_space(path)
            if space is None:
                continue
            by_device[device] = {"path": path, "role": role, "free_bytes": space[0], "total_bytes": space[1]}
            disks.append(by_device[device])
        self._disks, self._disks_at = disks, now_monotonic
        return disks
