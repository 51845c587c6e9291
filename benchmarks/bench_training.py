"""Following a training run: ours beside the baselines people use today.

  python benchmarks/bench_training.py [STEPS_FOR_QUERY]   (default 100000)

1. Delay from a step's record written to the log to it showing: ours, the `training.follow`
   stream of the local agent (what the Training pane follows); baseline `tail -F` on the same log
   (what `ssh host tail -f` shows). The run writes speculators' real 80-column records (a record
   of tests/data's CPU run, its step and time column renewed) at 10 steps/s.
2. CPU while following that run, as a share of one core: the agent's daemon (reading, parsing,
   the history store, the stream) against the same daemon idle and against `tail -F`.
3. Query time of a 100,000-step run's curves (loss, lr, step time, 3 positions of full/cond
   accuracy and loss, predicted accept length) in 2,000 buckets of steps: ours, the run's step
   store (stepstore.read as training.curves runs it); baseline, parsing the run's log from the
   start (logparse.parse_text), what a script reading the log must do.
"""

import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
LOG = os.path.join(ROOT, "tests", "data", "speculators-train-80cols.log")
RATE_HZ = 10.0
FOLLOW_S = 20.0

WRITER = r'''
import sys, time
template, times_path, rate, count = open(sys.argv[1]).read(), sys.argv[2], float(sys.argv[3]), int(sys.argv[4])
with open(times_path, "w") as times:
    began = time.time()
    for step in range(count):
        time.sleep(max(0.0, began + step / rate - time.time()))
        text = template.replace("global_step=0 ", ("global_step=%d" % step).ljust(14))
        text = "[%s]" % time.strftime("%H:%M:%S") + text[10:]
        sys.stdout.write(text)
        sys.stdout.flush()
        times.write("%d %.6f\n" % (step, time.time()))
        times.flush()
'''


def template_record():
    lines = open(LOG).read().splitlines(keepends=True)
    start = next(i for i, line in enumerate(lines) if "train/loss_0=" in line)
    end = next(i for i in range(start, len(lines)) if "global_step=" in lines[i])
    return "".join(lines[start:end + 1])


def cpu_s(pid):
    fields = open("/proc/%d/stat" % pid).read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / float(os.sysconf("SC_CLK_TCK"))


def percentile(values, share):
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(share * len(ordered)))]


def follow_and_cpu(work):
    os.environ["SPECDECK_HOME"] = os.path.join(work, "home")
    os.makedirs(os.environ["SPECDECK_HOME"], mode=0o700)
    from tests.helpers.cli import daemon_pid, stop_daemon
    from tui.transport.connection import open_client

    client = open_client("local")
    try:
        daemon = daemon_pid(os.environ["SPECDECK_HOME"])
        time.sleep(2.0)
        before = cpu_s(daemon)
        time.sleep(5.0)
        idle = (cpu_s(daemon) - before) / 5.0
        template = os.path.join(work, "record.txt")
        with open(template, "w") as f:
            f.write(template_record())
        times_path = os.path.join(work, "times.txt")
        count = int((FOLLOW_S + 4) * RATE_HZ)
        shown = {}

        def on_data(data, seq):
            now = time.time()
            for record in data.get("records") or []:
                if record.get("kind") == "step" and record.get("step") is not None:
                    shown.setdefault(record["step"], now)

        client.subscribe("training.follow", {}, on_data)
        job = client.call("training.start", {"argv": [sys.executable, "-c", WRITER, template, times_path, str(RATE_HZ), str(count)],
                                             "env": {"COLUMNS": "80"}})
        log_path = os.path.join(os.environ["SPECDECK_HOME"], "jobs", job["id"], "output.log")
        while not os.path.exists(log_path):
            time.sleep(0.05)
        tailed = {}
        tail = subprocess.Popen(["tail", "-n", "+1", "-F", log_path], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)

        def read_tail():
            for line in tail.stdout:
                if b"global_step=" in line:
                    tailed.setdefault(int(line.split(b"global_step=")[1].split()[0]), time.time())

        threading.Thread(target=read_tail, daemon=True).start()
        time.sleep(2.0)
        ours_before, tail_before = cpu_s(daemon), cpu_s(tail.pid)
        time.sleep(FOLLOW_S)
        ours_cpu = (cpu_s(daemon) - ours_before) / FOLLOW_S
        tail_cpu = (cpu_s(tail.pid) - tail_before) / FOLLOW_S
        time.sleep(4.0)
        tail.terminate()
        written = {}
        for line in open(times_path):
            step, at = line.split()
            written[int(step)] = float(at)
        ours = [shown[s] - written[s] for s in written if s in shown]
        baseline = [tailed[s] - written[s] for s in written if s in tailed]
        return {"steps": len(written), "ours_seen": len(ours), "tail_seen": len(baseline), "ours": ours, "tail": baseline,
                "ours_cpu": ours_cpu, "idle_cpu": idle, "tail_cpu": tail_cpu}
    finally:
        client.close()
        stop_daemon(os.environ["SPECDECK_HOME"])


