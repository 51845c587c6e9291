"""Hostile training logs and save directories: the daemon's answer time, its CPU, and what a
checkpoint announcement writes, beside a baseline.

  python benchmarks/bench_training_hostile.py [SECONDS]   (default 15 per phase)

1. The patterns, in this process: the time to read one pathological line with the patterns the
   sampler used before (the datagen bar, rich's source column, key=value pairs; quadratic in
   the line's length) and with ours, on lines of 60,000 and 20,000 characters (the old ones
   would take hours on a megabyte), then ours on 1 MB.
2. The real daemon (the local agent): the worst and 99th-percentile wait of a ping sent every
   20 ms, and the daemon's CPU (share of one core), over SECONDS with three healthy runs (20
   steps/s each), then over SECONDS with the same three runs beside a hostile one writing 1 MB
   pathological lines, a 4 MiB line and a 5,000-deep JSON line without pause. Target: the
   worst ping under 50 ms.
3. Checkpoints (a save directory of 10,000, in this process): bytes written per announcement,
   ours (one journal line) against before (the whole list rewritten as checkpoints.json), and
   the time to inspect and journal all of them.
"""

import json
import os
import re
import shutil
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

# The patterns as they were before the bounds (remote/training, git history).
OLD_NUMBER = r"[-+]?(?:\d+\.?\d*(?:[eE][-+]?\d+)?|\.\d+(?:[eE][-+]?\d+)?|nan|inf|NaN|Inf)"
OLD = {
    "bar": re.compile(r"(?P<done>\d+)/(?P<total>\d+)\s*\[\s*[\d:]+\s*<\s*[\d:?]+\s*,\s*(?P<rate>[\d.]+)\s*(?P<unit>it/s|s/it)"),
    "source": re.compile(r"\s+(?P<source>[\w.\-]+\.py:\d+)\s*$"),
    "pair": re.compile(r"(?:^|(?<=[\s,;|(\[{]))(?P<key>[A-Za-z_][\w./\-]*)=(?P<value>%s)(?=$|[\s,;|)\]}])" % OLD_NUMBER),
}
SHAPES = {"bar": lambda n: "9" * n, "source": lambda n: " " * n + "x", "pair": lambda n: " k=" + "1" * n + "x"}
# The old bar pattern on the 60,000 digits a user's job printed; the other two at 20,000 (quadratic:
# at 60,000 they take minutes).
OLD_CHARS = {"bar": 60000, "source": 20000, "pair": 20000}


def patterns():
    from remote.training import datagen, logparse

    ours = {"bar": lambda line: datagen.Samples().read_line(line), "source": lambda line: logparse.source_column(line),
            "pair": lambda line: logparse.pairs(line)}
    print("1. one pathological line: the old patterns against ours")
    for name, make in SHAPES.items():
        line = make(OLD_CHARS[name])
        began = time.perf_counter()
        list(OLD[name].finditer(line)) if name != "source" else OLD[name].search(line)
        old_s = time.perf_counter() - began
        began = time.perf_counter()
        ours[name](line)
        ours_s = time.perf_counter() - began
        big = make(1000000)
        began = time.perf_counter()
        ours[name](big)
        big_s = time.perf_counter() - began
        print("   %-7s %6d chars: before %8.3f s, ours %7.4f s (%8.0fx); ours on 1 MB %7.4f s" % (
            name, len(line), old_s, ours_s, old_s / max(ours_s, 1e-6), big_s))


HEALTHY = """
import time
began = time.time()
for step in range(100000):
    time.sleep(max(0.0, began + step / 20.0 - time.time()))
    print("step=%d loss=%.4f acc_0=0.5 acc_1=0.3" % (step, 1.0 / (step + 1)), flush=True)
"""
HOSTILE = """
import sys
MB = 1000 * 1000
shapes = ["9" * MB, " " * MB, "k=" + "1" * MB + "x", "1/" * (MB // 2), "=" * MB, "[12:00:00] INFO" + " " * MB + "x",
          "Train Epoch [1/2], position 0, " * (MB // 32), "{" + '"a":{' * 5000 + "}" * 5001, "x" * (4 << 20)]
while True:
    for shape in shapes:
        sys.stdout.write(shape + "\\n")
        sys.stdout.flush()
"""


