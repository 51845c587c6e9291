"""One telemetry sample as the wire carries it: rounded numbers, compact deltas for the
stream, the series it adds to the history store, and the way back from the store to samples.

Both sides import this module: the host builds deltas with `delta()`, the console rebuilds
the full sample with `apply_delta()`, so the two can never disagree about the format.

A sample may carry `nodes`: {node name: a sample of the same shape (host, nvml, gpus, processes,
time) taken on a node of a cluster job, with its job, age and error}. Its delta is a delta per
node that changed (null for a node gone); its series carry the node in their labels.
"""

# Digits kept per field: enough for a screen or a chart, no noise on the wire.
ROUNDING = {
    "cpu_percent": 1, "load_1m": 2, "load_5m": 2, "load_15m": 2, "power_w": 1, "power_limit_w": 1,
    "network_rx_bytes_per_s": 0, "network_tx_bytes_per_s": 0, "pcie_rx_bytes_per_s": 0, "pcie_tx_bytes_per_s": 0,
    "nvlink_rx_bytes_per_s": 0, "nvlink_tx_bytes_per_s": 0,
}

# What goes into the history store once a second: (source, field). GPUs get a `gpu` label.
HOST_SERIES = ("cpu_percent", "memory_used_bytes", "load_1m", "network_rx_bytes_per_s", "network_tx_bytes_per_s")
GPU_SERIES = (
    "utilization_percent", "memory_utilization_percent", "memory_used_bytes", "temperature_c", "power_w",
    "sm_clock_mhz", "memory_clock_mhz", "pcie_rx_bytes_per_s", "pcie_tx_bytes_per_s", "nvlink_rx_bytes_per_s",
    "nvlink_tx_bytes_per_s",
)
HOST_SOURCE = "host"
GPU_SOURCE = "gpu"


def rounded(record):
    """A copy of a flat record with floats cut to the digits the wire keeps."""
    out = {}
    for key, value in record.items():
        if isinstance(value, float):
            digits = ROUNDING.get(key)
            value = int(round(value)) if digits == 0 else round(value, digits if digits is not None else 1)
        out[key] = value
    return out


def delta(previous, current):
    """What changed from `previous` to `current` (both full samples), for the stream. A change in
    the set of GPUs sends the whole sample (`full: true`). Keys are never removed: the sampler
    keeps the same keys in every sample, None for what it does not know."""
    if previous is None or [g["index"] for g in previous["gpus"]] != [g["index"] for g in current["gpus"]]:
        return dict(current, full=True)
    out = {"time": current["time"]}
    host = _changed(previous["host"], current["host"])
    if host:
        out["host"] = host
    if previous.get("nvml") != current.get("nvml"):
        out["nvml"] = current["nvml"]
    gpus = []
    for old, new in zip(previous["gpus"], current["gpus"]):
        changed = _changed(old, new)
        if changed:
            changed["index"] = new["index"]
            gpus.append(changed)
    if gpus:
        out["gpus"] = gpus
    if previous["processes"] != current["processes"]:
        out["processes"] = current["processes"]
    old_nodes, new_nodes = previous.get("nodes") or {}, current.get("nodes") or {}
    if old_nodes != new_nodes:
        out["nodes"] = {name: node_delta(old_nodes.get(name), node) for name, node in new_nodes.items() if old_nodes.get(name) != node}
        out["nodes"].update((name, None) for name in old_nodes if name not in new_nodes)
    return out


SAMPLE_KEYS = ("time", "host", "nvml", "gpus", "processes", "nodes", "full")


def node_delta(previous, current):
    """A node's delta: as a sample's, with the node's own fields (job, age, error) that changed."""
    out = delta(previous, current)
    if not out.get("full"):
        out.update((key, value) for key, value in current.items() if key not in SAMPLE_KEYS and previous.get(key, _ABSENT) != value)
    return out


def _changed(old, new):
    return {key: value for key, value in new.items() if old.get(key, _ABSENT) != value}


_ABSENT = object()


def apply_delta(sample, change):
    """The full sample after `change` (a record of the stream); `sample` is left as it was."""
    if sample is None or change.get("full"):
        full = dict(change)
        full.pop("full", None)
        return full
    out = dict(sample, time=change["time"])
    if "host" in change:
        out["host"] = dict(sample["host"], **change["host"])
    if "nvml" in change:
        out["nvml"] = change["nvml"]
    if "gpus" in change:
        by_index = {gpu["index"]: gpu for gpu in change["gpus"]}
        out["gpus"] = [dict(gpu, **by_index[gpu["index"]]) if gpu["index"] in by_index else gpu for gpu in sample["gpus"]]
    if "processes" in change:
        out["processes"] = change["processes"]
    if "nodes" in change:
        nodes = dict(sample.get("nodes") or {})
        for name, node in change["nodes"].items():
            if node is None:
                nodes.pop(name, None)
            else:
                nodes[name] = apply_node_delta(nodes.get(name), node)
        out["nodes"] = nodes
    return out


def apply_node_delta(node, change):
    """A node's sample after its delta (node_delta), its own fields included."""
    out = apply_delta(node, change)
    out.update((key, value) for key, value in change.items() if key not in SAMPLE_KEYS)
    return out


def series_points(sample, node=None):
    """[(source, name, labels, value)] of one sample for the history store (absent values skipped);
    a node's sample (`node`: its name) has the node in its GPUs' labels and its host's."""
    points = []
    host = sample["host"]
    extra = {"node": node} if node else {}
    for name in HOST_SERIES:
        if host.get(name) is not None:
            points.append((HOST_SOURCE, name, dict(extra), host[name]))
    for gpu in sample["gpus"]:
        labels = dict(extra, gpu=str(gpu["index"]))
        for name in GPU_SERIES:
            if gpu.get(name) is not None:
                points.append((GPU_SOURCE, name, labels, gpu[name]))
    return points


def samples_from_series(host_series, gpu_series, latest=None):
    """Records of the same shape as live samples, rebuilt from the store's points.

    `host_series`: {name: [[time, min, mean, max], ...]}; `gpu_series`: {(gpu index, name): points}.
    The mean of each bucket stands for the sample; what the store does not keep (names, totals,
    limits) comes from the `latest` live sample. Processes are not kept in the store."""
    static = {gpu["index"]: {k: gpu.get(k) for k in ("name", "uuid", "memory_total_bytes", "power_limit_w")}
              for gpu in (latest or {}).get("gpus", [])}
    memory_total = (latest or {}).get("host", {}).get("memory_total_bytes")
    by_time = {}

    def at(time):
        if time not in by_time:
            by_time[time] = {"time": time, "host": {"memory_total_bytes": memory_total}, "gpus": {}, "processes": []}
        return by_time[time]

    for name, points in host_series.items():
        for point in points:
            at(point[0])["host"][name] = point[2]
    for (index, name), points in gpu_series.items():
        for point in points:
            gpus = at(point[0])["gpus"]
            if index not in gpus:
                gpus[index] = dict(static.get(index, {}), index=index)
            gpus[index][name] = point[2]
    records = []
    for time in sorted(by_time):
        record = by_time[time]
        record["gpus"] = [record["gpus"][index] for index in sorted(record["gpus"])]
        records.append(record)
    return records
