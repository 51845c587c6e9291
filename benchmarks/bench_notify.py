"""How fast an alert reaches a person with the console closed, and what a day-long outage costs.

  python3 benchmarks/bench_notify.py [--jobs 5] [--alerts 1000]

1. Latency: jobs that exit 3, a JSON webhook on loopback; for each, the time from the job's end
   (its ended_at) to the receiver's request (target: under 5 s), beside the time the `jobs.events`
   stream a console follows shows the end.
2. Outage: the receiver down, `--alerts` alerts queued (notify.send), a day of failed tries
   simulated by moving the queue's clock on (notify.retry's documented `advance_s`, 30 min at a
   time, one failed try each, instead of waiting a day), then the receiver up: how long until
   every alert is delivered, in how many requests, and whether any was lost or repeated.

Runs the agent on this machine in a fresh state directory, stopped and removed at the end.
"""

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import threading
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from tests.notify_receiver import Receiver  # noqa: E402


def wait(predicate, timeout_s=120.0):
    deadline = time.monotonic() + timeout_s
    while not predicate():
        if time.monotonic() > deadline:
            raise SystemExit("timed out")
        time.sleep(0.02)


def channel_status(client, channel_id):
    return next(c["status"] for c in client.call("notify.list")["channels"] if c["id"] == channel_id)


def latency(client, count):
    receiver = Receiver()
    try:
        channel = client.call("notify.add", {"url": receiver.url + "/hook", "format": "json"})["channel"]["id"]
        seen = {}
        lock = threading.Lock()

        def on_events(data, seq):
            for record in data.get("records") or []:
                if record.get("event") == "ended":
                    with lock:
                        seen.setdefault(record["id"], time.time())

        stream = client.subscribe("jobs.events", {}, on_events)
        rows = []
        for number in range(count):
            job = client.call("jobs.submit", {"argv": ["sh", "-c", "sleep 0.3; exit 3"], "name": "bench %d" % number})
            receiver.wait_for(number + 1, 60)
            ended = client.call("jobs.get", {"id": job["id"]})
            wait(lambda: job["id"] in seen)
            received_at = receiver.requests[number]["at"]
            rows.append((job["id"], received_at - ended["ended_at"], seen[job["id"]] - ended["ended_at"]))
        stream.cancel()
        client.call("notify.remove", {"id": channel})
        return rows
    finally:
        receiver.close()


def outage(client, alerts):
    receiver = Receiver()
    try:
        channel = client.call("notify.add", {"url": receiver.url + "/hook", "format": "json"})["channel"]["id"]
        receiver.down()
        began = time.monotonic()
        for number in range(alerts):
            client.call("notify.send", {"message": "queued alert %d" % number, "key": "bench-outage-%d" % number})
        queued_s = time.monotonic() - began
        wait(lambda: channel_status(client, channel)["failures"] >= 1)
        simulated_s, tries = 0.0, 1
        while simulated_s < 86400.0:
            before = channel_status(client, channel)["requests"]
            client.call("notify.retry", {"id": channel, "advance_s": 1800.0})
            simulated_s += 1800.0
            wait(lambda: channel_status(client, channel)["requests"] > before)
            tries += 1
        status = channel_status(client, channel)
        receiver.up()
        began = time.monotonic()
        client.call("notify.retry", {"id": channel})
        wait(lambda: channel_status(client, channel)["sent"] >= alerts, 600)
        delivered_s = time.monotonic() - began
        messages = [a["message"] for body in receiver.json_bodies() for a in body["alerts"]]
        return {"queued_s": queued_s, "failed_tries": tries, "simulated_h": simulated_s / 3600, "pending_before": status["pending"],
                "delivered_s": delivered_s, "requests": len(receiver.requests), "delivered": len(messages),
                "distinct": len(set(messages)), "expired": channel_status(client, channel)["expired"]}
    finally:
        receiver.close()


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--jobs", type=int, default=5)
    parser.add_argument("--alerts", type=int, default=1000)
    args = parser.parse_args()
    home = tempfile.mkdtemp(prefix="specdeck-bench-notify-")
    os.chmod(home, 0o700)
    os.environ["SPECDECK_HOME"] = home
    from tui.transport.connection import open_client

    client = open_client("local")
    try:
        rows = latency(client, args.jobs)
        print("job exit -> alert at the receiver (console closed), beside the jobs.events stream a console follows:")
        for job_id, notify_s, stream_s in rows:
            print("  %-4s receiver %.2f s   jobs stream %.2f s" % (job_id, notify_s, stream_s))
        notify = [r[1] for r in rows]
        stream = [r[2] for r in rows]
        print("  median %.2f s, worst %.2f s (target under 5 s); jobs stream median %.2f s, worst %.2f s" % (
            statistics.median(notify), max(notify), statistics.median(stream), max(stream)))
        result = outage(client, args.alerts)
        print("\n%d alerts queued while the receiver was down (%.1f s to queue), %d failed tries over %.0f simulated hours, %d pending;"
              % (args.alerts, result["queued_s"], result["failed_tries"], result["simulated_h"], result["pending_before"]))
        print("receiver up: all delivered in %.2f s, %d requests, %d alerts received, %d distinct, %d lost, %d given up" % (
            result["delivered_s"], result["requests"], result["delivered"], result["distinct"], args.alerts - result["distinct"],
            result["expired"]))
    finally:
        try:
            client.call("daemon.shutdown")
        except Exception:
            pass
        client.close()
        time.sleep(0.5)
        shutil.rmtree(home, ignore_errors=True)


if __name__ == "__main__":
    main()
