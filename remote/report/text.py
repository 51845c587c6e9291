"""The report as text people read: one screen, a heading per section, durations as people say
them and sizes in both binary and decimal units (2.22 GiB, 2.38 GB). The CLI prints it, the
console's "while you were away" screen shows it and the daily digest sends it."""

import time

from ..core.words import minutes

MAX_LINES_PER_SECTION = 12


def size(n):
    if n is None:
        return "?"
    for unit, power in (("TiB", 4), ("GiB", 3), ("MiB", 2)):
        if abs(n) >= 1024 ** power:
            return "%.1f %s (%.1f %s)" % (n / 1024 ** power, unit, n / 1000 ** power, unit.replace("i", ""))
    return "%d bytes" % n


def clock(epoch):
    return time.strftime("%H:%M", time.localtime(epoch)) if epoch is not None else "?"


def day_clock(epoch):
    return time.strftime("%a %H:%M", time.localtime(epoch)) if epoch is not None else "?"


def times(count):
    return "once" if count == 1 else "%d times" % count


def number(value, digits=2):
    return "?" if value is None else ("%.*f" % (digits, value)).rstrip("0").rstrip(".") if digits else "%d" % value


def how_job_ended(job):
    if job["running"]:
        return "running for %s" % minutes(job["runtime_s"] or 0)
    if job["ended_at"] is None:
        return job["state"] or "?"
    how = "killed by signal %d" % job["signal"] if job.get("signal") else \
        "exit %s" % job["exit_code"] if job.get("exit_code") is not None else "no exit code"
    return "%s at %s (%s) after %s" % (job["state"], clock(job["ended_at"]), how, minutes(job["runtime_s"] or 0))


def _section(lines, heading, rows, render, empty):
    lines.append("")
    lines.append("%s (%d)" % (heading, len(rows)) if rows else heading)
    if not rows:
        lines.append("  " + empty)
        return
    for row in rows[:MAX_LINES_PER_SECTION]:
        lines.append("  " + render(row))
    if len(rows) > MAX_LINES_PER_SECTION:
        lines.append("  ... and %d more (--json lists them all)" % (len(rows) - MAX_LINES_PER_SECTION))


def _job(job):
    util = job.get("gpu_utilization_percent")
    gpu = ", GPU %s%% mean, %s%% max" % (number(util["mean"], 0), number(util["max"], 0)) if util else ""
    started = "started %s, " % clock(job["started_at"]) if job["started_in_window"] else ""
    return "%s %s %s: %s%s%s" % (job["id"], job["kind"], job["name"], started, how_job_ended(job), gpu)


def _training(run):
    best = run.get("best_checkpoint") or {}
    steps, loss = run["steps"], run["loss"]
    text = "%s %s: steps %s -> %s, loss %s -> %s" % (run["id"], run["name"], number(steps["from"], 0), number(steps["to"], 0),
                                                     number(loss["from"], 3), number(loss["to"], 3))
    if best.get("name"):
        text += "; best %s: predicted accept length %s" % (best["name"], number(best.get("predicted_accept_length")))
        if best.get("measured_accept_length") is not None:
            text += ", measured %s" % number(best["measured_accept_length"])
    return text


def _server(server):
    length = server.get("accept_length")
    text = "%s %s: " % (server["id"], server["name"])
    text += "accept length min %s, median %s, max %s" % (number(length["min"]), number(length["median"]), number(length["max"])) \
        if length else "no accept length recorded"
    if server.get("break_even") is not None:
        text += "; under break-even %s for %s" % (number(server["break_even"]), minutes(server["under_break_even_s"] or 0)) \
            if length else "; break-even %s" % number(server["break_even"])
    return text


def _download(download):
    verdict = download.get("verdict")
    if isinstance(verdict, dict):
        verdict = verdict.get("verdict") or verdict.get("state")
    text = "%s %s: %s" % (download["id"], download["repo"], download["state"])
    if verdict and verdict != download["state"]:
        text += " (%s)" % verdict
    if download.get("bytes_total"):
        text += ", %s" % size(download["bytes_total"])
    if download.get("error"):
        text += ": %s" % download["error"][:120]
    return text


def _alert(alert):
    delivered = ", ".join("%s %s" % (d["channel"], "delivered" if d["state"] == "sent" else "NOT delivered (%s%s)" % (
        d["state"], ": " + d["error"][:60] if d.get("error") else "")) for d in alert["channels"]) or "no channel wanted it"
    return "%s %s: %s" % (clock(alert["time"]), alert["title"], delivered)


def _disk(disk):
    text = "%s: lowest free %s at %s" % (disk["path"], size(disk["lowest_free_bytes"]), day_clock(disk["lowest_at"]))
    return text + ", %s free now" % size(disk["free_bytes_now"])


def heading(report):
    """`9 h 00 min (Thu 11:26 to Thu 20:26)`: the report's span, said once."""
    return "%s (%s to %s)" % (minutes(report["until"] - report["since"]), day_clock(report["since"]), day_clock(report["until"]))


def render(report, titled=True):
    """The report's text, one screen; `titled`: with its first line naming the host and the span
    (a screen that has its own title leaves it out)."""
    lines = ["specdeck report %s: the last %s" % (report.get("host") or "", heading(report))] if titled else []
    _section(lines, "Jobs", report["jobs"], _job, "no job started, ended or ran")
    _section(lines, "Training", report["training"], _training, "no training run")
    _section(lines, "Servers", report["servers"], _server, "no server")
    _section(lines, "Downloads", [d for d in report["downloads"] if d["finished"]], _download, "no download finished")
    _section(lines, "Alerts", report["alerts"], _alert, "no alert raised")
    _section(lines, "Disks", report["disks"], _disk, "no disk recorded")
    daemon = report["daemon"] or {}
    lines.append("")
    lines.append("Daemon")
    if daemon:
        restarts = daemon.get("restarts") or []
        lines.append("  up %s (since %s); %s" % (minutes(daemon["uptime_s"]), day_clock(daemon["started_at"]),
                     "restarted %s: %s" % (times(daemon.get("restart_count") or len(restarts)),
                                           ", ".join(day_clock(r["at"]) for r in restarts[-5:]))
                     if restarts else "no restart in the window"))
        for service in daemon.get("service_restarts") or []:
            lines.append("  service %s restarted %d times" % (service["name"], service["restarts"]))
    for name, error in sorted((report.get("errors") or {}).items()):
        lines.append("  %s could not be read: %s" % (name, error))
    if report.get("cut"):
        lines.append("  not read (the report's deadline passed): %s" % ", ".join(report["cut"]))
    return "\n".join(lines)
