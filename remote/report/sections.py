"""The report's sections, each read from one of the host's own records over [since, until):
jobs (job directories), training runs (their step records as logged: first and last step and
loss, where they stood still; their checkpoint journal), servers (their series in the history
store, the break-even lines), downloads (their progress records: the bytes kept), alerts (the
alert queue, notify.sqlite: each with its message and what it is about, and the stalls and
slowdowns it tells, with their start and length), disks (free space in the history store, with
the time of its last sample) and the daemon (its starts). The history's buckets are for charts:
a figure said as a run's first or last is the one it logged.

Every section is bounded: at most MAX_ROWS rows (the newest), a read of the alert queue capped
at MAX_ALERTS; a record that does not parse is skipped where it is read."""

import json
import os
import sqlite3

from ..notify import queue as alert_queue
from ..notify.stalls import own_limit, stood_still
from ..serving.break_even_store import BreakEvenStore
from . import history_figures as figures
from . import presence

MAX_ROWS = 200
MAX_ALERTS = 500
MAX_NAME = 120
MAX_MESSAGE = 300
MAX_EPISODES = 50  # stalls (or slowdowns) listed per row: the newest
STALL_KINDS = ("training_stalled", "job_stalled", "download_stalled", "server_stalled")
FOLLOW_UPS = {"resumed": "stall", "pace_back": "slowdown"}
LIVE_STATES = ("running", "starting", "stopping", "downloading", "verifying")


def _number(value):
    return value if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def in_window(job, since, until):
    """Whether a job started, ended or ran during the window."""
    started = _number(job.get("started_at")) or _number(job.get("submitted_at")) or 0.0
    ended = _number(job.get("ended_at"))
    if ended is None:
        return job.get("process_state") in ("running", "starting") or since <= started < until
    return started < until and ended >= since


def window_jobs(daemon, since, until):
    """The jobs of the window, oldest first, at most MAX_ROWS (the newest)."""
    return [job for job in daemon.jobs.list() if in_window(job, since, until)][-MAX_ROWS:]


def job_rows(jobs, store, since, until):
    runs = {job["id"]: (max(since, _number(job.get("started_at")) or since), min(until, _number(job.get("ended_at")) or until)) for job in jobs}
    utilisation = figures.over_runs(store, "telemetry", "job_gpu_utilization_percent", runs) if store else {}
    rows = []
    for job in jobs:
        started, ended = _number(job.get("started_at")), _number(job.get("ended_at"))
        util = figures.spread(utilisation.get(job["id"], []))
        rows.append({
            "id": job["id"], "name": str(job.get("name") or "")[:MAX_NAME], "kind": job.get("kind"), "state": job.get("state"),
            "exit_code": job.get("exit_code"), "signal": job.get("signal"), "started_at": started, "ended_at": ended,
            "started_in_window": started is not None and started >= since, "running": ended is None and job.get("process_state") == "running",
            "runtime_s": round((ended if ended is not None else until) - started, 1) if started is not None else None,
            "gpu_utilization_percent": {k: round(util[k], 1) for k in ("mean", "max")} if util else None,
        })
    return rows


def training_rows(jobs, store, daemon, since, until):
    from ..training import stepstore
    from ..training.methods import checkpoint_list

    runs = [job for job in jobs if job.get("kind") == "training"]
    rows = []
    for job in runs:
        job_dir = daemon.jobs.job_dir(job["id"])
        logged = stepstore.logged_range(job_dir, since, until) or {}
        first, last = logged.get("first") or {}, logged.get("last") or {}
        live = job.get("process_state") in LIVE_STATES and _number(job.get("ended_at")) is None
        stalls = stood_still(stepstore.step_times(job_dir, since, until), own_limit(job.get("meta")), until if live else None)
        try:
            saved = checkpoint_list(job_dir, job.get("meta") or {})
        except Exception as exc:  # a damaged journal: the run's other figures stand
            saved, best = [], {"error": "%s: %s" % (type(exc).__name__, exc)}
        else:
            chosen = [c for c in saved if c.get("best")] or saved[-1:]
            best = {key: chosen[-1].get(key) for key in ("name", "step", "verdict", "predicted_accept_length", "measured_accept_length")} \
                if chosen else None
        progress = job.get("progress") if isinstance(job.get("progress"), dict) else {}
        notices = [str(n)[:MAX_MESSAGE] for n in progress.get("notices") or () if isinstance(n, str)][:10]
        rows.append({"id": job["id"], "name": str(job.get("name") or "")[:MAX_NAME], "state": job.get("state"),
                     "steps": {"from": first.get("step"), "to": last.get("step")},
                     "loss": {"from": first.get("loss"), "to": last.get("loss")},
                     "first_logged_at": first.get("time"), "last_logged_at": last.get("time"), "steps_logged": logged.get("count", 0),
                     "stalls": stalls[-MAX_EPISODES:], "stall_count": len(stalls), "slowdowns": [], "notices": notices,
                     "checkpoints": len(saved), "best_checkpoint": best})
    return rows


