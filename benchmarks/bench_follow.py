"""Following a chatty log on the host: what it costs the host, ours beside `tail -F`.

  python benchmarks/bench_follow.py

A job prints ~2,500 lines/s for the whole run. Ours: the daemon streaming it to a console
(the local agent; frames as the console receives them). Baseline: `tail -F` on the same log,
what `ssh host tail -f` runs on the host. Figures: CPU of the host-side process over 5 s,
as a share of one core, and what reached the reader.
"""

import os
import subprocess
import sys
import tempfile
import threading
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
STREAM = "import time\nfor i in range(10**7):\n    print('step %d loss 1.23 acc 0.71 0.52 0.38' % i, flush=True)\n    time.sleep(0.0003)\n"
WINDOW_S = 5.0


def cpu_ticks(pid):
    fields = open("/proc/%d/stat" % pid).read().rsplit(")", 1)[1].split()
    return int(fields[11]) + int(fields[12])


def share_of_core(pid, window_s):
    hz = os.sysconf("SC_CLK_TCK")
    before = cpu_ticks(pid)
    time.sleep(window_s)
    return (cpu_ticks(pid) - before) / float(hz) / window_s


def main():
    os.environ["SPECDECK_HOME"] = tempfile.mkdtemp()
    from tests.helpers.cli import daemon_pid, stop_daemon
    from tui.transport.connection import open_client

    client = open_client("local")
    job = client.call("jobs.submit", {"argv": [sys.executable, "-c", STREAM]})
    log_path = os.path.join(os.environ["SPECDECK_HOME"], "jobs", job["id"], "output.log")
    received = {"frames": 0, "lines": 0}

    def on_data(data, seq):
        received["frames"] += 1
        received["lines"] += data["text"].count("\n")

    client.subscribe("jobs.follow", {"id": job["id"], "after": -1}, on_data)
    time.sleep(1.0)
    frames, lines = received["frames"], received["lines"]
    ours = share_of_core(daemon_pid(os.environ["SPECDECK_HOME"]), WINDOW_S)
    frames, lines = (received["frames"] - frames) / WINDOW_S, (received["lines"] - lines) / WINDOW_S

    tail_lines = [0]
    tail = subprocess.Popen(["tail", "-n", "0", "-F", log_path], stdout=subprocess.PIPE)

    def count():
        for _ in tail.stdout:
            tail_lines[0] += 1

    threading.Thread(target=count, daemon=True).start()
    time.sleep(1.0)
    start_lines = tail_lines[0]
    baseline = share_of_core(tail.pid, WINDOW_S)
    baseline_lines = (tail_lines[0] - start_lines) / WINDOW_S
    tail.kill()
    client.call("jobs.stop", {"id": job["id"], "grace_s": 1})
    client.close()
    stop_daemon(os.environ["SPECDECK_HOME"])

    print("following a log of ~%d lines/s on the host:" % lines)
    print("  ours (daemon)  %5.2f%% of a core   %d frames/s, %d lines/s delivered" % (ours * 100, frames, lines))
    print("  tail -F        %5.2f%% of a core   %d lines/s delivered" % (baseline * 100, baseline_lines))
    print("  ratio ours / tail -F: %.2fx" % (ours / baseline if baseline else float("inf")))


if __name__ == "__main__":
    main()
