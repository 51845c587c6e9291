"""What hostile inference servers cost the host daemon: its CPU and memory, and the worst wait
of a ping, with healthy /metrics servers only and then beside one hostile server of each kind
(a /metrics that trickles a byte each 0.5 s, one of 300 MB, NaN/+Inf/negative counters,
40,000 per-position series and 2,000 label sets in 2.9 MB, a redirect to another host), each scenario in a fresh daemon.

  python3 benchmarks/bench_feeds.py [--seconds 20] [--healthy 4]

Per scenario: the daemon's CPU as a share of one core (/proc/PID/stat over the window), its
resident memory at the end and at its peak (VmRSS, VmHWM), the serving feed's CPU per scrape
of each source (its thread's time), and ping round trips every 50 ms on a connection of its
own (median and worst; target: worst under 50 ms). The ratio column is each scenario against
the healthy-only one.
"""

import argparse
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from remote.core.protocol import FrameReader, encode  # noqa: E402
from tests.hostile_servers import AFTER, BEHAVIOURS, RawServer  # noqa: E402

HOSTILE = ("trickle", "huge", "nan", "flood", "redirect")
TICK = os.sysconf("SC_CLK_TCK")


class Daemon:
    """`python -m remote daemon --foreground` in a fresh state directory, and a connection to it."""

    def __init__(self):
        self.home = tempfile.mkdtemp(prefix="specdeck-bench-feeds-")
        env = dict(os.environ, SPECDECK_HOME=self.home, PYTHONPATH=ROOT)
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
        self.reader = FrameReader(self.sock.recv)
        next(self.reader)  # hello
        self.next_id = 0

    def call(self, method, params=None):
        self.next_id += 1
        self.sock.sendall(encode({"id": self.next_id, "method": method, "params": params or {}}))
        for frame in self.reader:
            if isinstance(frame, dict) and frame.get("id") == self.next_id:
                if not frame.get("ok"):
                    raise RuntimeError(frame["error"])
                return frame["result"]
        raise RuntimeError("the daemon hung up")

    def cpu_s(self):
        with open("/proc/%d/stat" % self.process.pid) as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / TICK

    def memory(self):
        found = {}
        with open("/proc/%d/status" % self.process.pid) as f:
            for line in f:
                if line.startswith(("VmRSS:", "VmHWM:")):
                    found[line.split(":")[0]] = int(line.split()[1]) * 1024
        return found

    def close(self):
        self.process.terminate()
        self.process.wait(10)
        self.sock.close()


def run(hostile, healthy_count, seconds):
    servers = [RawServer(BEHAVIOURS["healthy"]) for _ in range(healthy_count)]
    for server in servers:
        server.text = AFTER
    servers += [RawServer(BEHAVIOURS[kind]) for kind in hostile]
    daemon = Daemon()
    pinger = Daemon.__new__(Daemon)  # a second connection to the same daemon, for pings only
    pinger.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    pinger.sock.connect(os.path.join(daemon.home, "daemon.sock"))
    pinger.reader, pinger.next_id = FrameReader(pinger.sock.recv), 0
    next(pinger.reader)
    try:
        kinds = {}
        for server, kind in zip(servers, ["healthy"] * healthy_count + list(hostile)):
            kinds[daemon.call("serving.attach", {"url": server.url})["id"]] = kind
        time.sleep(3.0)  # every source started and read a few times
        cpu_began, began = daemon.cpu_s(), time.monotonic()
        pings = []
        while time.monotonic() - began < seconds:
            sent = time.perf_counter()
            pinger.call("ping")
            pings.append(time.perf_counter() - sent)
            time.sleep(0.05)
        cpu_share = (daemon.cpu_s() - cpu_began) / (time.monotonic() - began)
        service = next(s for s in daemon.call("daemon.services")["services"] if s["name"] == "serving")
        per_kind = {}
        for source in service["detail"]["source_list"]:
            per_kind.setdefault(kinds[source["key"]], []).append(source["cpu_ms_per_read"] or 0.0)
        fresh = all(not s["stale"] for s in service["detail"]["source_list"] if kinds[s["key"]] == "healthy")
        return {"cpu": cpu_share, "memory": daemon.memory(), "ping_median_ms": 1000 * statistics.median(pings),
                "ping_worst_ms": 1000 * max(pings), "state": service["state"], "healthy_fresh": fresh,
                "cpu_ms_per_read": {kind: statistics.mean(values) for kind, values in per_kind.items()}}
    finally:
        pinger.sock.close()
        daemon.close()
        for server in servers:
            server.close()


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--healthy", type=int, default=4)
    args = parser.parse_args()
    scenarios = [("healthy only", ())] + [("+ " + kind, (kind,)) for kind in HOSTILE] + [("+ all five", HOSTILE)]
    results = []
    for name, hostile in scenarios:
        result = run(hostile, args.healthy, args.seconds)
        results.append((name, hostile, result))
        print("%-14s done" % name, file=sys.stderr, flush=True)
    base = results[0][2]
    print("%d healthy servers, %.0f s a scenario, one fresh daemon each" % (args.healthy, args.seconds))
    print("%-14s %8s %7s %9s %9s %9s %9s %8s %8s  %s" % ("scenario", "cpu %", "x base", "rss MB", "peak MB", "ping med", "ping max",
                                                        "service", "healthy", "cpu ms/read of the hostile source"))
    for name, hostile, r in results:
        hostile_cpu = ", ".join("%s %.2f" % (k, r["cpu_ms_per_read"].get(k, 0.0)) for k in hostile) or \
            "healthy %.2f" % r["cpu_ms_per_read"].get("healthy", 0.0)
        print("%-14s %8.2f %7.2f %9.1f %9.1f %8.2fms %8.2fms %8s %8s  %s" % (
            name, 100 * r["cpu"], r["cpu"] / base["cpu"] if base["cpu"] else float("nan"), r["memory"]["VmRSS"] / 1e6,
            r["memory"]["VmHWM"] / 1e6, r["ping_median_ms"], r["ping_worst_ms"], r["state"], "fresh" if r["healthy_fresh"] else "STALE",
            hostile_cpu))
    worst = max(r["ping_worst_ms"] for _, _, r in results)
    print("worst ping wait: %.1f ms with hostile servers, %.1f ms healthy only (target < 50 ms)" % (worst, base["ping_worst_ms"]))


if __name__ == "__main__":
    main()
