"""`report --since 1w` on a week of history, beside the baseline of fetching the same figures
with the methods that existed before it (one history.query per series name at the store's
1-minute resolution, jobs.list, notify.list) and working them out on the client:

  python benchmarks/bench_report.py              # a week: 12 servers, 8 training runs, 4 disks, 100 jobs, 1,000 alerts (~3 min)
  python benchmarks/bench_report.py --every 10   # a point every 10 s (far longer to write)

Measured (2 cores, a point every 300 s: 274,176 points in 136 series): report.get over the week
0.406 s wall, 0.400 s of the daemon's CPU, 85.7 kB; the baseline 3.14 s, 1.84 s, 10.2 MB
(7.7x faster, 4.6x less CPU, 120x fewer bytes).

The history is written the way the daemon writes it: every point through the store's add_many,
a flush and its maintenance once per simulated minute (time injected, ending now), the jobs as
their records on disk, the alerts through the alert queue. Then a real daemon starts on that
state directory; the script times report.get over the week (median of RUNS, and its reply size)
and the daemon's CPU while it answers (utime + stime from /proc), then the baseline. Target:
under 1 s.
"""

import argparse
import json
import os
import random
import statistics
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from benchmarks.daemon_client import Client

WEEK_S = 7 * 86400
RUNS = 5


def write_history(home, now, every_s, servers, runs, disks, jobs):
    from remote.history.store import HistoryStore

    clock = [now - WEEK_S]
    store = HistoryStore(os.path.join(home, "history.sqlite"), clock=lambda: clock[0]).open()
    rng = random.Random(7)
    series = [("serving", "accept_length", {"job": "j%d" % i}) for i in range(1, servers + 1)]
    series += [("training", name, {"job": "j%d" % i}) for i in range(servers + 1, servers + runs + 1) for name in ("step", "loss")]
    series += [("telemetry", "disk_free_bytes", {"disk": "/data%d" % i}) for i in range(disks)]
    series += [("telemetry", "disk_total_bytes", {"disk": "/data%d" % i}) for i in range(disks)]
    series += [("telemetry", "job_gpu_utilization_percent", {"job": "j%d" % i}) for i in range(1, jobs + 1)]
    points, step = 0, 0
    while clock[0] < now:
        at = clock[0]
        batch = []
        for source, name, labels in series:
            value = {"accept_length": 2.0 + rng.random(), "step": step, "loss": 3.0 / (1 + step / 1000.0),
                     "disk_free_bytes": 4e11 - step * 1e5, "disk_total_bytes": 2e12}.get(name, 50 + 50 * rng.random())
            batch.append((source, name, labels, float(value), at))
        store.add_many(batch)
        points += len(batch)
        step += 1
        clock[0] = at + every_s
        if step % max(1, int(60 / every_s)) == 0:
            store.flush()
            while store.maintain():
                pass
    store.flush()
    store.close()
    return points, len(series)


def write_jobs(home, now, servers, runs, jobs):
    from remote.core.records import write_json

    for number in range(1, jobs + 1):
        job_dir = os.path.join(home, "jobs", "j%d" % number)
        os.makedirs(job_dir)
        kind = "server" if number <= servers else "training" if number <= servers + runs else "download" if number % 5 == 0 else "command"
        started = now - WEEK_S + number * (WEEK_S / jobs) * 0.9
        meta = {"target": "/data/k2.5"} if kind == "server" else {"repo": "team/model-%d" % number} if kind == "download" else {}
        write_json(os.path.join(job_dir, "job.json"), {"argv": ["sh", "-c", "true"], "kind": kind, "name": "%s %d" % (kind, number),
                                                       "submitted_at": started, "meta": meta})
        write_json(os.path.join(job_dir, "run.json"), {"started_at": started, "pid": 1, "supervisor_pid": 1, "supervisor_start_ticks": 0})
        write_json(os.path.join(job_dir, "exit.json"), {"exit_code": number % 3, "ended_at": started + 3600})
    write_json(os.path.join(home, "break_evens.json"), {"/data/k2.5": {"accept_length": 2.46, "how": "30 ms x 82 tok/s", "set_at": now - WEEK_S}})


