"""The morning report over history that real jobs wrote on the real agent: a job that succeeds,
one that fails and the alert it raises to a loopback receiver (and to a channel that is down),
the disks the telemetry sampler follows, the daemon's start; `specdeck report` prints its key
lines; and the daily digest goes once, through the channels, at a time set a few seconds ahead."""

import json
import os
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import remote.areas  # noqa: F401 - the agent's areas, as its entry point installs them
from remote.core.daemon import Daemon
from remote.history.store import HistoryStore
from remote.report import history_figures, presence
from remote.report.build import build
from remote.report.text import render
from remote.telemetry.recording import ReplayNvml, load
from remote.telemetry.sampler import TelemetrySampler
from tests.helpers.cli import run_cli
from tests.helpers.waits import wait_for
from tests.notify_receiver import Receiver

RECORDING = Path(__file__).resolve().parent / "data" / "nvml-h200.json.gz"


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


def gpu_job(daemon, device_file, name):
    """A real job whose process holds `device_file` open, as a CUDA process holds /dev/nvidia*."""
    job = daemon.jobs.submit([sys.executable, "-c", "import time; f = open(%r); time.sleep(120)" % str(device_file)], name=name)
    pid = wait_for(lambda: daemon.jobs.describe(job["id"])["pid"], message="the job's process")
    wait_for(lambda: any(os.readlink("/proc/%d/fd/%s" % (pid, fd)) == str(device_file) for fd in os.listdir("/proc/%d/fd" % pid)),
             message="the job holding its GPU")
    return job["id"], pid


def test_a_day_of_history_from_real_jobs_and_a_replayed_h200_gives_each_job_its_gpu_use(agent_home, tmp_path):
    """A day of history on the real sampler and store, its GPU the H200 recording replayed: the
    day before the jobs idle and loaded by turns with no job on it, then a real job while the
    recording's load phase plays (its GPU ~100% busy), one while its stall plays (0%: a hung
    collective or a data loader that never came back looks like this) and one that holds no GPU.
    The report over the day gives each its own GPU use, and its text says it."""
    document = load(RECORDING)
    phases = {p: [i for i, f in enumerate(document["frames"]) if f["phase"] == p] for p in ("idle", "load", "stall")}
    recorded = next(p["pid"] for f in document["frames"] for p in f["sample"]["processes"])
    device_file = tmp_path / "nvidia0"
    device_file.write_text("")
    began = time.time()
    clock = [began - 86400]
    store = HistoryStore(str(tmp_path / "history.sqlite"), clock=lambda: clock[0]).open()
    daemon = Daemon("test")
    daemon.history = SimpleNamespace(store=store, add_many=store.add_many)
    replay = ReplayNvml(document)
    sampler = TelemetrySampler(daemon, nvml_module=replay)
    sampler.start()
    sampler.mapper.device_prefix = str(device_file)
    for n in range(288):  # the day, every 5 min: nobody's GPU use
        replay.frame = phases["load" if n % 3 == 0 else "idle"][n % len(phases["idle"])]
        clock[0] = began - 86400 + 300 * n
        sampler.sample_once(clock[0], clock[0])

    def ran(name, frames):
        job_id, pid = gpu_job(daemon, device_file, name)
        replay.pid_map = {recorded: pid}
        for index in frames:
            replay.frame = index
            clock[0] = time.time()
            sampler.sample_once(clock[0], clock[0])
        daemon.jobs.stop(job_id, grace_s=1)
        wait_for(lambda: daemon.jobs.describe(job_id)["ended_at"], message="the job's end")
        return job_id

    busy = ran("eagle3 train", phases["load"])
    hung = ran("eagle3 train (hung)", phases["stall"])
    cpu = daemon.jobs.submit(["sh", "-c", "echo tokenized"], name="tokenize")["id"]
    wait_for(lambda: daemon.jobs.describe(cpu)["state"] == "succeeded", message="the CPU job's end")
    clock[0] = time.time()
    store.flush()

    report = build(daemon, began - 86400, time.time() + 1)
    assert not report["errors"] and not report["cut"]
    jobs = {j["id"]: j for j in report["jobs"]}
    loaded = [document["frames"][i]["sample"]["gpus"][0]["utilization_percent"] for i in phases["load"]]
    assert jobs[busy]["gpu_utilization_percent"]["max"] == max(loaded) == 100
    assert min(loaded) <= jobs[busy]["gpu_utilization_percent"]["mean"] <= max(loaded)
    assert jobs[hung]["gpu_utilization_percent"] == {"mean": 0.0, "max": 0.0}  # the day's load before it is not its
    assert jobs[cpu]["gpu_utilization_percent"] is None and jobs[cpu]["exit_code"] == 0
    assert all(jobs[j]["signal"] or jobs[j]["state"] != "succeeded" for j in (busy, hung))
    disk = report["disks"][0]
    assert disk["lowest_at"] >= began - 86400 and 0 < disk["lowest_free_bytes"] <= disk["total_bytes"]
    text = render(report)
    assert "%s command eagle3 train: started" % busy in text and ", GPU 0% mean, 0% max" in text and "100% max" in text
