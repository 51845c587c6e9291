"""What GPU telemetry costs the host: our whole agent (daemon: sampler, history store, job
watcher) beside the usual monitors, polling at 1 Hz on the same GPUs at the same time.

  python3 benchmarks/bench_telemetry.py [--seconds 30]                   # on a GPU host
  python3 benchmarks/bench_telemetry.py --replay tests/data/nvml-h200.json.gz --gpus 8
  python3 benchmarks/bench_telemetry.py --calls                          # CPU and wall per NVML call

Ours: `python -m remote daemon --foreground` in a fresh state directory, with one client
following `telemetry.follow` on its socket (what a console does): its CPU as a share of one
core, the stream's bytes per second per GPU, and the sampler's own CPU per sample. Baselines
on real NVML, each its own process over the same window: `nvidia-smi -l 1`, a bare
nvidia-ml-py loop reading a full sample (utilisation, memory, temperature, power, clocks, PCIe,
processes, throttle reasons), and gpustat / nvitop when installed. With --replay the GPUs are a
recording played back (tests/data/), so the figure is ours only: the replay module's Python
stands in for the driver's calls.
"""

import argparse
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from remote.core.protocol import FrameReader, encode  # noqa: E402

BARE_LOOP = r"""
import time, pynvml
pynvml.nvmlInit()
handles = [pynvml.nvmlDeviceGetHandleByIndex(i) for i in range(pynvml.nvmlDeviceGetCount())]
def q(f, *a):
    try:
        return f(*a)
    except pynvml.NVMLError:
        return None
while True:
    for h in handles:
        q(pynvml.nvmlDeviceGetUtilizationRates, h); q(pynvml.nvmlDeviceGetMemoryInfo, h)
        q(pynvml.nvmlDeviceGetTemperature, h, 0); q(pynvml.nvmlDeviceGetPowerUsage, h)
        q(pynvml.nvmlDeviceGetClockInfo, h, 1); q(pynvml.nvmlDeviceGetClockInfo, h, 2)
        q(pynvml.nvmlDeviceGetPcieThroughput, h, 0); q(pynvml.nvmlDeviceGetPcieThroughput, h, 1)
        q(pynvml.nvmlDeviceGetComputeRunningProcesses, h); q(pynvml.nvmlDeviceGetCurrentClocksEventReasons, h)
    time.sleep(1)
"""