def server_rows(jobs, store, since, until):
    servers = [job for job in jobs if job.get("kind") == "server"]
    if not servers:
        return []
    lengths = figures.by_job(store, "serving", "accept_length", since, until) if store else {}
    lines = BreakEvenStore()
    step_s = figures.resolution_for(since, until)
    rows = []
    for job in servers:
        meta = job.get("meta") or {}
        points = lengths.get(job["id"], [])
        entry = lines.of(meta.get("target"))
        line = entry["accept_length"] if entry else None
        spread = figures.spread(points)
        rows.append({
            "id": job["id"], "name": str(job.get("name") or "")[:MAX_NAME], "state": job.get("state"),
            "accept_length": {k: round(spread[k], 3) for k in ("min", "median", "max")} if spread else None,
            "samples": len(points), "break_even": line,
            "under_break_even_s": round(figures.time_under(points, line, step_s, until), 1) if line is not None and points else None,
        })
    return rows


def download_rows(jobs, since, until):
    rows = []
    for job in jobs:
        if job.get("kind") != "download":
            continue
        progress = job.get("progress") if isinstance(job.get("progress"), dict) else {}
        ended = _number(job.get("ended_at"))
        meta = job.get("meta") or {}
        rows.append({
            "id": job["id"], "repo": str(progress.get("repo") or meta.get("repo") or "")[:MAX_NAME],
            "state": job.get("state"), "finished": ended is not None and ended >= since,
            "verdict": progress.get("verdict") if isinstance(progress.get("verdict"), (str, dict)) else None,
            "bytes_total": _number(progress.get("bytes_total")), "bytes_done": _number(progress.get("bytes_done")),
            "bytes_kept": _number(progress.get("bytes_done")),  # bytes on disk, resumed and present ones included
            "complete": job.get("state") == "verified" or (progress.get("state") in ("verified", "done", "complete")),
            "ended_at": ended, "error": progress.get("error") if isinstance(progress.get("error"), str) else None,
            "stalls": [],
        })
    return rows


def alert_rows(since, until, path=None):
    """Alerts raised in the window with, per channel, whether it was delivered."""
    path = path or alert_queue.default_path()
    if not os.path.exists(path):
        return []
    conn = sqlite3.connect("file:%s?mode=ro" % path, uri=True, timeout=2.0)
    try:
        found = conn.execute("SELECT key, raised_at, body FROM alerts WHERE raised_at >= ? AND raised_at < ? "
                             "ORDER BY raised_at DESC LIMIT ?", (since, until, MAX_ALERTS)).fetchall()
        keys = [key for key, _, _ in found]
        deliveries = {}
        for start in range(0, len(keys), 200):
            chunk = keys[start:start + 200]
            for key, channel, state, tries, error in conn.execute(
                    "SELECT key, channel, state, tries, last_error FROM deliveries WHERE key IN (%s) ORDER BY channel"
                    % ",".join("?" * len(chunk)), chunk):
                deliveries.setdefault(key, []).append({"channel": channel, "state": state, "tries": tries, "error": error})
    finally:
        conn.close()
    rows = []
    for key, raised_at, body in reversed(found):
        try:
            alert = json.loads(body)
        except ValueError:
            continue
        if not isinstance(alert, dict):
            continue
        server = alert.get("server")
        rows.append({"id": key, "time": raised_at, "kind": alert.get("kind"), "title": str(alert.get("title") or "")[:200],
                     "message": str(alert.get("message") or "")[:MAX_MESSAGE], "urgent": bool(alert.get("urgent")),
                     "job_id": alert.get("job_id"), "job_name": str(alert.get("job_name") or "")[:MAX_NAME] or None,
                     "server": server if isinstance(server, str) else None,
                     "happened_at": _number(alert.get("time")), "stalled_since": _number(alert.get("stalled_since")),
                     "channels": deliveries.get(key, [])})
    return rows[-MAX_ROWS:]