def write_alerts(home, now, count):
    from remote.notify.queue import AlertQueue

    clock = [now - WEEK_S]
    queue = AlertQueue(os.path.join(home, "notify.sqlite"), clock=lambda: clock[0])
    for number in range(count):
        clock[0] = now - WEEK_S + number * WEEK_S / count
        alert = {"id": "job:j%d:%d" % (number % 300 + 1, number), "kind": "job_failed", "title": "j%d failed" % (number % 300 + 1),
                 "message": "exited 1", "urgent": True, "job_id": "j%d" % (number % 300 + 1)}
        queue.raise_alert(alert, ["c1", "c2"])
        queue.delivered("c1", [alert["id"]])
        queue.failed("c2", [alert["id"]], "HTTP 503")
    queue.close()
    os.makedirs(os.path.join(home, "report"), exist_ok=True)
    with open(os.path.join(home, "report", "starts.jsonl"), "w") as f:
        for number in range(40):
            f.write(json.dumps({"at": now - WEEK_S + number * 3600 * 4, "pid": 100 + number}) + "\n")
        f.write('{"at": 17\n')  # a line cut by a kill: skipped


def cpu_s(pid):
    with open("/proc/%d/stat" % pid) as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def timed(client, pid, call):
    times, cpus, size = [], [], 0
    for _ in range(RUNS):
        cpu, began = cpu_s(pid), time.perf_counter()
        size = call()
        times.append(time.perf_counter() - began)
        cpus.append(cpu_s(pid) - cpu)
    return statistics.median(times), statistics.median(cpus), size


def baseline(client, now):
    """The figures fetched with the methods that came before report.get, and worked out here."""
    size = 0
    for source, name in (("serving", "accept_length"), ("training", "step"), ("training", "loss"),
                         ("telemetry", "disk_free_bytes"), ("telemetry", "job_gpu_utilization_percent")):
        reply, sized = client.call_sized("history.query", {"source": source, "name": name, "start": now - WEEK_S, "end": now,
                                                           "resolution_s": 60})
        size += sized
        for series in reply["result"]["series"]:
            means = sorted(p[2] for p in series["points"])
            if means:
                statistics.median(means)
    for method in ("jobs.list", "notify.list"):
        size += client.call_sized(method)[1]
    return size


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--every", type=float, default=300.0, help="seconds between points of a series (default 300)")
    parser.add_argument("--servers", type=int, default=12)
    parser.add_argument("--runs", type=int, default=8)
    parser.add_argument("--disks", type=int, default=4)
    parser.add_argument("--jobs", type=int, default=100)
    parser.add_argument("--alerts", type=int, default=1000)
    args = parser.parse_args()
    home = tempfile.mkdtemp(prefix="specdeck-bench-report-")
    os.chmod(home, 0o700)
    os.environ["SPECDECK_HOME"] = home
    now = time.time()
    began = time.perf_counter()
    points, series = write_history(home, now, args.every, args.servers, args.runs, args.disks, args.jobs)
    write_jobs(home, now, args.servers, args.runs, args.jobs)
    write_alerts(home, now, args.alerts)
    print("a week of history: %d points in %d series, %d jobs, %d alerts (written in %.0f s)" % (
        points, series, args.jobs, args.alerts, time.perf_counter() - began))
    from tui.transport.connection import open_client

    keeper = open_client("local")  # starts the daemon on this state directory
    client = Client(home)
    try:
        pid = client.hello["daemon_pid"]
        wait_until = time.time() + 60
        while client.call("history.status").get("error") and time.time() < wait_until:
            time.sleep(0.2)

        def ours():
            reply, size = client.call_sized("report.get", {"since_s": WEEK_S})
            assert "result" in reply, reply
            return size

        report = client.call("report.get", {"since_s": WEEK_S})["result"]
        ours_s, ours_cpu, ours_bytes = timed(client, pid, ours)
        base_s, base_cpu, base_bytes = timed(client, pid, lambda: baseline(client, now))
        print("report.get --since 1w: %d jobs, %d training, %d servers, %d downloads, %d alerts, %d disks, %d restarts; errors %s" % (
            len(report["jobs"]), len(report["training"]), len(report["servers"]), len(report["downloads"]), len(report["alerts"]),
            len(report["disks"]), len(report["daemon"]["restarts"]), report["errors"] or "none"))
        print("  %-34s %8s %12s %12s" % ("", "wall", "daemon CPU", "reply"))
        print("  %-34s %7.3f s %10.3f s %9.1f kB" % ("report.get (ours)", ours_s, ours_cpu, ours_bytes / 1e3))
        print("  %-34s %7.3f s %10.3f s %9.1f kB" % ("history.query x5 + lists (baseline)", base_s, base_cpu, base_bytes / 1e3))
        print("  ratio: %.1fx faster, %.1fx less daemon CPU, %.1fx fewer bytes; target under 1 s: %s" % (
            base_s / ours_s, base_cpu / ours_cpu if ours_cpu else float("inf"), base_bytes / ours_bytes, "met" if ours_s < 1 else "MISSED"))
    finally:
        try:
            client.call("daemon.shutdown")
        except Exception:
            pass
        client.close()
        keeper.close()


if __name__ == "__main__":
    main()
