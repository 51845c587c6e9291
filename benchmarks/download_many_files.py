"""A download of very many tiny files through the real daemon: the daemon's memory and CPU, and
the size of its `jobs.list` reply, while the download runs, once it is stopped, and once forgotten.

One fake hub (tests/hubserver.py, loopback, in this process) serves org/many, FILES files of
16 bytes each. A daemon of its own (a temp SPECDECK_HOME) runs `download.start` on it; every
SAMPLE_S the daemon's RSS, its CPU since the last sample and the `jobs.list` reply are taken.
After WINDOW_S the job is stopped (or it ended), the daemon is watched for 10 s more, then the
job is forgotten and the daemon watched again. `--before DIR` runs the same first with the
daemon of another checkout (e.g. `git worktree add /tmp/old HEAD~3`), and prints the ratios.

  python benchmarks/download_many_files.py [--files 100000] [--window-s 60] [--before DIR]
"""

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from daemon_client import Client  # noqa: E402 (benchmarks/, beside this script)
from tests.hubserver import FakeHub  # noqa: E402

SAMPLE_S = 5.0
SETTLE_S = 10.0
REPO = "org/many"


def rss_mb(pid):
    with open("/proc/%d/status" % pid) as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024.0
    return 0.0


def cpu_s(pid):
    with open("/proc/%d/stat" % pid) as stat:
        fields = stat.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


class Watch:
    """The daemon's figures between two looks: RSS now, share of a core since the last look."""

    def __init__(self, pid):
        self.pid = pid
        self.last = (time.monotonic(), cpu_s(pid))

    def look(self):
        now, cpu = time.monotonic(), cpu_s(self.pid)
        share = (cpu - self.last[1]) / max(now - self.last[0], 1e-6)
        self.last = (now, cpu)
        return rss_mb(self.pid), share


def job_of(reply, job_id):
    for job in (reply.get("result") or {}).get("jobs") or []:
        if job["id"] == job_id:
            return job
    return None


def run(tree, hub, files, window_s):
    home = tempfile.mkdtemp(prefix="specdeck-many-")
    out_dir = tempfile.mkdtemp(prefix="specdeck-many-out-")
    env = dict(os.environ, SPECDECK_HOME=home, PYTHONPATH=os.path.abspath(tree))
    env.pop("SSH_AUTH_SOCK", None)
    subprocess.run([sys.executable, "-m", "remote", "daemon"], env=env, cwd=env["PYTHONPATH"], check=True, timeout=60)
    figures = {}
    try:
        client = Client(home)
        pid = client.hello["daemon_pid"]
        watch = Watch(pid)
        figures["start_rss_mb"] = rss_mb(pid)
        reply, _ = client.call_sized("download.start", {"repo": REPO, "local_dir": out_dir, "endpoint": hub.url, "python": sys.executable})
        if not reply.get("ok"):
            raise SystemExit("download.start failed: %s" % reply)
        job_id = reply["result"]["id"]
        started = time.monotonic()
        peak_rss, peak_list, running_cpu = 0.0, 0, []
        state = "?"
        print("  %-6s %-12s %10s %8s %14s %10s" % ("t s", "state", "RSS MB", "CPU", "jobs.list B", "files"))
        while True:
            time.sleep(SAMPLE_S)
            listing, size = client.call_sized("jobs.list")
            rss, share = watch.look()
            job = job_of(listing, job_id) or {}
            state = job.get("state", "failed listing" if not listing.get("ok") else "?")
            done = (job.get("progress") or {}).get("file_counts", {}).get("done")
            if done is None:
                done = sum(1 for f in (job.get("progress") or {}).get("files") or () if f.get("state") in ("downloaded", "verified", "present"))
            peak_rss, peak_list = max(peak_rss, rss), max(peak_list, size)
            running_cpu.append(share)
            print("  %-6.0f %-12s %10.1f %7.0f%% %14d %10s" % (time.monotonic() - started, state, rss, 100 * share, size, done))
            if time.monotonic() - started > window_s or state not in ("queued", "resolving", "downloading", "verifying", "starting", "running", "failed listing", "?"):
                break
        client.call("jobs.stop", {"id": job_id, "grace_s": 2})
        while True:
            reply, _ = client.call_sized("jobs.get", {"id": job_id})
            if (reply.get("result") or {}).get("process_state") not in ("running", "starting"):
                break
            time.sleep(0.5)
        watch.look()
        time.sleep(SETTLE_S)
        listing, size = client.call_sized("jobs.list")
        figures["ended_rss_mb"], figures["ended_cpu"] = watch.look()
        figures["ended_list_bytes"] = size
        client.call("jobs.forget", {"ids": [job_id]})
        watch.look()
        time.sleep(SETTLE_S)
        figures["forgotten_rss_mb"], figures["forgotten_cpu"] = watch.look()
        figures.update(peak_rss_mb=peak_rss, peak_list_bytes=peak_list, running_cpu=max(running_cpu), state=state)
        client.call("daemon.shutdown")
    finally:
        time.sleep(0.5)
        shutil.rmtree(home, ignore_errors=True)
        shutil.rmtree(out_dir, ignore_errors=True)
    return figures


ROWS = (
    ("daemon RSS at start", "start_rss_mb", "%.1f MB"),
    ("daemon RSS peak while it runs", "peak_rss_mb", "%.1f MB"),
    ("jobs.list reply, largest", "peak_list_bytes", "%d B"),
    ("daemon CPU while it runs, peak", "running_cpu", "%.2f core"),
    ("jobs.list reply, stopped job", "ended_list_bytes", "%d B"),
    ("daemon CPU, stopped job", "ended_cpu", "%.2f core"),
    ("daemon RSS, stopped job", "ended_rss_mb", "%.1f MB"),
    ("daemon RSS, job forgotten", "forgotten_rss_mb", "%.1f MB"),
)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--files", type=int, default=100000)
    parser.add_argument("--window-s", type=float, default=60.0, help="stop the download after this long")
    parser.add_argument("--before", metavar="DIR", help="another checkout whose daemon to run first, to compare")
    args = parser.parse_args()
    hub = FakeHub(root=tempfile.mkdtemp(prefix="specdeck-many-hub-")).start()
    hub.add_repo(REPO, {"d%03d/f%06d.txt" % (i // 1000, i): b"%015d\n" % i for i in range(args.files)})
    try:
        results = []
        for label, tree in ([("before", args.before)] if args.before else []) + [("this tree", ROOT)]:
            print("%s (%s): %d files of 16 bytes, stopped after %.0f s" % (label, tree, args.files, args.window_s))
            results.append((label, run(tree, hub, args.files, args.window_s)))
    finally:
        hub.stop()
    print()
    print("%-34s" % "" + "".join("%18s" % label for label, _ in results) + ("%10s" % "ratio" if len(results) == 2 else ""))
    for title, key, fmt in ROWS:
        cells = [fmt % figures[key] for _, figures in results]
        line = "%-34s" % title + "".join("%18s" % cell for cell in cells)
        if len(results) == 2 and results[1][1][key]:
            line += "%9.1fx" % (results[0][1][key] / results[1][1][key])
        print(line)


if __name__ == "__main__":
    main()