def query(work, steps_total):
    from remote.training import curves, logparse, stepstore

    template = template_record()
    writer = stepstore.StepWriter(work)
    start = time.time() - steps_total * 0.1 - 60
    log_path = os.path.join(work, "train.log")
    values = [r for r in logparse.parse_text(template) if r["kind"] == "step"][0]
    batch = []
    with open(log_path, "w") as log:
        for step in range(steps_total):
            record = dict(values, step=step, loss=1.0 / (1 + step * 1e-3))
            batch.append((log.tell(), curves.public_record(record, start + step * 0.1), start + step * 0.1))
            log.write(template.replace("global_step=0 ", ("global_step=%d" % step).ljust(14)))
            if len(batch) == 5000:
                writer.add(batch)
                batch = []
    writer.add(batch)
    writer.close()
    timings = []
    for _ in range(3):
        began = time.perf_counter()
        steps, _, width, _ = stepstore.read(work, 2000)
        timings.append(time.perf_counter() - began)
    began = time.perf_counter()
    with open(log_path) as f:
        parsed = [r for r in logparse.parse_text(f.read()) if r["kind"] == "step"]
    reparse_s = time.perf_counter() - began
    return {"ours_s": min(timings), "points": len(steps), "bucket_steps": width, "reparse_s": reparse_s,
            "parsed": len(parsed), "log_bytes": os.path.getsize(log_path)}


def main():
    steps_total = int(sys.argv[1]) if len(sys.argv) > 1 else 100000
    with tempfile.TemporaryDirectory() as work:
        followed = follow_and_cpu(work)
        print("1. delay from a step written to the log to it showing (%d steps at %.0f/s, speculators' 80-column records)"
              % (followed["steps"], RATE_HZ))
        for name, delays in (("ours (training.follow)", followed["ours"]), ("tail -F", followed["tail"])):
            if delays:
                print("   %-24s median %6.0f ms  p95 %6.0f ms  max %6.0f ms  (%d seen)" % (
                    name, 1000 * statistics.median(delays), 1000 * percentile(delays, 0.95), 1000 * max(delays), len(delays)))
        if followed["ours"] and followed["tail"]:
            print("   ours - tail (median): %+.0f ms (tail -F shows the raw line at once, inotify; ours waits for the"
                  " record's last line, the sampler's 0.5 s read, the stream)" % (
                      1000 * (statistics.median(followed["ours"]) - statistics.median(followed["tail"]))))
        print("2. CPU over %.0f s while following it (share of one core)" % FOLLOW_S)
        print("   daemon following   %5.1f%%   (idle before the run: %.1f%%; the run's share: %.1f%%)" % (
            100 * followed["ours_cpu"], 100 * followed["idle_cpu"], 100 * (followed["ours_cpu"] - followed["idle_cpu"])))
        print("   tail -F            %5.1f%%" % (100 * followed["tail_cpu"]))
        result = query(work, steps_total)
        print("3. curves of a %d-step run in %d points (buckets of %d steps)" % (steps_total, result["points"], result["bucket_steps"]))
        print("   ours (step store)           %8.3f s" % result["ours_s"])
        print("   re-parsing the log (%.0f MB) %8.3f s  (%d steps)" % (result["log_bytes"] / 1e6, result["reparse_s"], result["parsed"]))
        print("   ratio: %.0fx faster" % (result["reparse_s"] / result["ours_s"]))


if __name__ == "__main__":
    main()