def cpu_s(pid):
    fields = open("/proc/%d/stat" % pid).read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / float(os.sysconf("SC_CLK_TCK"))


def ping_phase(client, daemon, seconds):
    waits = []
    before = cpu_s(daemon)
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        began = time.perf_counter()
        client.call("ping", {}, timeout=120.0)
        waits.append(time.perf_counter() - began)
        time.sleep(0.02)
    waits.sort()
    return waits[-1], waits[int(0.99 * (len(waits) - 1))], (cpu_s(daemon) - before) / seconds


def daemon_phases(work, seconds):
    os.environ["SPECDECK_HOME"] = os.path.join(work, "home")
    os.makedirs(os.environ["SPECDECK_HOME"], mode=0o700)
    from tests.helpers.cli import daemon_pid, stop_daemon
    from tui.transport.connection import open_client

    client = open_client("local")
    started = []
    try:
        daemon = daemon_pid(os.environ["SPECDECK_HOME"])
        for number in range(3):
            started.append(client.call("training.start", {"argv": [sys.executable, "-c", HEALTHY], "name": "healthy%d" % number})["id"])
        time.sleep(3.0)
        calm = ping_phase(client, daemon, seconds)
        started.append(client.call("training.start", {"argv": [sys.executable, "-c", HOSTILE], "name": "hostile"})["id"])
        time.sleep(2.0)
        hostile = ping_phase(client, daemon, seconds)
        steps = [len(client.call("training.curves", {"id": job_id})["steps"]) for job_id in started[:3]]
        print("2. the daemon, pings every 20 ms for %.0f s (its CPU as a share of one core)" % seconds)
        for name, (worst, p99, cpu) in (("3 healthy runs", calm), ("3 healthy + 1 hostile", hostile)):
            print("   %-22s worst ping %6.1f ms  p99 %6.1f ms  daemon CPU %5.1f%%" % (name, 1000 * worst, 1000 * p99, 100 * cpu))
        print("   ratio of worst pings: %.1fx; the healthy runs' steps read: %s" % (hostile[0] / max(calm[0], 1e-6), steps))
    finally:
        for job_id in started:
            try:
                client.call("jobs.stop", {"id": job_id, "grace_s": 1})
            except Exception:  # noqa: BLE001 - best effort at the end of a benchmark
                pass
        client.close()
        stop_daemon(os.environ["SPECDECK_HOME"])


def checkpoints(work, count=10000):
    from remote.training import checkpoints as watcher_module

    save, job_dir = os.path.join(work, "save"), os.path.join(work, "job")
    os.makedirs(job_dir)
    header = b'{"__metadata__":{}}'
    for number in range(count):
        path = os.path.join(save, str(number))
        os.makedirs(path)
        with open(os.path.join(path, "config.json"), "w") as f:
            f.write('{"architectures": ["LlamaForCausalLMEagle3"]}')
        with open(os.path.join(path, "model.safetensors"), "wb") as f:
            f.write(len(header).to_bytes(8, "little") + header)
    watcher = watcher_module.Watcher(job_dir, save)
    began = time.perf_counter()
    now = time.time()
    watcher.look(now)
    looks = 0
    while len(watcher.entries) < count:
        for entry in watcher.look(now + 10.0):
            watcher.save(entry)
        looks += 1
    took = time.perf_counter() - began
    journal_bytes = os.path.getsize(os.path.join(job_dir, watcher_module.FILE_NAME))
    whole = len(json.dumps({"save_dir": save, "entries": watcher.entries}))
    print("3. %d checkpoints: inspected and journaled in %.1f s (%d looks)" % (count, took, looks))
    print("   bytes written per announcement: ours %d (one journal line), before %d (the whole list); %.0fx less" % (
        journal_bytes / count, whole, whole / (journal_bytes / count)))


def main():
    seconds = float(sys.argv[1]) if len(sys.argv) > 1 else 15.0
    work = tempfile.mkdtemp()
    try:
        patterns()
        daemon_phases(work, seconds)
        checkpoints(work)
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
