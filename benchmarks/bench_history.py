"""The history store's figures, each beside a baseline measured in the same run:

  python benchmarks/bench_history.py            # 8 GPUs x 15 metrics, a week at 1 Hz (8-16 min)
  python benchmarks/bench_history.py --days 1   # a quicker look

- insert rate through add() + the service's step (flush + a slice of maintenance) once per
  simulated second, against one autocommit INSERT per point into a plain SQLite table;
- the longest and the 99th-percentile step of the history service at that cadence;
- size on disk after DAYS of 8 GPUs at 1 Hz (time injected, every point through add and
  flush), per table, per GPU-week, against the same points as a JSON-lines file (measured
  for one hour, scaled to the run);
- a week-window query at screen resolution (200 points): one GPU's series and all 8 of a
  metric, against GROUP BY over a week of raw points of one series;
- opening the file (with its quick_check), history.status and history.series on it.
"""

import argparse
import json
import os
import sqlite3
import statistics
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from remote.history.store import HistoryStore
from tests.history_fixtures import SimulatedGpus

DAY_S = 86400
MiB = 1024 * 1024


def line(label, ours, baseline, unit, better="higher"):
    ratio = ours / baseline if better == "higher" else baseline / ours
    print("  %-44s ours %12s   baseline %12s   %8.1fx" % (label, "%.4g %s" % (ours, unit), "%.4g %s" % (baseline, unit), ratio))


def insert_rate(directory):
    """Points/s through add + one service step per simulated second, and the steps' durations."""
    gpus = SimulatedGpus()
    store = HistoryStore(os.path.join(directory, "rate.sqlite"), clock=gpus.clock).open()
    steps_s = []
    began = time.perf_counter()
    for _ in range(3600):
        at = gpus.now
        offset = int(at) % 3600
        store.add_many([(s[0], s[1], s[2], v[offset], at) for s, v in zip(gpus.series, gpus.values)])
        gpus.now += 1
        step_began = time.perf_counter()
        store.flush()
        store.maintain_for()
        steps_s.append(time.perf_counter() - step_began)
    ours = 3600 * len(gpus.series) / (time.perf_counter() - began)
    store.close()

    naive = sqlite3.connect(os.path.join(directory, "naive.sqlite"), isolation_level=None)
    naive.execute("CREATE TABLE points (source TEXT, name TEXT, labels TEXT, t REAL, value REAL)")
    count, began = 0, time.perf_counter()
    while time.perf_counter() - began < 5.0:
        for (source, name, labels), values in zip(gpus.series, gpus.values):
            naive.execute("INSERT INTO points VALUES (?, ?, ?, ?, ?)", (source, name, json.dumps(labels), gpus.now, values[count % 3600]))
        count += len(gpus.series)
    baseline = count / (time.perf_counter() - began)
    naive.close()
    return ours, baseline, steps_s


def simulate(directory, days, gpus_count):
    gpus = SimulatedGpus(gpus=gpus_count)
    store = HistoryStore(os.path.join(directory, "history.sqlite"), clock=gpus.clock).open()
    began = time.perf_counter()
    for day in range(days):
        gpus.run(store, DAY_S, every_s=1, flush_every_s=60)
        print("    simulated day %d: %d points, %.0f s, file %.1f MiB" % (day + 1, gpus.points, time.perf_counter() - began,
                                                                           os.path.getsize(store.path) / MiB), flush=True)
    elapsed = time.perf_counter() - began
    store.close()  # checkpoints the WAL into the file
    return gpus, elapsed


def json_lines_bytes(directory, gpus_count):
    """Bytes of one simulated hour of the same points as JSON lines."""
    gpus = SimulatedGpus(gpus=gpus_count)
    path = os.path.join(directory, "points.jsonl")
    with open(path, "w") as out:
        for second in range(3600):
            for (source, name, labels), values in zip(gpus.series, gpus.values):
                out.write(json.dumps({"source": source, "name": name, "labels": labels, "t": gpus.now + second,
                                      "value": values[second]}) + "\n")
    return os.path.getsize(path)


def table_bytes(path):
    with sqlite3.connect(path) as conn:
        return dict(conn.execute("SELECT name, sum(pgsize) FROM dbstat GROUP BY name"))


def timed(function, repeat=5):
    times = []
    for _ in range(repeat):
        began = time.perf_counter()
        result = function()
        times.append(time.perf_counter() - began)
    return statistics.median(times), result


