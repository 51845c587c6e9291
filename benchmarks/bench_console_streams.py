"""How the console feels while the host is busy: time to answer a key while a job's log streams,
and while three inference servers and two training runs stream figures; and the console's CPU
while idle on a host with 8 GPUs.

  python benchmarks/bench_console_streams.py [--idle-seconds 20]

The console runs in a pseudo-terminal (110x32) on the local agent, as in bench_console.py. The
host's 8 GPUs are a replay of the H200 recording (SPECDECK_NVML_REPLAY, tests/data); the servers
are real /metrics servers on loopback serving a real vLLM's exposition whose counters grow every
second (tests/hostile_servers.py, attached with serving.attach); the training runs write
speculators' real 80-column records (tests/data) at 10 steps/s each, as bench_training.py's do.

- idle: the console on the GPUs pane, nothing running, CPU of the console's process and of its
  agent (its child) as a share of one core over the window.
- keys while a log streams (~thousands of lines/s, its log open and followed): f (follow on and
  off), 3 (another pane), ? (help), from bench_console.py.
- keys while the servers and runs stream (the Speculation pane shown): ] (next server) and w
  (next window), each key's answer being a state that cannot be on the screen before it.
A key's time runs from writing it until the terminal receives the text that answers it. Targets:
median under 50 ms, worst under 100 ms, over 20 keys each.
"""

import argparse
import os
import statistics
import sys
import tempfile
import threading
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from benchmarks.bench_console import KEYS, STREAM, Terminal, measure, stop_everything  # noqa: E402
from tests.hostile_servers import AFTER, BEHAVIOURS, RawServer  # noqa: E402

RECORDING = os.path.join(ROOT, "tests", "data", "nvml-h200.json.gz")
TRAINING_LOG = os.path.join(ROOT, "tests", "data", "speculators-train-80cols.log")
TICK = os.sysconf("SC_CLK_TCK")
KEY_COUNT = 20
WRITER = r'''
import sys, time
template, rate, count = open(sys.argv[1]).read(), float(sys.argv[2]), int(sys.argv[3])
began = time.time()
for step in range(count):
    time.sleep(max(0.0, began + step / rate - time.time()))
    text = template.replace("global_step=0 ", ("global_step=%d" % step).ljust(14))
    sys.stdout.write("[%s]" % time.strftime("%H:%M:%S") + text[10:])
    sys.stdout.flush()
'''


def template_record():
    """One step's record of speculators' real log (its progress bar and metrics lines)."""
    lines = open(TRAINING_LOG).read().splitlines(keepends=True)
    start = next(i for i, line in enumerate(lines) if "train/loss_0=" in line)
    end = next(i for i in range(start, len(lines)) if "global_step=" in lines[i])
    return "".join(lines[start:end + 1])


def scaled(text, factor):
    """vLLM's exposition with every counter multiplied: the server `factor` seconds later."""
    out = []
    for line in text.splitlines():
        if line.startswith("vllm:") and "_total" in line.split(" ")[0]:
            name, value = line.rsplit(" ", 1)
            line = "%s %r" % (name, float(value) * factor)
        out.append(line)
    return "\n".join(out) + "\n"


class GrowingServers:
    """Healthy /metrics servers whose counters grow each second, until closed."""

    def __init__(self, count):
        self.servers = [RawServer(BEHAVIOURS["healthy"]) for _ in range(count)]
        self._stop = threading.Event()
        threading.Thread(target=self._grow, daemon=True).start()

    def _grow(self):
        second = 1
        while not self._stop.wait(1.0):
            second += 1
            for server in self.servers:
                server.text = scaled(AFTER, second)

    def close(self):
        self._stop.set()
        for server in self.servers:
            server.close()


def cpu_s(pid):
    try:
        fields = open("/proc/%d/stat" % pid).read().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / float(TICK)


def children(pid):
    found = []
    try:
        for task in os.listdir("/proc/%d/task" % pid):
            with open("/proc/%d/task/%s/children" % (pid, task)) as f:
                found += [int(p) for p in f.read().split()]
    except OSError:
        pass
    return found + [grandchild for child in found for grandchild in children(child)]


def cycle_keys(terminal, key, states, count):
    """`count` presses of `key`, each answered by the next of `states` (a cycle)."""
    times = []
    for index in range(count):
        times.append(terminal.key(key, states[(index + 1) % len(states)]))
        time.sleep(0.05)
    return times


