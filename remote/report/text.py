"""The report as text people read: one screen, a heading per section, durations as people say
them and sizes in both binary and decimal units (2.22 GiB, 2.38 GB). The CLI prints it, the
console's "while you were away" screen shows it and the daily digest sends it.

Every text that came from elsewhere (a job's name, a repo, an alert's title and message, a disk's
path, an error) is one line (`line`): a control character shows as its escape (`\\n`, `\\x1b`,
`\\u202e`), so a name can neither forge a row nor drive a terminal. A figure sampled over time
says when (`free at 02:00`)."""

import time
import unicodedata

from ..core.words import minutes

MAX_LINES_PER_SECTION = 12
EPISODES_SHOWN = 3  # stalls (slowdowns) named on a run's line; the rest counted


def line(text, limit=None):
    """`text` as one line: every control, format or line-separating character as a visible escape."""
    text = "" if text is None else text if isinstance(text, str) else str(text)
    if limit is not None and len(text) > limit:
        text = text[: limit - 1] + "…"
    if text.isprintable():
        return text
    out = []
    for char in text:
        if char.isprintable() or char == " ":
            out.append(char)
        elif unicodedata.category(char) in ("Cc", "Cf", "Zl", "Zp", "Cs", "Co", "Cn"):
            out.append({"\n": "\\n", "\r": "\\r", "\t": "\\t"}.get(char) or
                       ("\\x%02x" % ord(char) if ord(char) < 0x100 else "\\u%04x" % ord(char) if ord(char) < 0x10000 else "\\U%08x" % ord(char)))
        else:
            out.append(" ")  # another space (no-break, ideographic): shown as a space
    return "".join(out)


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


def loss_text(value):
    return value if isinstance(value, str) else number(value, 3)


def episodes_text(found, count, verb, ongoing_verb):
    """`stood still twice: 03:12 for 8 min, 04:40 for 2 min` (the last EPISODES_SHOWN; one
    not over: `standing still since 05:10 (12 min)`)."""
    count = max(count, len(found))
    parts = ["%s since %s (%s)" % (ongoing_verb, clock(e["start"]), minutes(e["length_s"])) if e.get("ongoing")
             else "%s for %s" % (clock(e["start"]), minutes(e["length_s"])) for e in found[-EPISODES_SHOWN:]]
    if count > len(parts):
        parts.insert(0, "... %d before" % (count - len(parts)))
    return "%s %s: %s" % (verb, "twice" if count == 2 else times(count), ", ".join(parts))


def _job(job):
    util = job.get("gpu_utilization_percent")
    gpu = ", GPU %s%% mean, %s%% max" % (number(util["mean"], 0), number(util["max"], 0)) if util else ""
    started = "started %s, " % clock(job["started_at"]) if job["started_in_window"] else ""
    return "%s %s %s: %s%s%s" % (line(job["id"]), line(job["kind"]), line(job["name"]), started, how_job_ended(job), gpu)


def _training(run):
    best = run.get("best_checkpoint") or {}
    steps, loss = run["steps"], run["loss"]
    text = "%s %s: " % (line(run["id"]), line(run["name"]))
    if steps.get("from") is None:
        text += "no step logged in the window"
    else:
        text += "steps %s -> %s, loss %s -> %s" % (number(steps["from"], 0), number(steps["to"], 0),
                                                   loss_text(loss["from"]), loss_text(loss["to"]))
    stalls = run.get("stalls") or []
    if stalls:
        text += "; " + episodes_text(stalls, run.get("stall_count") or 0, "stood still", "standing still")
    elif steps.get("from") is not None and "stalls" in run:
        text += "; never stood still"
    if run.get("slowdowns"):
        text += "; " + episodes_text(run["slowdowns"], 0, "slowed down", "slow")
    if best.get("name"):
        text += "; best %s: predicted accept length %s" % (line(best["name"]), number(best.get("predicted_accept_length")))
        if best.get("measured_accept_length") is not None:
            text += ", measured %s" % number(best["measured_accept_length"])
    for notice in run.get("notices") or []:
        text += "; " + line(notice)
    return text


def _server(server):
    length = server.get("accept_length")
    text = "%s %s: " % (line(server["id"]), line(server["name"]))
    text += "accept length min %s, median %s, max %s" % (number(length["min"]), number(length["median"]), number(length["max"])) \
        if length else "no accept length recorded"
    if server.get("break_even") is not None:
        text += "; under break-even %s for %s" % (number(server["break_even"]), minutes(server["under_break_even_s"] or 0)) \
            if length else "; break-even %s" % number(server["break_even"])
    if server.get("stalls"):
        text += "; " + episodes_text(server["stalls"], 0, "stalled", "stalled")
    return text


def _download(download):
    verdict = download.get("verdict")
    if isinstance(verdict, dict):
        verdict = verdict.get("verdict") or verdict.get("state")
    text = "%s %s: %s" % (line(download["id"]), line(download["repo"]), line(download["state"]))
    if verdict and verdict != download["state"]:
        text += " (%s)" % line(verdict)
    kept, total = download.get("bytes_kept", download.get("bytes_done")), download.get("bytes_total")
    if download.get("complete", True) and total and kept in (None, total):
        text += ", %s" % size(total)
    elif kept is not None:
        text += ", %s kept%s" % (size(kept), " of %s" % size(total) if total else "")
    if download.get("stalls"):
        text += "; " + episodes_text(download["stalls"], 0, "stalled", "stalled")
    if download.get("error"):
        text += ": %s" % line(download["error"], 120)
    return text


def _alert(alert):
    delivered = ", ".join("%s %s" % (line(d["channel"]), "delivered" if d["state"] == "sent" else "NOT delivered (%s%s)" % (
        line(d["state"]), ": " + line(d["error"], 60) if d.get("error") else "")) for d in alert["channels"]) or "no channel wanted it"
    title, message = line(alert["title"]), line(alert.get("message"), 200)
    about = alert.get("job_id") or alert.get("server")
    named = about is None or any(str(about) in part for part in (title, message))
    text = "%s %s" % (clock(alert["time"]), title)
    if not named:
        text += " (%s %s)" % ("job" if alert.get("job_id") else "server", line(about))
    if message:
        text += ": " + message
    return text + "; " + delivered


def _disk(disk):
    text = "%s: lowest free %s at %s" % (line(disk["path"]), size(disk["lowest_free_bytes"]), day_clock(disk["lowest_at"]))
    if "free_last_at" not in disk:  # a report of an older agent
        return text + ", %s free at its last sample" % size(disk.get("free_bytes_now"))
    return text + ", %s free at %s" % (size(disk["free_bytes_last"]), day_clock(disk["free_last_at"]))


def heading(report):
    """`9 h 00 min (Thu 11:26 to Thu 20:26)`: the report's span, said once."""
    return "%s (%s to %s)" % (minutes(report["until"] - report["since"]), day_clock(report["since"]), day_clock(report["until"]))


def render(report, titled=True):
    """The report's text, one screen; `titled`: with its first line naming the host and the span
    (a screen that has its own title leaves it out)."""
    lines = ["specdeck report %s: the last %s" % (line(report.get("host")), heading(report))] if titled else []
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
            lines.append("  service %s restarted %d times" % (line(service["name"]), service["restarts"]))
    for name, error in sorted((report.get("errors") or {}).items()):
        lines.append("  %s could not be read: %s" % (line(name), line(error, 300)))
    if report.get("cut"):
        lines.append("  not read (the report's deadline passed): %s" % ", ".join(report["cut"]))
    return "\n".join(lines)