def naive_week_query(directory, gpus):
    """GROUP BY to 200 points over a week of one series' raw points (indexed)."""
    conn = sqlite3.connect(os.path.join(directory, "naive_week.sqlite"))
    conn.execute("CREATE TABLE points (series_id INTEGER, t REAL, value REAL)")
    conn.execute("CREATE INDEX by_series_time ON points (series_id, t)")
    start = gpus.now - 7 * DAY_S
    values = gpus.values[0]
    with conn:
        conn.executemany("INSERT INTO points VALUES (1, ?, ?)", ((start + i, values[i % 3600]) for i in range(7 * DAY_S)))
    width = 7 * DAY_S / 200
    sql = ("SELECT CAST((t - ?) / ? AS INTEGER) AS g, min(value), avg(value), max(value) FROM points "
           "WHERE series_id = 1 AND t >= ? AND t < ? GROUP BY g ORDER BY g")
    return timed(lambda: conn.execute(sql, (start, width, start, gpus.now)).fetchall())


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--days", type=int, default=7)
    parser.add_argument("--gpus", type=int, default=8)
    args = parser.parse_args()
    directory = tempfile.mkdtemp(prefix="bench-history-")
    print("history store, %d GPUs x 15 metrics at 1 Hz (SQLite %s):" % (args.gpus, sqlite3.sqlite_version))

    ours, baseline, steps_s = insert_rate(directory)
    line("insert rate (add + a step per second)", ours, baseline, "pt/s")
    steps_s.sort()
    print("  service step (flush + maintenance), 1 Hz: median %.1f ms, p99 %.1f ms, longest %.1f ms"
          % (steps_s[len(steps_s) // 2] * 1e3, steps_s[int(len(steps_s) * 0.99)] * 1e3, steps_s[-1] * 1e3))

    print("  simulating %d days (time injected, a step per simulated minute):" % args.days, flush=True)
    gpus, elapsed = simulate(directory, args.days, args.gpus)
    path = os.path.join(directory, "history.sqlite")
    size = os.path.getsize(path)
    per_gpu_week = size / args.gpus * 7 / args.days
    jsonl = json_lines_bytes(directory, args.gpus) * 24 * args.days
    print("  %d points in %.0f s (%.0f points/s)" % (gpus.points, elapsed, gpus.points / elapsed))
    line("size after %d days (MiB)" % args.days, size / MiB, jsonl / MiB, "MiB", better="lower")
    if args.days == 7:
        print("  size per GPU-week: %.1f MiB (%.1f MB)" % (per_gpu_week / MiB, per_gpu_week / 1e6))
    tables = table_bytes(path)
    print("  by table: " + ", ".join("%s %.1f MiB" % (name, tables.get(name, 0) / MiB)
                                     for name in ("raw", "buckets_10s", "buckets_1m", "series")))
    if args.days >= 7:
        one_minute_per_day = tables["buckets_1m"] / args.days
        print("  steady state (1 min buckets for 15 days, the rest as now): %.1f MiB (estimated from the 1 min table)"
              % ((size + one_minute_per_day * (15 - args.days)) / MiB))

    open_s, store = timed(lambda: HistoryStore(path, clock=gpus.clock).open(), repeat=1)
    print("  open (with quick_check): %.2f s" % open_s)
    window = (gpus.now - min(7, args.days) * DAY_S, gpus.now)
    one_s, (found, used) = timed(lambda: store.query("gpu", "power_w", {"gpu": "0"}, window[0], window[1], (window[1] - window[0]) / 200))
    all_s, (every, _) = timed(lambda: store.query("gpu", "power_w", None, window[0], window[1], (window[1] - window[0]) / 200))
    print("  query %.0f days at %.0f s: %d points for one GPU, %d series for all" % ((window[1] - window[0]) / DAY_S, used,
                                                                                   len(found[0]["points"]), len(every)))
    if args.days >= 7:
        naive_s, _ = naive_week_query(directory, gpus)
        line("week query, one series, 200 points", one_s * 1e3, naive_s * 1e3, "ms", better="lower")
        line("week query, 8 series, 200 points each", all_s * 1e3, naive_s * 8 * 1e3, "ms", better="lower")
    else:
        print("  window query: one series %.1f ms, all %.1f ms (the raw baseline runs with --days 7)" % (one_s * 1e3, all_s * 1e3))
    status_s, _ = timed(store.status, repeat=1)
    series_s, _ = timed(store.series, repeat=1)
    print("  history.status %.2f s, history.series %.2f s (both count every tier's rows)" % (status_s, series_s))
    store.close()


if __name__ == "__main__":
    main()
