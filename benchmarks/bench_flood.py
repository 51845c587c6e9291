"""Other clients' round trips while one client floods the daemon, alone beside flooded.

  python benchmarks/bench_flood.py [--tree DIR]

A host with 40 jobs (a jobs.list reply of ~100 KB). The flooding client pipelines 3,000
jobs.list requests and never reads a reply. Meanwhile another client times jobs.list over its
own connection, and `specdeck jobs local` is run as a user would; the daemon's threads and
memory are sampled. `--tree DIR` runs the daemon and the CLI of another checkout (e.g. an
older commit unpacked with `git archive`), to compare before and after.
"""

import argparse
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time

from daemon_client import Client  # benchmarks/, beside this script

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
JOBS = 40
FLOOD_REQUESTS = 3000
FLOOD_WINDOW_S = 10.0


def proc_status(pid, field):
    with open("/proc/%d/status" % pid) as status:
        for line in status:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    return 0


def timed(function):
    started = time.perf_counter()
    function()
    return time.perf_counter() - started


def measure(home, env, window_s):
    """Median jobs.list round trip, median `specdeck jobs local` time, peak threads and RSS."""
    client = Client(home)
    pid = client.hello["daemon_pid"]
    round_trips, commands, threads, rss_kb = [], [], [], []
    deadline = time.monotonic() + window_s
    while time.monotonic() < deadline:
        round_trips.append(timed(lambda: client.call("jobs.list")))
        cli = [sys.executable, "-m", "tui.cli", "jobs", "local"]
        commands.append(timed(lambda: subprocess.run(cli, env=env, cwd=env["PYTHONPATH"], stdout=subprocess.DEVNULL, check=True, timeout=300)))
        threads.append(proc_status(pid, "Threads"))
        rss_kb.append(proc_status(pid, "VmRSS"))
    client.sock.close()
    return statistics.median(round_trips), statistics.median(commands), max(threads), max(rss_kb)


def flood(home):
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.connect(os.path.join(home, "daemon.sock"))
    payload = b"".join(b'{"id": %d, "method": "jobs.list"}\n' % i for i in range(FLOOD_REQUESTS))

    def write():
        try:
            sock.sendall(payload)
        except OSError:
            pass

    threading.Thread(target=write, daemon=True).start()
    return sock


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tree", default=ROOT, help="checkout whose daemon and CLI to run (default: this one)")
    args = parser.parse_args()
    home = tempfile.mkdtemp()
    env = dict(os.environ, SPECDECK_HOME=home, PYTHONPATH=os.path.abspath(args.tree))
    env.pop("SSH_AUTH_SOCK", None)
    # cwd too: `python -m` puts it before PYTHONPATH.
    subprocess.run([sys.executable, "-m", "remote", "daemon"], env=env, cwd=env["PYTHONPATH"], check=True, timeout=60)
    try:
        client = Client(home)
        for i in range(JOBS):
            client.call("jobs.submit", {"argv": ["true"], "name": "job %d" % i, "meta": {"note": "x" * 2000}})
        alone = measure(home, env, 3.0)
        flooder = flood(home)
        flooded = measure(home, env, FLOOD_WINDOW_S)
        flooder.close()
        client.call("daemon.shutdown")
    finally:
        time.sleep(0.5)
        shutil.rmtree(home, ignore_errors=True)

    print("another client, %d jobs on the host, while one client pipelines %d jobs.list and never reads (%s):"
          % (JOBS, FLOOD_REQUESTS, "this tree" if args.tree == ROOT else args.tree))
    print("  jobs.list round trip     alone %8.1f ms   flooded %8.1f ms   %6.1fx" % (alone[0] * 1e3, flooded[0] * 1e3, flooded[0] / alone[0]))
    print("  `specdeck jobs local`    alone %8.1f ms   flooded %8.1f ms   %6.1fx" % (alone[1] * 1e3, flooded[1] * 1e3, flooded[1] / alone[1]))
    print("  daemon threads (peak)    alone %8d      flooded %8d" % (alone[2], flooded[2]))
    print("  daemon memory (peak RSS) alone %8.1f MB   flooded %8.1f MB" % (alone[3] / 1024.0, flooded[3] / 1024.0))


if __name__ == "__main__":
    main()
