"""The GPUs pane's text: one GPU in one line of at most 80 columns with bars, the host's CPU,
memory and disks in one line, the GPU processes with the job that owns each; each figure as
model.py writes it, so that `specdeck gpus` shows the same."""

from rich.text import Text

from ..display import cut
from . import model

BAR_CELLS = 10


def bar(fraction, cells=BAR_CELLS):
    """A bar of `cells` characters, coloured by how full it is."""
    if fraction is None:
        return Text("·" * cells, style="dim")
    fraction = max(0.0, min(1.0, fraction))
    filled = int(round(fraction * cells))
    style = "green" if fraction < 0.7 else "yellow" if fraction < 0.9 else "red"
    return Text("█" * filled, style=style) + Text("░" * (cells - filled), style="dim")


def gpu_row(gpu, jobs):
    """One GPU in one line of at most 80 columns."""
    shown = model.gpu_figures(gpu)
    used, total = gpu.get("memory_used_bytes"), gpu.get("memory_total_bytes")
    utilization = gpu.get("utilization_percent")
    row = Text("%s " % shown["index"], style="bold")
    row += bar(None if utilization is None else utilization / 100.0)
    row += Text(" %4s " % shown["utilization"])
    row += bar(used / total if used is not None and total else None, 6)
    row += Text(" %5s/%-4s" % (shown["memory_used"], shown["memory_total"] + "G" if total else "-"))
    temperature = gpu.get("temperature_c")
    row += Text(" %5s" % _unit(shown["temperature"], "°C"), style="red" if temperature is not None and temperature >= 85 else "")
    row += Text(" %5s" % _unit(shown["power"], "W"))
    row += Text(" %7s" % _unit(shown["sm_clock"], "MHz"))
    if gpu.get("lost"):
        row += Text(" LOST", style="bold red")
    elif model.throttle_reasons(gpu):
        row += Text(" throttled", style="yellow")
    if jobs:
        row += Text(" " + cut(",".join(jobs), 14), style="cyan")  # "j8,j9,j1…", never "j8,j9,j1" (another id)
    return row


def _unit(text, unit):
    return text if text == "-" else text + unit


def host_line(host, nvml, node=None):
    """The host's (or a node's: `node` names it) CPU, memory, load and disks, and why no GPU is shown."""
    shown = model.host_figures(host)
    parts = ["cpu %s" % shown["cpu"], "mem %s/%s GiB" % (shown["memory_used"], shown["memory_total"]), "load %s" % shown["load"]]
    if node is not None:
        parts.insert(0, "%s:" % node)
    for disk in model.disks_shown(host.get("disks"), 2):
        figures = model.disk_figures(disk)
        parts.append("%s %s free%s" % (figures["role"].split(",")[0], figures["free"].split(" (")[0],
                                       ", %s" % figures["full"] if figures["full"] else ""))
    line = Text("  ".join(parts))
    missing = model.missing_gpus(nvml)
    if missing:
        line = Text("no GPUs shown: %s\n" % missing, style="yellow") + line
    return line


def process_lines(processes, now, limit):
    lines = []
    for process in sorted(processes, key=lambda p: (-(p.get("memory_bytes") or 0), p["pid"]))[:limit]:
        shown = model.process_figures(process, now)
        memory = _unit(shown["memory"], "G")
        if process.get("other_namespace"):
            lines.append("%7s gpu%s %6s  -     %s" % (shown["pid"], shown["gpu"], memory, shown["command"]))
            continue
        lines.append("%7s gpu%s %6s  %-5s %s  %s" % (shown["pid"], shown["gpu"], memory, shown["job"], shown["runtime"], cut(shown["command"], 40)))
    if len(processes) > limit:
        lines.append("… %d more (specdeck gpus HOST lists all)" % (len(processes) - limit))
    return "\n".join(lines) if lines else "no GPU processes"


def nodes_line(nodes, chosen):
    """The Slurm jobs' nodes in a line or two: each with its GPUs' mean utilisation and memory
    (the one shown in brackets), then why a node has no current figures, one line each."""
    line = Text("nodes: ")
    problems = []
    for name in sorted(nodes):
        node = nodes[name]
        summary = model.node_summary(node)
        label = "[%s]" % name if name == chosen else name
        line += Text(label, style="bold" if name == chosen else "")
        line += Text(" %s  " % summary, style="yellow" if node.get("error") else "")
        if node.get("error"):
            problems.append("%s: %s" % (name, node["error"]))
    jobs = sorted({"%s (Slurm %s)" % (n.get("job_id"), n.get("slurm_job_id")) for n in nodes.values()})
    line += Text("of " + ", ".join(jobs), style="cyan")
    for problem in problems[:2]:
        line += Text("\n" + problem[:158], style="yellow")
    return line
