"""GPU telemetry from the command line: `specdeck gpus HOST [--json] [--since DURATION]`, the
latest sample, or every sample of a window at the history store's resolution; and the alerts
that fired (`--alerts`)."""

import time

from remote.core.windows import parse_duration as parse_seconds
from remote.telemetry.alerts import alert_text

from .. import display
from ..cli.common import CommandError, connect, emit


def parse_duration(text):
    """Seconds in `90`, `90s`, `10m`, `8h`, `2d`, `1w` (the one parser `spec --window` uses too)."""
    try:
        return parse_seconds(text)
    except ValueError as exc:
        raise CommandError(str(exc))


def add_commands(commands):
    p = commands.add_parser("gpus", help="the host's GPUs, CPU, memory and disks now, or over a window")
    p.set_defaults(func=cmd_gpus)
    p.add_argument("host")
    p.add_argument("--since", metavar="DURATION", help="every sample of the last DURATION (10m, 8h, 2d) from the host's history")
    p.add_argument("--alerts", action="store_true", help="the alerts that fired (with --since: in that window)")


def cmd_gpus(args):
    client = connect(args, args.host)
    since_s = parse_duration(args.since) if args.since else None
    if args.alerts:
        params = {"since": time.time() - since_s} if since_s else {}
        alerts = client.call("telemetry.alerts", params)["alerts"]
        emit(args, {"alerts": alerts}, lambda: "\n".join(alert_text(a) for a in alerts) or "no alerts")
        return 0
    if since_s is None:
        sample = client.call("telemetry.latest")
        emit(args, sample, lambda: format_sample(sample))
        return 0
    reply = client.call("telemetry.samples", {"since_s": since_s}, timeout=120)
    emit(args, {"samples": reply["samples"]}, lambda: format_samples(reply["samples"], reply["resolution_s"]))
    return 0


def _value(value, unit="", digits=0):
    if value is None:
        return "-"
    return ("%.*f%s" % (digits, value, unit)) if isinstance(value, (int, float)) else str(value)


def _gib(value):
    return "-" if value is None else "%.1f" % (value / 2.0 ** 30)


def format_host(host, nvml):
    lines = ["host  cpu %s of %s cores  memory %s / %s GiB  load %s  net rx %s tx %s" % (
        _value(host.get("cpu_percent"), "%", 1), host.get("cpu_count") or "?", _gib(host.get("memory_used_bytes")),
        _gib(host.get("memory_total_bytes")), _value(host.get("load_1m"), "", 2),
        display.format_rate(host.get("network_rx_bytes_per_s")), display.format_rate(host.get("network_tx_bytes_per_s")))]
    for disk in host.get("disks") or ():
        lines.append("disk  %-12s %s free of %s  %s" % (disk["role"], display.format_bytes(disk["free_bytes"]),
                                                       display.format_bytes(disk["total_bytes"]), disk["path"]))
    if not nvml.get("available"):
        lines.append("GPUs: none shown (%s)" % (nvml.get("reason") or "NVML is not available"))
    elif nvml.get("reason"):
        lines.append("GPUs: %s" % nvml["reason"])
    return lines


def format_sample(sample):
    """The latest sample for a person: the host, one row per GPU, one per GPU process."""
    lines = format_host(sample["host"], sample.get("nvml") or {})
    if sample.get("stale"):
        age = sample.get("age_s")
        lines.insert(0, "stale: these figures are not current (%s old%s)" % (
            "?" if age is None else "%d s" % age, ": %s" % sample["error"] if sample.get("error") else ""))
    gpus = sample.get("gpus") or []
    if gpus:
        lines.append("")
        rows = [("GPU", "NAME", "UTIL", "MEM GiB", "TEMP", "POWER W", "SM MHz", "PCIE RX/TX", "NVLINK RX/TX", "THROTTLE")]
        for gpu in gpus:
            rows.append((str(gpu["index"]), (gpu.get("name") or "?").replace("NVIDIA ", ""), _value(gpu.get("utilization_percent"), "%"),
                         "%s/%s" % (_gib(gpu.get("memory_used_bytes")), _gib(gpu.get("memory_total_bytes"))),
                         _value(gpu.get("temperature_c"), "C"), "%s/%s" % (_value(gpu.get("power_w")), _value(gpu.get("power_limit_w"))),
                         _value(gpu.get("sm_clock_mhz")),
                         "%s/%s" % (display.format_rate(gpu.get("pcie_rx_bytes_per_s")), display.format_rate(gpu.get("pcie_tx_bytes_per_s"))),
                         "%s/%s" % (display.format_rate(gpu.get("nvlink_rx_bytes_per_s")), display.format_rate(gpu.get("nvlink_tx_bytes_per_s")))
                         if gpu.get("nvlink_count") else "-",
                         ",".join(r for r in gpu.get("throttle_reasons") or () if r != "gpu_idle") or "-"))
        lines += _table(rows)
    processes = sample.get("processes") or []
    if processes:
        lines.append("")
        rows = [("PID", "GPU", "MEM GiB", "JOB", "RUNTIME", "COMMAND")]
        now = sample["time"]
        for process in processes:
            if process.get("other_namespace"):
                job, runtime, command = "-", "-", "(another PID namespace: a container)"
            else:
                job = process.get("job_id") or "-"
                runtime = display.format_duration(now - process["started_at"]) if process.get("started_at") else "-"
                command = (process.get("command") or "")[:60]
            rows.append((str(process["pid"]), str(process["gpu_index"]), _gib(process.get("memory_bytes")), job, runtime, command))
        lines += _table(rows)
    return "\n".join(lines)


def format_samples(samples, resolution_s):
    """One line per sample: time, CPU, then utilisation / memory / power of each GPU."""
    if not samples:
        return "no samples in that window (the host records from its daemon's start)"
    lines = ["%d samples, one per %s" % (len(samples), display.format_age(resolution_s))]
    for sample in samples:
        host = sample["host"]
        gpus = "  ".join("%d: %s %sGiB %sW" % (g["index"], _value(g.get("utilization_percent"), "%"), _gib(g.get("memory_used_bytes")),
                                               _value(g.get("power_w"))) for g in sample["gpus"])
        lines.append("%s  cpu %s  %s" % (time.strftime("%m-%d %H:%M:%S", time.localtime(sample["time"])), _value(host.get("cpu_percent"), "%", 1), gpus))
    return "\n".join(lines)


def _table(rows):
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    return ["  ".join(cell.ljust(width) for cell, width in zip(row, widths)).rstrip() for row in rows]