def tree_cpu_s(pid):
    """CPU seconds (user + system) of a process and every descendant still alive."""
    hz = os.sysconf("SC_CLK_TCK")
    parents, ticks = {}, {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open("/proc/%s/stat" % name) as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        parents[int(name)] = int(fields[1])
        ticks[int(name)] = int(fields[11]) + int(fields[12])
    members, frontier = {pid}, [pid]
    while frontier:
        parent = frontier.pop()
        for child, its_parent in parents.items():
            if its_parent == parent and child not in members:
                members.add(child)
                frontier.append(child)
    return sum(ticks.get(p, 0) for p in members) / float(hz)


class Agent:
    """Our daemon in a fresh home, and one client following telemetry on its socket."""

    def __init__(self, replay=None):
        self.home = tempfile.mkdtemp(prefix="specdeck-bench-")
        env = dict(os.environ, SPECDECK_HOME=self.home, PYTHONPATH=ROOT)
        if replay:
            env["SPECDECK_NVML_REPLAY"] = replay
        self.process = subprocess.Popen([sys.executable, "-m", "remote", "daemon", "--foreground"], env=env, cwd=ROOT,
                                        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        path = os.path.join(self.home, "daemon.sock")
        deadline = time.time() + 30
        while not os.path.exists(path):
            if time.time() > deadline or self.process.poll() is not None:
                raise SystemExit("the daemon did not start; see %s/daemon.log" % self.home)
            time.sleep(0.05)
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.connect(path)
        self.stream_bytes = 0
        self.frames = 0
        self.replies = {}
        self._reader = FrameReader(self.sock.recv)
        next(self._reader)  # hello
        threading.Thread(target=self._read, daemon=True).start()
        self.sock.sendall(encode({"id": 1, "method": "telemetry.follow", "params": {"stream": "t"}}))

    def _read(self):
        for frame in self._reader:
            if isinstance(frame, dict) and frame.get("stream") == "t":
                self.stream_bytes += len(encode(frame))
                self.frames += 1
            elif isinstance(frame, dict) and "id" in frame:
                self.replies[frame["id"]] = frame

    def call(self, request_id, method, params=None):
        self.sock.sendall(encode({"id": request_id, "method": method, "params": params or {}}))
        deadline = time.time() + 30
        while request_id not in self.replies and time.time() < deadline:
            time.sleep(0.05)
        return self.replies[request_id]["result"]

    def stop(self):
        self.process.terminate()
        self.process.wait(10)
        shutil.rmtree(self.home, ignore_errors=True)


def baselines():
    """[(name, argv)] of the monitors this host has."""
    found = []
    if shutil.which("nvidia-smi"):
        found.append(("nvidia-smi -l 1", ["nvidia-smi", "-l", "1"]))
    found.append(("bare nvidia-ml-py loop", [sys.executable, "-c", BARE_LOOP]))
    if subprocess.run([sys.executable, "-c", "import gpustat"], capture_output=True).returncode == 0:
        found.append(("gpustat -i 1", [sys.executable, "-m", "gpustat", "-i", "1", "--no-color"]))
    if subprocess.run([sys.executable, "-c", "import nvitop"], capture_output=True).returncode == 0 and shutil.which("script"):
        # nvitop's monitor wants a terminal: give it a pseudo-terminal of 80x24.
        found.append(("nvitop", ["script", "-qfc", "stty cols 120 rows 40; %s -m nvitop" % sys.executable, "/dev/null"]))
    return found


class TimedNvml:
    """pynvml with the CPU (this thread's) and wall time of every call added up per function."""

    def __init__(self, real):
        self._real = real
        self.totals = {}  # name -> [calls, cpu s, wall s]

    def __getattr__(self, name):
        value = getattr(self._real, name)
        if not name.startswith("nvml") or not callable(value) or isinstance(value, type):
            return value

        def timed(*args):
            cpu, wall = time.thread_time(), time.perf_counter()
            try:
                return value(*args)
            finally:
                total = self.totals.setdefault(name, [0, 0.0, 0.0])
                total[0] += 1
                total[1] += time.thread_time() - cpu
                total[2] += time.perf_counter() - wall

        return timed


def profile_calls(rounds=30):
    """Our reader's NVML calls on this host's GPUs: CPU and wall per call, per function."""
    import pynvml

    from remote.telemetry.nvml import Nvml

    timed = TimedNvml(pynvml)
    session = Nvml(timed)
    session.open()
    timed.totals.clear()
    cpu, wall = time.thread_time(), time.perf_counter()
    for _ in range(rounds):
        session.drain_xid()
        for reader in session.gpus:
            reader.read(time.monotonic())
            reader.processes()
        time.sleep(0.2)
    cpu, wall = time.thread_time() - cpu, time.perf_counter() - wall - 0.2 * rounds
    print("%d GPUs, %d samples: %.2f ms CPU and %.1f ms wall per sample (all GPUs)" % (len(session.gpus), rounds, 1000 * cpu / rounds, 1000 * wall / rounds))
    print("%-44s %7s %12s %12s" % ("function", "calls", "CPU us/call", "wall us/call"))
    for name, (calls, cpu_s, wall_s) in sorted(timed.totals.items(), key=lambda item: -item[1][1]):
        print("%-44s %7d %12.1f %12.1f" % (name, calls, 1e6 * cpu_s / calls, 1e6 * wall_s / calls))
    session.close()


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seconds", type=float, default=30.0)
    parser.add_argument("--warmup", type=float, default=5.0)
    parser.add_argument("--replay", help="an NVML recording to play instead of the GPUs")
    parser.add_argument("--gpus", type=int, help="with --replay: how many GPUs it plays")
    parser.add_argument("--json", help="write the figures to this file too")
    parser.add_argument("--calls", action="store_true", help="only time each NVML call of our reader")
    args = parser.parse_args()
    if args.calls:
        return profile_calls()
    replay = "%s:%d" % (args.replay, args.gpus) if args.replay and args.gpus else args.replay
    agent = Agent(replay)
    others = []
    if not args.replay:
        for name, argv in baselines():
            others.append((name, subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, stdin=subprocess.DEVNULL,
                                                  env=dict(os.environ, TERM="xterm-256color"))))
    try:
        time.sleep(args.warmup)
        pids = [("ours: specdeck agent (daemon)", agent.process.pid)] + [(name, p.pid) for name, p in others]
        before = {name: tree_cpu_s(pid) for name, pid in pids}
        bytes_before, frames_before = agent.stream_bytes, agent.frames
        began = time.monotonic()
        time.sleep(args.seconds)
        elapsed_s = time.monotonic() - began
        shares = {name: (tree_cpu_s(pid) - before[name]) / elapsed_s for name, pid in pids}
        wire_bytes_per_s = (agent.stream_bytes - bytes_before) / elapsed_s
        frames_per_s = (agent.frames - frames_before) / elapsed_s
        services = {s["name"]: s for s in agent.call(2, "daemon.services")["services"]}
        latest = agent.call(3, "telemetry.latest")
    finally:
        for _, process in others:
            process.terminate()
        for _, process in others:
            try:
                process.wait(5)
            except subprocess.TimeoutExpired:
                process.kill()
        agent.stop()
    telemetry = services.get("telemetry", {}).get("detail", {})
    gpus = max(1, len(latest["gpus"]))
    ours = shares["ours: specdeck agent (daemon)"]
    print("GPUs: %d (%s), driver %s, %.0f s at 1 Hz" % (len(latest["gpus"]), "replay" if args.replay else "real NVML",
                                                      latest["nvml"].get("driver_version"), elapsed_s))
    print("%-34s %12s %10s" % ("monitor", "% of a core", "vs ours"))
    for name, share in sorted(shares.items(), key=lambda item: item[1]):
        print("%-34s %11.2f%% %9.2fx" % (name, 100 * share, share / ours if ours else float("nan")))
    print("sampler thread: %s ms CPU per sample; history store: %s" % (
        telemetry.get("cpu_ms_per_sample"), "yes" if "history" in services else "not running in this daemon"))
    print("wire: %.0f bytes/s for %d GPUs = %.0f bytes/s per GPU (%.2f frames/s)" % (wire_bytes_per_s, gpus, wire_bytes_per_s / gpus, frames_per_s))
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"gpus": len(latest["gpus"]), "replay": bool(args.replay), "seconds": elapsed_s, "cpu_share_of_core": shares,
                       "wire_bytes_per_s": wire_bytes_per_s, "wire_bytes_per_s_per_gpu": wire_bytes_per_s / gpus,
                       "sampler_cpu_ms_per_sample": telemetry.get("cpu_ms_per_sample"), "services": services, "latest": latest}, f, indent=1)


if __name__ == "__main__":
    main()
