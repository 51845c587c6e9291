"""How the host's figures read, the same in the GPUs pane and in `specdeck gpus`: each figure
rounded and given its unit once (utilisation, GiB, watts, clocks, rates), the throttle reasons
that mean a GPU is slowed (not the ones every idle or capped GPU reports), a GPU process with the
job that owns it. The pane lays them out in 80 columns, the command in a table; both read here."""

import time

from remote.core.words import minutes  # the host alerts' words for a span, in the pane too

from .. import display

# Reasons NVML reports on a healthy GPU: idle, clocks the application set, the power cap it
# runs at. A GPU that reports only these is not throttled.
ROUTINE_THROTTLES = ("gpu_idle", "applications_clocks", "sw_power_cap")
NO_NVML = "NVML is not available"
IN_A_CONTAINER = "another PID namespace (a container)"


def whole(value, unit=""):
    """`87%`, `412W`: rounded to a whole number; `-` when the host has no figure."""
    return "-" if value is None else "%d%s" % (round(value), unit)


def gib(n_bytes, digits=1):
    """Bytes in GiB, without the unit: `70.1`; `-` when unknown."""
    return "-" if n_bytes is None else "%.*f" % (digits, n_bytes / 2.0 ** 30)


def throttle_reasons(gpu):
    """The reasons this GPU is slowed down, in NVML's words (`hw_slowdown`, `sw_thermal`, ...)."""
    return [reason for reason in gpu.get("throttle_reasons") or () if reason not in ROUTINE_THROTTLES]


def gpu_figures(gpu):
    """{key: text} of one GPU."""
    total = gpu.get("memory_total_bytes")
    return {
        "index": str(gpu["index"]),
        "name": (gpu.get("name") or "?").replace("NVIDIA ", ""),
        "utilization": whole(gpu.get("utilization_percent"), "%"),
        "memory_used": gib(gpu.get("memory_used_bytes")),
        "memory_total": gib(total, 0) if total else "-",
        "temperature": whole(gpu.get("temperature_c")),
        "power": whole(gpu.get("power_w")),
        "power_limit": whole(gpu.get("power_limit_w")),
        "sm_clock": whole(gpu.get("sm_clock_mhz")),
        "pcie": "%s/%s" % (display.format_rate(gpu.get("pcie_rx_bytes_per_s")), display.format_rate(gpu.get("pcie_tx_bytes_per_s"))),
        "nvlink": "%s/%s" % (display.format_rate(gpu.get("nvlink_rx_bytes_per_s")), display.format_rate(gpu.get("nvlink_tx_bytes_per_s")))
        if gpu.get("nvlink_count") else "-",
        "throttle": "LOST" if gpu.get("lost") else ",".join(throttle_reasons(gpu)) or "-",
    }


def host_figures(host):
    """{key: text} of the host's CPU, memory, load and network."""
    total = host.get("memory_total_bytes")
    return {
        "cpu": whole(host.get("cpu_percent"), "%"),
        "cpu_count": str(host.get("cpu_count") or "?"),
        "memory_used": gib(host.get("memory_used_bytes"), 0),
        "memory_total": gib(total, 0) if total else "-",
        "load": "-" if host.get("load_1m") is None else "%.2f" % host["load_1m"],
        "network_rx": display.format_rate(host.get("network_rx_bytes_per_s")),
        "network_tx": display.format_rate(host.get("network_tx_bytes_per_s")),
    }


def disk_figures(disk):
    """{key: text} of one of the host's file systems (`state, downloads` when one holds both):
    with `fill` (`+1.2 MB/s`, empty when it does not fill) and `full` (`full in 40 min (03:40)`,
    when it fills: the time of day is this console's, from the host's reading time)."""
    rate, full_in = disk.get("fill_rate_bytes_per_s"), disk.get("full_in_s")
    full = ""
    if isinstance(full_in, (int, float)) and not isinstance(full_in, bool):
        at = (disk.get("read_at") or 0) + full_in
        full = "full in %s" % minutes(full_in) + (" (%s)" % time.strftime("%H:%M", time.localtime(at)) if disk.get("read_at") else "")
    return {"role": disk["role"], "free": display.format_bytes(disk["free_bytes"]), "total": display.format_bytes(disk["total_bytes"]),
            "path": disk.get("path") or "", "fill": "+" + display.format_rate(rate) if isinstance(rate, (int, float)) and rate > 0 else "",
            "full": full}


def disks_shown(disks, count):
    """The `count` disks a line has room for: those that fill soonest first, then in their order."""
    disks = list(disks or ())
    order = sorted(range(len(disks)), key=lambda i: (disks[i].get("full_in_s") is None, disks[i].get("full_in_s") or 0, i))
    return [disks[i] for i in order[:count]]


def missing_gpus(nvml):
    """Why no GPU is shown (NVML did not start, no driver), or None when NVML answers."""
    return None if nvml.get("available") else nvml.get("reason") or NO_NVML


def process_figures(process, now):
    """{key: text} of one GPU process: its GPU, memory, the job that owns it, how long it has run.
    A process of another PID namespace (a container) has no job or runtime the host can see."""
    shown = {"pid": str(process["pid"]), "gpu": str(process["gpu_index"]), "memory": gib(process.get("memory_bytes"))}
    if process.get("other_namespace"):
        return dict(shown, job="-", runtime="-", command=IN_A_CONTAINER)
    started = process.get("started_at")
    return dict(shown, job=process.get("job_id") or "-", runtime=display.format_duration(now - started) if started else "-",
                command=process.get("command") or "")


def node_summary(node):
    """A Slurm job's node in a few words: `8 GPUs 97% 120/141G`, `no figures` when it has none."""
    gpus = node.get("gpus") or []
    if not gpus:
        return "no figures" if node.get("error") else "no GPUs"
    utilization = [g["utilization_percent"] for g in gpus if g.get("utilization_percent") is not None]
    used = sum(g.get("memory_used_bytes") or 0 for g in gpus)
    total = sum(g.get("memory_total_bytes") or 0 for g in gpus)
    mean = whole(sum(utilization) / len(utilization), "%") if utilization else "-"
    return "%d GPU%s %s %s/%sG" % (len(gpus), "" if len(gpus) == 1 else "s", mean, gib(used, 0), gib(total, 0) if total else "-")
