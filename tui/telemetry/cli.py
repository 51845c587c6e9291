"""GPU telemetry from the command line: `specdeck gpus HOST [--json] [--since DURATION]`, the
latest sample, or every sample of a window at the history store's resolution; and the alerts
that fired (`--alerts`). `--job J` / `--node N`: the GPUs of a Slurm job's nodes, sampled on the
nodes themselves (remote/slurm/nodes.py), in place of the host's."""

import time

from remote.telemetry.alerts import alert_text

from .. import display
from ..cli.common import CommandError, connect, emit, parse_duration
from ..freshness import not_current_line
from . import model


def add_commands(commands):
    p = commands.add_parser("gpus", help="the host's GPUs, CPU, memory and disks now, or over a window")
    p.set_defaults(func=cmd_gpus)
    p.add_argument("host")
    p.add_argument("--since", metavar="DURATION", help="every sample of the last DURATION (10m, 8h, 2d) from the host's history")
    p.add_argument("--alerts", action="store_true", help="the alerts that fired (with --since: in that window)")
    p.add_argument("--job", metavar="JOB", help="the GPUs of this Slurm job's nodes (its id here, or its Slurm id)")
    p.add_argument("--node", metavar="NODE", help="the GPUs of this node of a running Slurm job")


def cmd_gpus(args):
    client = connect(args, args.host)
    since_s = parse_duration(args.since) if args.since else None
    if args.alerts:
        params = {"since": time.time() - since_s} if since_s else {}
        alerts = client.call("telemetry.alerts", params)["alerts"]
        emit(args, {"alerts": alerts}, lambda: "\n".join(alert_text(a) for a in alerts) or "no alerts")
        return 0
    if args.job or args.node:
        return show_nodes(args, client, since_s)
    if since_s is None:
        sample = client.call("telemetry.latest")
        emit(args, sample, lambda: format_sample(sample))
        return 0
    reply = client.call("telemetry.samples", {"since_s": since_s}, timeout=120)
    emit(args, {"samples": reply["samples"]}, lambda: format_samples(reply["samples"], reply["resolution_s"]))
    return 0


def chosen_nodes(nodes, job, node):
    """{name: sample} of the nodes asked for: those of `job` (its id or its Slurm id), or `node`."""
    return {name: sample for name, sample in nodes.items()
            if (node is None or name == node) and (job is None or job in (sample.get("job_id"), sample.get("slurm_job_id")))}


def show_nodes(args, client, since_s):
    asked = " and ".join(filter(None, ["job %s" % args.job if args.job else None, "node %s" % args.node if args.node else None]))
    nodes = chosen_nodes(client.call("telemetry.latest").get("nodes") or {}, args.job, args.node)
    if since_s is not None:
        # Ended jobs' nodes are in the history store still: a node named outright is asked for as it is.
        names = sorted(nodes) or ([args.node] if args.node else [])
        if not names:
            raise CommandError("no running Slurm job's node matches %s (a job's nodes are named while it runs; --node N asks the history)" % asked)
        windows = {name: client.call("telemetry.samples", {"since_s": since_s, "node": name}, timeout=120) for name in names}
        emit(args, {"nodes": {name: reply["samples"] for name, reply in windows.items()}},
             lambda: "\n\n".join("node %s\n%s" % (name, format_samples(reply["samples"], reply["resolution_s"])) for name, reply in windows.items()))
        return 0
    if not nodes:
        raise CommandError("no running Slurm job's node matches %s (specdeck jobs HOST shows where its job runs)" % asked)
    emit(args, {"nodes": nodes}, lambda: "\n\n".join(format_node(name, nodes[name]) for name in sorted(nodes)))
    return 0


def format_node(name, node):
    """One node of a Slurm job: a head line (its job, its age, why it has no current figures),
    then its host figures, GPUs and processes as the host's are shown."""
    head = "node %s  job %s (Slurm %s)" % (name, node.get("job_id"), node.get("slurm_job_id"))
    if node.get("age_s") is not None:
        head += "  sampled %d s ago" % node["age_s"]
    lines = [head]
    if node.get("error"):
        lines.append("not current: %s" % node["error"])
    if node.get("time") is None:
        return "\n".join(lines)
    processes = [dict(p, job_id=node.get("job_id") if p.get("slurm_job_id") == node.get("slurm_job_id") else None)
                 for p in node.get("processes") or ()]
    body = format_sample(dict(node, processes=processes, stale=False)).splitlines()
    return "\n".join(lines + ["node" + line[4:] if line.startswith("host  ") else line for line in body])


