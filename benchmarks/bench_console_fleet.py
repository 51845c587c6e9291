"""The console's cost with 1, 8 and 64 hosts of 8 GPUs each: CPU (share of one core) and
memory of the console's process while every host is connected and its agent samples 8 GPUs
(an H200 recording replayed, each host a local agent with its own state directory, so its own
daemon), the Fleet pane shown and then a host's GPU pane (one host: its GPU pane only, as a
console of one host has no Fleet pane).

  python benchmarks/bench_console_fleet.py [--seconds 20] [--hosts 1,8,64]

The console runs headless (Textual's test driver: it lays out and renders every frame as it
would for a terminal, without writing it). Its CPU is this process's own (getrusage of the
console's threads; the agents are other processes). The baseline beside each line is the
console on one host: the ratio says what each host adds. Budget: 64 hosts within one core.
"""

import argparse
import asyncio
import os
import resource
import sys
import tempfile
import time
from pathlib import Path

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from tests.helpers.fleet import LocalFleet  # noqa: E402 (after the path that finds it)
from tui.app import SpecdeckApp  # noqa: E402


def cpu_s():
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def rss_mib():
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024.0
    return float("nan")


async def measure(n_hosts, seconds, root):
    names = ["gpu%02d" % i for i in range(n_hosts)]
    fleet = LocalFleet(root / ("fleet-%d" % n_hosts), names, gpus={name: 8 for name in names})
    app = SpecdeckApp(hosts=names, connect=fleet.connect)
    try:
        async with app.run_test(size=(180, 50)) as pilot:
            t0 = time.monotonic()
            # A console of one host has no Fleet pane and asks for no summary: connected is ready.
            polled = app.fleet
            while not all(link.summary is not None if polled else link.state == "connected" for link in app.links):
                if time.monotonic() - t0 > 300:
                    missing = ["%s %s %s %s" % (link.name, link.state, link.detail, link.summary_error)
                               for link in app.links if link.summary is None]
                    raise SystemExit("%d hosts: not all connected after 300 s:\n  %s" % (n_hosts, "\n  ".join(missing)))
                await pilot.pause(0.5)
            connect_s = time.monotonic() - t0
            await pilot.pause(3.0)  # the last connections' first frames
            results = {}
            views = (("fleet pane", ()), ("GPU pane", ("1",))) if polled else (("GPU pane", ("1",)),)
            for view, keys in views:
                for key in keys:
                    await pilot.press(key)
                await pilot.pause(2.0)
                c0, w0 = cpu_s(), time.monotonic()
                await pilot.pause(seconds)
                results[view] = (cpu_s() - c0) / (time.monotonic() - w0)
            return connect_s, results, rss_mib()
    finally:
        fleet.stop()


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--hosts", default="1,8,64")
    args = parser.parse_args()
    counts = [int(n) for n in args.hosts.split(",")]
    root = Path(tempfile.mkdtemp(prefix="fleet-bench-"))
    print("console with N hosts of 8 GPUs (replayed), %g s per view; CPU as %% of one core" % args.seconds)
    print("%6s %10s %14s %14s %10s %18s" % ("hosts", "connect s", "fleet pane", "GPU pane", "RSS MiB", "vs one host (GPU)"))
    baseline = None
    for n in counts:
        connect_s, cpu, rss = asyncio.run(measure(n, args.seconds, root))
        if baseline is None:
            baseline = cpu["GPU pane"]
        fleet_pane = "%13.1f%%" % (100 * cpu["fleet pane"]) if "fleet pane" in cpu else "%14s" % "(none)"
        print("%6d %10.1f %s %13.1f%% %10.0f %17.1fx" % (
            n, connect_s, fleet_pane, 100 * cpu["GPU pane"], rss, cpu["GPU pane"] / baseline if baseline else float("nan")))
        if n == 64:
            worst = max(cpu.values())
            print("64 hosts: %.1f%% of one core at most (budget: 100%%): %s" % (100 * worst, "met" if worst <= 1.0 else "NOT met"))


if __name__ == "__main__":
    main()
