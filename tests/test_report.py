"""The morning report over history that real jobs wrote on the real agent: a job that succeeds,
one that fails and the alert it raises to a loopback receiver (and to a channel that is down),
the disks the telemetry sampler follows, the daemon's start; `specdeck report` prints its key
lines; and the daily digest goes once, through the channels, at a time set a few seconds ahead."""

import json
import time

from remote.report import history_figures, presence
from tests.helpers.cli import run_cli
from tests.helpers.waits import wait_for
from tests.notify_receiver import Receiver


def test_the_report_tells_the_night_and_the_digest_sends_it_once(client, agent_home):
    receiver = Receiver()
    try:
        client.call("notify.add", {"url": receiver.url + "/phone", "format": "json"})
        down = client.call("notify.add", {"url": "http://127.0.0.1:9/closed", "format": "json"})["channel"]["id"]
        ok = client.call("jobs.submit", {"argv": ["sh", "-c", "echo fine"], "name": "tokenize shards"})["id"]
        bad = client.call("jobs.submit", {"argv": ["sh", "-c", "echo CUDA error: out of memory; exit 3"], "name": "finetune aq-k2"})["id"]
        receiver.wait_for(1)

        def ready():
            report = client.call("report.get", {"since_s": 3600})
            alerts = [a for a in report["alerts"] if a["job_id"] == bad]
            channels = {d["channel"]: d for d in alerts[0]["channels"]} if alerts else {}
            tried = channels.get(down, {}).get("tries") and channels.get("c1", {}).get("state") == "sent"
            return report if tried and report["disks"] else None

        report = wait_for(ready, message="the alert delivered to one channel, tried on the other, and a disk recorded")
        assert set(report) >= {"since", "until", "jobs", "training", "servers", "downloads", "alerts", "disks", "daemon"}
        jobs = {j["id"]: j for j in report["jobs"]}
        assert jobs[ok]["state"] == "succeeded" and jobs[ok]["exit_code"] == 0 and jobs[ok]["started_in_window"]
        assert jobs[bad]["state"] == "failed" and jobs[bad]["exit_code"] == 3 and jobs[bad]["runtime_s"] >= 0
        alert = next(a for a in report["alerts"] if a["job_id"] == bad)
        deliveries = {d["channel"]: d for d in alert["channels"]}
        assert deliveries["c1"]["state"] == "sent" and deliveries[down]["state"] == "pending" and deliveries[down]["error"]
        disk = report["disks"][0]
        assert 0 < disk["lowest_free_bytes"] <= disk["total_bytes"] and report["daemon"]["restarts"] == []

        out = run_cli("report", "local", "--since", "1h", home=agent_home).stdout
        for line in ("Jobs (", "%s command tokenize shards: started" % ok, "succeeded at", "(exit 0)",
                     "%s command finetune aq-k2: started" % bad, "failed at", "(exit 3)", "Alerts (", "c1 delivered",
                     "%s NOT delivered (pending: " % down, "Disks (", "lowest free", "GiB (", "Daemon", "no restart in the window"):
            assert line in out, "%r not in the report:\n%s" % (line, out)
        assert "no training run" in out and "no download finished" in out
        assert json.loads(run_cli("report", "local", "--since", "1h", "--json", home=agent_home).stdout)["jobs"][0]["id"] == ok
        assert "a duration is a number" in run_cli("report", "local", "--since", "1y", home=agent_home, check=2).stderr

        # The digest: at a time a few seconds ahead on the host's clock, once.
        before = len(receiver.requests)
        at = time.strftime("%H:%M:%S", time.localtime(time.time() + 3))
        assert client.call("notify.digest", {"at": at})["digest"]["at"] == at
        sent = wait_for(lambda: [json.loads(r["body"]) for r in receiver.requests[before:] if b"specdeck report" in r["body"]],
                        message="the digest at the receiver")
        assert "tokenize shards" in sent[0]["text"] and "Alerts (" in sent[0]["text"]
        digest = wait_for(lambda: client.call("notify.digest_get")["digest"] if client.call("notify.digest_get")["digest"]["last_sent_at"] else None)
        assert digest["last_day"] == time.strftime("%Y-%m-%d") and digest["last_results"]["c1"] is None
        assert digest["last_results"][down] and digest["next_at"] > time.time() + 3600  # tomorrow's, not again today
        listing = run_cli("notify", "local", home=agent_home).stdout
        assert "daily digest at %s" % at in listing and "c1 delivered" in listing
        assert client.call("notify.digest", {"at": "off"})["digest"] is None
        assert client.call("notify.digest_get")["digest"] is None
        assert len([r for r in receiver.requests if b"specdeck report" in r["body"]]) == 1
    finally:
        receiver.close()


def test_a_damaged_record_line_is_skipped_and_time_under_a_line_counts_only_what_was_recorded(agent_home):
    path = agent_home / "report" / "starts.jsonl"
    path.parent.mkdir(parents=True)
    path.write_text('{"at": 100.0, "pid": 1}\n{"at": 2\n\x00garbage\n[1, 2]\n{"at": 300.0, "pid": 2}\n')
    assert [s["at"] for s in presence.starts()] == [100.0, 300.0]
    points = [[0, 1.9, 2.0, 2.1], [60, 2.4, 2.5, 2.6], [120, 1.0, 1.2, 1.4], [3600, 1.0, 1.0, 1.0]]
    # under 2.46 from 0 to 60 and from 120 for one step (then a gap), and from 3600 to the end
    assert history_figures.time_under(points, 2.46, 60, 3630) == 60 + 60 + 30
    assert history_figures.spread(points) == {"min": 1.0, "median": 1.6, "max": 2.6, "mean": 1.675}
