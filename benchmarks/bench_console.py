"""How the console feels in a real terminal (tmux): time to first paint, and time to answer
a key while a job's log streams at thousands of lines a second (the local agent).

  python benchmarks/bench_console.py

The key is a pane switch (2: Downloads, 1: back to Jobs and its streaming log); the time is
from `tmux send-keys` until tmux's screen shows the other pane, polled every ~2 ms. The
baseline beside ours is the same key with nothing streaming: the ratio is what streaming
costs. Targets: paint within 1 s, a key answered within 50 ms.
"""

import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SESSION = "specdeck-bench-%d" % os.getpid()
STREAM = "import time\nfor i in range(10**7):\n    print('step %d loss 1.23 acc 0.71' % i, flush=True)\n    time.sleep(0.0003)\n"


def screen():
    return subprocess.run(["tmux", "capture-pane", "-p", "-t", SESSION], capture_output=True, text=True).stdout


def wait_screen(predicate, timeout_s=60):
    t0 = time.perf_counter()
    while True:
        text = screen()
        if predicate(text):
            return time.perf_counter() - t0
        if time.perf_counter() - t0 > timeout_s:
            raise SystemExit("timed out; screen:\n" + text)
        time.sleep(0.002)


def key(k, predicate):
    t0 = time.perf_counter()
    subprocess.run(["tmux", "send-keys", "-t", SESSION, k], check=True)
    wait_screen(predicate)
    return time.perf_counter() - t0


def switch_latencies(log_visible, rounds=15):
    times = []
    for _ in range(rounds):
        times.append(key("2", lambda t: "Downloads" in t and not log_visible(t)))
        times.append(key("1", log_visible))
        time.sleep(0.05)
    return times


def main():
    if not shutil.which("tmux"):
        raise SystemExit("needs tmux (apt-get install tmux)")
    home = tempfile.mkdtemp()
    env = dict(os.environ, SPECDECK_HOME=home, PYTHONPATH=ROOT)
    cli = [sys.executable, "-m", "tui.cli"]
    command = "cd %s && SPECDECK_HOME=%s PYTHONPATH=%s %s -m tui.cli local" % (ROOT, home, ROOT, sys.executable)
    t0 = time.perf_counter()
    subprocess.run(["tmux", "new-session", "-d", "-s", SESSION, "-x", "110", "-y", "32", command], check=True)
    try:
        paint_s = wait_screen(lambda t: "specdeck" in t and "Jobs" in t) + (time.perf_counter() - t0 - 0)
        paint_s = time.perf_counter() - t0
        wait_screen(lambda t: "connected" in t)
        connected_s = time.perf_counter() - t0
        subprocess.run(cli + ["run", "local", "--name", "idle", "--", "echo", "marker-idle"], env=env, capture_output=True, text=True, cwd=ROOT)
        wait_screen(lambda t: "idle" in t)
        subprocess.run(["tmux", "send-keys", "-t", SESSION, "Enter"], check=True)
        wait_screen(lambda t: "marker-idle" in t)
        idle = switch_latencies(lambda t: "marker-idle" in t)

        subprocess.run(cli + ["run", "local", "--name", "stream", "--", sys.executable, "-c", STREAM], env=env, capture_output=True, cwd=ROOT, check=True)
        wait_screen(lambda t: "stream" in t)
        subprocess.run(["tmux", "send-keys", "-t", SESSION, "Down", "Enter"], check=True)
        wait_screen(lambda t: "step " in t)
        streaming = switch_latencies(lambda t: "step " in t)
        jobs = subprocess.run(cli + ["jobs", "local", "--json"], env=env, capture_output=True, text=True).stdout
        import json

        stream_job = [j for j in json.loads(jobs) if j["name"] == "stream"][0]
        rate = stream_job["log_bytes"] / 31.0 / max(1.0, time.time() - stream_job["started_at"])
    finally:
        subprocess.run(["tmux", "kill-session", "-t", SESSION])
        subprocess.run(cli + ["stop", "local", "j2", "--grace", "1"], env=env, capture_output=True)
        subprocess.run([sys.executable, "-c", "import sys; sys.path.insert(0, %r); from tests.conftest import stop_daemon; stop_daemon(%r)" % (ROOT, home)])
        shutil.rmtree(home, ignore_errors=True)

    def summary(times):
        times = sorted(times)
        return statistics.median(times) * 1e3, times[int(len(times) * 0.95) - 1] * 1e3, times[-1] * 1e3

    print("console in tmux (110x32), local agent:")
    print("  first paint              %7.0f ms   (target < 1000 ms; includes Python start-up and imports)" % (paint_s * 1e3))
    print("  connected                %7.0f ms" % (connected_s * 1e3))
    idle_s, streaming_s = summary(idle), summary(streaming)
    print("  key answered, idle       median %5.1f ms  p95 %5.1f ms  max %5.1f ms" % idle_s)
    print("  key answered, streaming  median %5.1f ms  p95 %5.1f ms  max %5.1f ms   (target < 50 ms; log ~%d lines/s)" % (streaming_s + (rate,)))
    print("  streaming / idle (median) %.2fx" % (streaming_s[0] / idle_s[0]))


if __name__ == "__main__":
    main()
