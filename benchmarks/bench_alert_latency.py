"""How long after the fact a stall's and a filling disk's alert reach a person, console closed.

  python3 benchmarks/bench_alert_latency.py [--runs 3] [--stall-after 3] [--pings 6]

1. Stall: training jobs that print speculators' step lines every 0.2 s, then hang with their
   process alive (`training.start` with `stall_after_s`); each writes the time of its last step
   line. From that moment (the stall's start) to the `training_stalled` alert's request at a JSON
   webhook on loopback (tests/notify_receiver.py), and that less the stall limit (what the
   detection and delivery add).
2. Disk: a job writing 2 MiB/s into a 32 MiB tmpfs (its working directory), the `disk_filling`
   rule's horizon 4 s and window 5 s (`telemetry.configure`); the job writes the time its disk's
   free bytes first fell to what 4 s at its rate fill (the moment the rate predicts it full
   within the horizon). From that moment to the `disk_filling` alert's request.
3. Heartbeat: `notify.heartbeat` at the product's floor (5 s) to the same loopback receiver; the
   period between pings as the receiver sees them (median, lowest, highest) over `--pings`.

Runs the agent on this machine in a fresh state directory (root: the tmpfs is mounted), stopped
and removed at the end.
"""

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from tests.notify_receiver import Receiver  # noqa: E402

STEP_LINE = ("[17:21:37] INFO     train/loss_0=0.025, train/full_acc_0=0.00e+00, train/loss=%.3f, epoch=0, "
             "lr/AdamW=9.09e-04, global_step=%d                     trainer.py:587")
TRAINER = """\
    import sys, time
    for n in range(15):
        print(%r %% (1.0 / (n + 1), n), flush=True)
        stamp = time.time()
        time.sleep(0.2)
    open(sys.argv[1], "w").write(repr(stamp))
    time.sleep(600)
""" % STEP_LINE
RATE = 2 << 20
SIZE = 32 << 20
HORIZON_S = 4.0
HEARTBEAT_S = 5.0  # the product's floor
WRITER = """\
    import os, sys, time
    chunk = b"x" * (%d // 50)
    began, written, told = time.monotonic(), 0, False
    with open("fill.bin", "wb") as f:
        while True:
            st = os.statvfs(".")
            if not told and st.f_bavail * st.f_frsize <= %d * %g:
                open(sys.argv[1], "w").write(repr(time.time()))
                told = True
            if st.f_bavail < st.f_blocks // 50:
                break
            f.write(chunk)
            f.flush()
            written += len(chunk)
            time.sleep(max(0.0, began + written / %d - time.monotonic()))
    time.sleep(600)
""" % (RATE, RATE, HORIZON_S, RATE)


def wait(predicate, timeout_s=120.0):
    deadline = time.monotonic() + timeout_s
    while True:
        found = predicate()
        if found:
            return found
        if time.monotonic() > deadline:
            raise SystemExit("timed out")
        time.sleep(0.02)


def delivered(receiver, kind, job_id=None):
    """(the alert, when its request came) of the first `kind` alert (about `job_id`), or None."""
    for request in list(receiver.requests):
        if request["method"] != "POST":
            continue  # a heartbeat's GET
        for alert in json.loads(request["body"])["alerts"]:
            if alert["kind"] == kind and (job_id is None or alert["job_id"] == job_id):
                return alert, request["at"]
    return None


def stalls(client, receiver, runs, stall_after_s, scratch):
    script = os.path.join(scratch, "trainer.py")
    with open(script, "w") as f:
        f.write(textwrap.dedent(TRAINER))
    started = []
    for number in range(runs):
        stamp = os.path.join(scratch, "stalled-%d" % number)
        job = client.call("training.start", {"argv": [sys.executable, "-u", script, stamp], "name": "bench stall %d" % number,
                                             "stall_after_s": stall_after_s})
        started.append((job["id"], stamp))
    rows = []
    for job_id, stamp in started:
        _, at = wait(lambda: delivered(receiver, "training_stalled", job_id))
        since = float(open(stamp).read())
        rows.append((job_id, at - since, at - since - stall_after_s))
        client.call("jobs.stop", {"id": job_id, "grace_s": 0})
    return rows


def disk(client, receiver, scratch):
    mnt = os.path.join(scratch, "tiny")
    os.mkdir(mnt)
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=%d" % SIZE, "tmpfs", mnt], check=True)
    try:
        client.call("telemetry.configure", {"alerts": {"disk_filling": {"window_s": 5, "horizon_s": HORIZON_S}}})
        stamp = os.path.join(scratch, "predicted")
        job = client.call("jobs.submit", {"argv": [sys.executable, "-c", textwrap.dedent(WRITER), stamp], "cwd": mnt,
                                          "name": "bench filler"})
        alert, at = wait(lambda: delivered(receiver, "disk_filling"))
        predicted = float(wait(lambda: os.path.exists(stamp) and open(stamp).read()))
        client.call("jobs.stop", {"id": job["id"], "grace_s": 0})
        return at - predicted, alert["message"]
    finally:
        time.sleep(0.5)
        subprocess.run(["umount", "-l", mnt], check=False)


def heartbeat(client, receiver, pings):
    path = "/ping/bench-heartbeat"
    client.call("notify.heartbeat", {"url": receiver.url + path, "every": HEARTBEAT_S})
    seen = wait(lambda: (lambda found: found if len(found) >= pings else None)(
        [r["at"] for r in list(receiver.requests) if r["path"] == path]), timeout_s=HEARTBEAT_S * (pings + 4))
    return [b - a for a, b in zip(seen, seen[1:])]


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--stall-after", type=float, default=3.0)
    parser.add_argument("--pings", type=int, default=6)
    args = parser.parse_args()
    home = tempfile.mkdtemp(prefix="specdeck-bench-alerts-")
    scratch = tempfile.mkdtemp(prefix="specdeck-bench-alerts-jobs-")
    os.chmod(home, 0o700)
    os.environ["SPECDECK_HOME"] = home
    from tui.transport.connection import open_client

    client = open_client("local")
    receiver = Receiver()
    try:
        client.call("notify.add", {"url": receiver.url + "/hook", "format": "json"})
        rows = stalls(client, receiver, args.runs, args.stall_after, scratch)
        print("stall's start (the last step line) -> training_stalled alert at the receiver (limit %g s):" % args.stall_after)
        for job_id, total_s, added_s in rows:
            print("  %-4s %.2f s   (%.2f s beyond the limit)" % (job_id, total_s, added_s))
        added = [r[2] for r in rows]
        print("  beyond the limit: median %.2f s, worst %.2f s" % (statistics.median(added), max(added)))
        late_s, message = disk(client, receiver, scratch)
        print("\ndisk's rate predicts it full within the horizon (%g s at %.1f MiB/s) -> disk_filling alert at the receiver: %.2f s"
              % (HORIZON_S, RATE / float(1 << 20), late_s))
        print("  (%s)" % message)
        gaps = heartbeat(client, receiver, args.pings)
        print("\nheartbeat every %g s, the period as the receiver sees it over %d pings: median %.3f s, lowest %.3f s, highest %.3f s"
              % (HEARTBEAT_S, args.pings, statistics.median(gaps), min(gaps), max(gaps)))
    finally:
        receiver.close()
        try:
            client.call("daemon.shutdown")
        except Exception:
            pass
        client.close()
        time.sleep(0.5)
        shutil.rmtree(home, ignore_errors=True)
        shutil.rmtree(scratch, ignore_errors=True)


if __name__ == "__main__":
    main()