def episodes(alerts, until):
    """{job or server id: [{kind: "stall" | "slowdown", start, length_s, ongoing}]} told by the
    window's alerts: a stall or slowdown from its alert's time to its follow-up's (`resumed`,
    `pace_back`), ongoing (to `until`) while none came; a follow-up whose alert was before the
    window from the stall's start it carries."""
    by_id = {alert["id"]: alert for alert in alerts}
    found = {}
    paired = set()
    for alert in alerts:
        kind = "stall" if alert.get("kind") in STALL_KINDS else "slowdown" if alert.get("kind") == "slowdown" else None
        about = alert.get("job_id") or alert.get("server")
        if kind is None or about is None:
            continue
        start = alert.get("happened_at") or alert["time"]
        follow = by_id.get(alert["id"] + (":resumed" if kind == "stall" else ":back"))
        if follow is not None:
            paired.add(follow["id"])
            end = follow.get("happened_at") or follow["time"]
            found.setdefault(about, []).append({"kind": kind, "start": start, "length_s": round(max(0.0, end - start), 1), "ongoing": False})
        else:
            found.setdefault(about, []).append({"kind": kind, "start": start, "length_s": round(max(0.0, until - start), 1), "ongoing": True})
    for alert in alerts:
        about = alert.get("job_id") or alert.get("server")
        if alert.get("kind") == "resumed" and alert["id"] not in paired and about and alert.get("stalled_since") is not None:
            end = alert.get("happened_at") or alert["time"]
            found.setdefault(about, []).append({"kind": "stall", "start": alert["stalled_since"],
                                                "length_s": round(max(0.0, end - alert["stalled_since"]), 1), "ongoing": False})
    return found


def attach_episodes(report):
    """Each training run's slowdowns, and each download's and server's stalls, from the alerts
    (a run's stalls are read from its own step records)."""
    told = episodes(report.get("alerts") or [], report["until"])
    for run in report.get("training") or []:
        run["slowdowns"] = [e for e in told.get(run["id"], []) if e["kind"] == "slowdown"][-MAX_EPISODES:]
    for row in (report.get("downloads") or []) + (report.get("servers") or []):
        row["stalls"] = [e for e in told.get(row["id"], []) if e["kind"] == "stall"][-MAX_EPISODES:]


def disk_rows(store, since, until):
    if store is None:
        return []
    frees = figures.by_job(store, "telemetry", "disk_free_bytes", since, until, label="disk")
    totals = figures.by_job(store, "telemetry", "disk_total_bytes", since, until, label="disk")
    rows = []
    for disk, points in sorted(frees.items())[:MAX_ROWS]:
        lowest = min(points, key=lambda p: p[1])
        total = totals.get(disk)
        at = max(lowest[0], since)  # a bucket's start may be before the report's window; its low was within it
        last_at, last_free = figures.last_sample(store, "telemetry", "disk_free_bytes", {"disk": disk}, points[-1], until)
        rows.append({"path": disk, "lowest_free_bytes": lowest[1], "lowest_at": at, "free_bytes_last": last_free,
                     "free_last_at": last_at, "total_bytes": total[-1][2] if total else None})
    return rows


def daemon_section(daemon, since, until):
    started = presence.starts()
    first = started[0]["at"] if started else None
    restarts = [s for s in started if since <= s["at"] < until and s["at"] != first]
    services = [{"name": s["name"], "restarts": s.get("restarts")} for s in daemon.services.status() if s.get("restarts")]
    return {"started_at": daemon.started_at, "uptime_s": round(until - daemon.started_at, 1), "pid": os.getpid(),
            "restart_count": len(restarts),
            "restarts": [{"at": s["at"], "pid": s.get("pid"), "version": s.get("version")} for s in restarts][-MAX_ROWS:],
            "service_restarts": services}
