"""Slurm through specdeck, beside Slurm by hand, on a real two-node Slurm and a real sshd:

  python -m pytest benchmarks/bench_slurm.py -q -s

- from submit to the job's state (running) and to its first log line on the console: ours (a
  console's open connection: jobs.submit with job_engine slurm, job events, jobs.follow)
  against a person's open SSH shell running `sbatch`, `squeue` once a second until it says
  RUNNING, then `tail -F` of the output file;
- the daemon's CPU while it watches 100 Slurm jobs of ours (held, so they stay in the queue),
  how often it asks Slurm (squeue calls a minute), and the controller's CPU meanwhile; beside
  it, what one poll costs as one squeue for all of the user's jobs against one squeue per job.
"""

import os
import statistics
import subprocess
import threading
import time

from tests.helpers.cli import daemon_pid
from tests.slurm_fixtures import slurm_cluster, slurm_host  # noqa: F401 (fixtures)
from tui.transport.connection import open_client

ROUNDS = 3
JOBS = 100
WINDOW_S = 60.0


def cpu_ticks(pid, children=True):
    """utime + stime (+ the reaped children's: the squeue calls) of a process, in clock ticks."""
    with open("/proc/%d/stat" % pid) as f:
        fields = f.read().rsplit(")", 1)[1].split()
    ticks = int(fields[11]) + int(fields[12])
    return ticks + (int(fields[13]) + int(fields[14]) if children else 0)


def ours_once(client):
    seen = {}
    done = threading.Event()
    state = {"id": None}

    def on_event(data, seq):
        for record in data.get("records") or []:
            if record.get("id") == state["id"] and (record.get("job") or {}).get("state") == "running" and "running" not in seen:
                seen["running"] = time.perf_counter()

    def on_log(data, seq):
        if data.get("text") and "line" not in seen:
            seen["line"] = time.perf_counter()
            done.set()

    events = client.subscribe("jobs.events", {}, on_event)
    t0 = time.perf_counter()
    job = client.call("jobs.submit", {"argv": ["sh", "-c", "echo first line; sleep 3"], "job_engine": "slurm"})
    state["id"] = job["id"]
    follow = client.subscribe("jobs.follow", {"id": job["id"], "after": 0}, on_log)
    assert done.wait(120), "no log line"
    deadline = time.monotonic() + 60
    while "running" not in seen and time.monotonic() < deadline:
        if client.call("jobs.get", {"id": job["id"]})["process_state"] != "starting":
            seen.setdefault("running", time.perf_counter())  # ran and ended between two polls: seen as ended
        time.sleep(0.05)
    events.cancel() if hasattr(events, "cancel") else None
    follow.cancel() if hasattr(follow, "cancel") else None
    return seen["running"] - t0, seen["line"] - t0


def by_hand_once(laptop, slurm_host, host_user):
    out = host_user.home / ("by-hand-%d.out" % time.time_ns())
    script = ("export SLURM_CONF=%s; read go; id=$(sbatch --parsable -o %s --wrap 'echo first line; sleep 3'); "
              "until squeue -h -j $id -o %%T | grep -q -e RUNNING -e COMPLETING -e COMPLETED; do sleep 1; done; echo RUNNING-SEEN; "
              "timeout 30 tail -F -n +1 %s 2>/dev/null") % (slurm_host.conf, out, out)
    proc = subprocess.Popen(["ssh", "-F", str(laptop / ".ssh" / "config"), "-o", "BatchMode=yes", "gpuhost", script],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, bufsize=1)
    time.sleep(1.0)  # the shell is logged in and waiting: the person is at the prompt
    t0 = time.perf_counter()
    proc.stdin.write("go\n")
    proc.stdin.flush()
    seen = {}
    for text in proc.stdout:
        if text.startswith("RUNNING-SEEN"):
            seen["running"] = time.perf_counter()
        elif text.startswith("first line"):
            seen["line"] = time.perf_counter()
            break
    proc.kill()
    proc.wait()
    return seen["running"] - t0, seen["line"] - t0


def test_slurm_figures(slurm_host, laptop, host_user, host_python):
    client = open_client("gpuhost", python=host_python)
    try:
        print("\nSlurm, two nodes on this machine, over a real sshd on loopback:")
        ours = [ours_once(client) for _ in range(ROUNDS)]
        base = [by_hand_once(laptop, slurm_host, host_user) for _ in range(ROUNDS)]
        for index, label in ((0, "submit -> state running on the console"), (1, "submit -> first log line on the console")):
            o, b = statistics.median(r[index] for r in ours), statistics.median(r[index] for r in base)
            print("  %-44s ours %8.0f ms   by hand %8.0f ms   %5.1fx" % (label, o * 1e3, b * 1e3, b / o))

        for _ in range(JOBS):
            client.call("jobs.submit", {"argv": ["true"], "job_engine": "slurm", "job_engine_options": {"sbatch_args": ["--hold"]}})
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            held = [j for j in client.call("jobs.list")["jobs"] if j.get("pending_reason") == "JobHeldUser"]
            if len(held) >= JOBS:
                break
            time.sleep(0.5)
        time.sleep(20)  # past the burst of the submits: the watcher settles to its quiet interval
        pid = daemon_pid(host_user.home / ".cache" / "specdeck")
        ctld = slurm_host._procs[0].pid
        hz = os.sysconf("SC_CLK_TCK")
        polls0, daemon0, ctld0, t0 = client.call("slurm.status")["polls"], cpu_ticks(pid), cpu_ticks(ctld, children=False), time.monotonic()
        time.sleep(WINDOW_S)
        status = client.call("slurm.status")
        elapsed = time.monotonic() - t0
        polls = status["polls"] - polls0
        daemon_pct = (cpu_ticks(pid) - daemon0) / hz / elapsed * 100
        ctld_pct = (cpu_ticks(ctld, children=False) - ctld0) / hz / elapsed * 100
        print("  watching %d held Slurm jobs for %.0f s: %d squeue calls (%.1f a minute; interval now %.0f s)" % (
            len(held), elapsed, polls, polls / elapsed * 60, status["interval_s"] or 0))
        print("  daemon CPU %.2f%% of one core (its squeue children included); slurmctld CPU %.2f%%" % (daemon_pct, ctld_pct))

        ids = [j["slurm_id"] for j in held][:JOBS]
        env = {"SLURM_CONF": slurm_host.conf}
        t = time.perf_counter()
        host_user.run(["squeue", "--noheader", "--states=all", "--user", host_user.name, "-O", "JobID:|,State:|,Reason:|"], env=env)
        one = time.perf_counter() - t
        t = time.perf_counter()
        for slurm_id in ids:
            host_user.run(["squeue", "--noheader", "-j", slurm_id, "-O", "JobID:|,State:|,Reason:|"], env=env)
        per_job = time.perf_counter() - t
        print("  one poll: one squeue for all %d jobs %.0f ms   one squeue per job %.0f ms   %.0fx" % (len(ids), one * 1e3, per_job * 1e3, per_job / one))
    finally:
        client.close()