def figures(times):
    return statistics.median(times) * 1e3, max(times) * 1e3


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--idle-seconds", type=float, default=20.0)
    args = parser.parse_args()
    home = tempfile.mkdtemp(prefix="specdeck-bench-console-")
    os.environ.update(SPECDECK_HOME=home, SPECDECK_NVML_REPLAY="%s:8" % RECORDING)
    env = dict(os.environ, PYTHONPATH=ROOT, TERM="xterm-256color")
    cli = [sys.executable, "-m", "tui.cli"]
    terminal = servers = client = None
    results = {}
    try:
        from tui.transport.connection import open_client

        client = open_client("local")  # starts the daemon with the 8-GPU replay in its environment
        terminal = Terminal(cli + ["local"], env)
        terminal.read_until(b"connected")
        terminal.read_until(b"driver")  # the GPUs pane's status line: the first sample is on screen
        time.sleep(3.0)
        console = terminal.pid
        agent = children(console)
        before = [cpu_s(console)] + [cpu_s(p) for p in agent]
        time.sleep(args.idle_seconds)
        after = [cpu_s(console)] + [cpu_s(p) for p in agent]
        results["idle_console"] = (after[0] - before[0]) / args.idle_seconds
        results["idle_agent"] = sum(after[1:]) - sum(before[1:])
        results["idle_agent"] /= args.idle_seconds

        # A log streaming, open in the Jobs pane and followed.
        stream = client.call("jobs.submit", {"argv": [sys.executable, "-c", STREAM], "name": "stream"})
        os.write(terminal.fd, b"2")
        terminal.read_until(b"stream")
        time.sleep(1.0)
        terminal.key("\r", b"step ")
        time.sleep(1.0)
        log_times = measure(terminal, (KEY_COUNT + len(KEYS) - 1) // len(KEYS))
        results["log"] = [t for key in log_times for t in log_times[key]]
        results["log_by_key"] = log_times
        job = client.call("jobs.get", {"id": stream["id"]})
        results["lines_per_s"] = job["log_bytes"] / 28.0 / max(1.0, time.time() - job["started_at"])
        client.call("jobs.stop", {"id": stream["id"], "grace_s": 1})

        # Three servers and two training runs streaming figures, the Speculation pane shown.
        servers = GrowingServers(3)
        for number, server in enumerate(servers.servers):
            client.call("serving.attach", {"url": server.url, "name": "bench server %d" % (number + 1)})
        template = os.path.join(home, "record.txt")
        with open(template, "w") as f:
            f.write(template_record())
        for _ in range(2):
            client.call("training.start", {"argv": [sys.executable, "-c", WRITER, template, "10", "100000"], "env": {"COLUMNS": "80"}})
        os.write(terminal.fd, b"5")
        terminal.read_until(b"server 3 of 3")
        time.sleep(3.0)
        server_keys = cycle_keys(terminal, "]", [b"server %d of 3" % n for n in (3, 1, 2)], KEY_COUNT // 2)
        window_keys = cycle_keys(terminal, "w", [b"window %s (w)" % w for w in (b"5 min", b"15 min", b"1 h", b"6 h", b"1 min")], KEY_COUNT // 2)
        results["figures"] = server_keys + window_keys
        results["figures_by_key"] = {"]": server_keys, "w": window_keys}
    finally:
        if servers is not None:
            servers.close()
        if client is not None:
            client.close()
        stop_everything(cli, env, home, terminal)

    print("console in a 110x32 pseudo-terminal, local agent, 8 GPUs (replayed H200 NVML):")
    print("  idle CPU (GPUs pane, %d s)   console %.1f%% of a core   its agent %.1f%%"
          % (args.idle_seconds, 100 * results["idle_console"], 100 * results["idle_agent"]))
    print("  key answered, median / worst over %d keys (target < 50 / < 100 ms):" % KEY_COUNT)
    print("    while a log streams (~%d lines/s)            %5.1f / %5.1f ms   (f, 3, ?)" % ((results["lines_per_s"],) + figures(results["log"])))
    for key, times in results["log_by_key"].items():
        print("      %s  %5.1f / %5.1f ms" % ((key,) + figures(times)))
    print("    while 3 servers + 2 training runs stream     %5.1f / %5.1f ms   (] next server, w next window)" % figures(results["figures"]))
    for key, times in results["figures_by_key"].items():
        print("      %s  %5.1f / %5.1f ms" % ((key,) + figures(times)))


if __name__ == "__main__":
    main()