def nodes_lines(nodes):
    """The running Slurm jobs' nodes, a line each, under the host's figures."""
    lines = []
    for name in sorted(nodes):
        node = nodes[name]
        lines.append("node %-10s job %s (Slurm %s)  %s%s" % (name, node.get("job_id"), node.get("slurm_job_id"), model.node_summary(node),
                                                           "  (%s)" % node["error"] if node.get("error") else ""))
    return lines + ["(--job JOB or --node NODE shows a node's GPUs)"] if lines else []


def format_host(host, nvml):
    """The host's lines: CPU, memory, load and network, each file system, and why no GPU is shown."""
    shown = model.host_figures(host)
    lines = ["host  cpu %s of %s cores  memory %s / %s GiB  load %s  net rx %s tx %s" % (
        shown["cpu"], shown["cpu_count"], shown["memory_used"], shown["memory_total"], shown["load"], shown["network_rx"],
        shown["network_tx"])]
    for disk in host.get("disks") or ():
        figures = model.disk_figures(disk)
        fills = "  filling %s, %s" % (figures["fill"], figures["full"]) if figures["full"] else ""
        lines.append("disk  %-12s %s free of %s  %s%s" % (figures["role"], figures["free"], figures["total"], figures["path"], fills))
    missing = model.missing_gpus(nvml)
    if missing:
        lines.append("GPUs: none shown (%s)" % missing)
    elif nvml.get("reason"):
        lines.append("GPUs: %s" % nvml["reason"])
    return lines


# The GPU table: (header, figure), each figure as the GPUs pane shows it (model.py).
GPU_COLUMNS = (("GPU", "index"), ("NAME", "name"), ("UTIL", "utilization"), ("MEM GiB", "memory"), ("TEMP C", "temperature"),
               ("POWER W", "power"), ("SM MHz", "sm_clock"), ("PCIE RX/TX", "pcie"), ("NVLINK RX/TX", "nvlink"), ("THROTTLE", "throttle"))
PROCESS_COLUMNS = (("PID", "pid"), ("GPU", "gpu"), ("MEM GiB", "memory"), ("JOB", "job"), ("RUNTIME", "runtime"), ("COMMAND", "command"))


def format_sample(sample):
    """The latest sample for a person: the host, one row per GPU, one per GPU process."""
    lines = format_host(sample["host"], sample.get("nvml") or {})
    stale = not_current_line(sample)
    if stale:
        lines.insert(0, stale)
    gpus = sample.get("gpus") or []
    if gpus:
        lines.append("")
        rows = [tuple(header for header, _ in GPU_COLUMNS)]
        for gpu in gpus:
            shown = model.gpu_figures(gpu)
            shown.update(memory="%s/%s" % (shown["memory_used"], shown["memory_total"]), power="%s/%s" % (shown["power"], shown["power_limit"]))
            rows.append(tuple(shown[key] for _, key in GPU_COLUMNS))
        lines += _table(rows)
    processes = sample.get("processes") or []
    if processes:
        lines.append("")
        rows = [tuple(header for header, _ in PROCESS_COLUMNS)]
        for process in processes:
            shown = model.process_figures(process, sample["time"])
            shown["command"] = display.cut(shown["command"], 60)
            rows.append(tuple(shown[key] for _, key in PROCESS_COLUMNS))
        lines += _table(rows)
    if sample.get("nodes"):
        lines += [""] + nodes_lines(sample["nodes"])
    return "\n".join(lines)


def format_samples(samples, resolution_s):
    """One line per sample: time, CPU, then utilisation / memory / power of each GPU."""
    if not samples:
        return "no samples in that window (the host records from its daemon's start)"
    lines = ["%d samples, one per %s" % (len(samples), display.format_age(resolution_s))]
    for sample in samples:
        gpus = "  ".join("%(index)s: %(utilization)s %(memory_used)sGiB %(power)sW" % model.gpu_figures(gpu) for gpu in sample["gpus"])
        lines.append("%s  cpu %s  %s" % (time.strftime("%m-%d %H:%M:%S", time.localtime(sample["time"])),
                                         model.host_figures(sample["host"])["cpu"], gpus))
    return "\n".join(lines)


def _table(rows):
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    return ["  ".join(cell.ljust(width) for cell, width in zip(row, widths)).rstrip() for row in rows]
