"""`fleet.summary` through a real daemon: each figure against what the host's own methods say at
the same moment (a replayed 8-GPU host's telemetry, its jobs, a server's figures, a training
run's progress), a figure that turns stale said to be stale with its age, and the alerts of the
last hour that are still open."""

from pathlib import Path

import pytest

from remote.fleet.methods import BUSY_UTILIZATION_PERCENT, SLOWING_THROTTLES
from tests.helpers.waits import wait_for
from tests.hostile_servers import AFTER, AFTER_ACCEPT_LENGTH, trickle
from tui.transport.connection import open_client

RECORDING = Path(__file__).resolve().parent / "data" / "nvml-h200.json.gz"


@pytest.fixture
def gpu_host(agent_home, monkeypatch):
    """A client of a local agent whose daemon replays 8 H200 GPUs."""
    monkeypatch.setenv("SPECDECK_NVML_REPLAY", "%s:8" % RECORDING)
    client = open_client("local")
    yield client
    client.close()


def summary(client):
    return client.call("fleet.summary")


def test_a_replayed_8_gpu_host_in_figures_of_its_own_sample(gpu_host):
    def same_sample():
        latest, found = gpu_host.call("telemetry.latest"), summary(gpu_host)
        return (latest, found) if found["gpus"] and found["gpus"]["time"] == latest["time"] else None

    latest, found = wait_for(same_sample, 30, message="a summary of the sample telemetry.latest gave")
    gpus = latest["gpus"]
    held = {p["gpu_index"] for p in latest["processes"] if "compute" in (p.get("kind") or "")}
    assert found["gpus"] == {
        "count": 8,
        "busy": sum(1 for g in gpus if g["utilization_percent"] >= BUSY_UTILIZATION_PERCENT or g["index"] in held),
        "memory_used_bytes": sum(g["memory_used_bytes"] for g in gpus),
        "memory_total_bytes": sum(g["memory_total_bytes"] for g in gpus),
        "max_temperature_c": max(g["temperature_c"] for g in gpus),
        "throttling": sum(1 for g in gpus if SLOWING_THROTTLES & set(g["throttle_reasons"] or ())),
        "time": latest["time"],
        "age_s": found["gpus"]["age_s"],
        "stale": False,
    }
    assert 0 <= found["gpus"]["age_s"] < 3 and found["gpus_reason"] is None
    assert found["hostname"] == gpu_host.hello["hostname"] and found["at"] >= latest["time"]
    # Over the recording's phases the GPUs go from idle to busy: the count follows.
    wait_for(lambda: summary(gpu_host)["gpus"]["busy"] > 0, 60, message="a busy GPU in the recording")


def test_no_gpu_telemetry_says_why(client):
    found = summary(client)
    assert found["gpus"] is None and "NVML" in found["gpus_reason"]


def test_running_jobs_and_open_alerts(gpu_host):
    assert summary(gpu_host)["jobs_running"] == 0
    jobs = [gpu_host.call("jobs.submit", {"argv": ["sleep", "600"]})["id"] for _ in range(2)]
    wait_for(lambda: summary(gpu_host)["jobs_running"] == 2, 30, message="two running jobs counted")
    gpu_host.call("jobs.stop", {"id": jobs[0], "grace_s": 1.0})
    wait_for(lambda: summary(gpu_host)["jobs_running"] == 1, 30, message="the stopped job no longer counted")

    gpu_host.call("notify.send", {"message": "first", "title": "by hand", "categories": ["training"]})
    gpu_host.call("notify.send", {"message": "second", "urgent": True})
    alerts = wait_for(lambda: (lambda a: a if len(a) >= 2 else None)(summary(gpu_host)["alerts"]), 30)
    assert [(a["message"], a["urgent"], a["categories"]) for a in alerts[:2]] == [("second", True, ["failed"]),
                                                                                   ("first", False, ["training"])]
    assert alerts[1]["title"] == "by hand" and alerts[0]["at"] >= alerts[1]["at"]

    # A GPU alert is open while its condition lasts and resolved when it ends.
    gpu_host.call("telemetry.configure", {"alerts": {"temperature": {"threshold": 1, "duration_s": 0}}})
    hot = wait_for(lambda: [a for a in summary(gpu_host)["alerts"] if a["kind"] == "temperature"], 30, message="a temperature alert")
    assert hot[0]["categories"] == ["gpu"] and "temperature" in hot[0]["message"]
    gpu_host.call("telemetry.configure", {"alerts": {"temperature": {"threshold": 500}}})
    wait_for(lambda: not [a for a in summary(gpu_host)["alerts"] if a["kind"] == "temperature"], 30, message="the temperature alert resolved")
    assert [a["message"] for a in summary(gpu_host)["alerts"]][:2] == ["second", "first"]  # those stay open
    gpu_host.call("jobs.stop", {"id": jobs[1], "grace_s": 1.0})


def test_servers_with_their_break_even_and_a_figure_that_turns_stale(client, servers):
    attached, job_server = servers(), servers()
    attached_id = client.call("serving.attach", {"url": attached.url})["id"]
    job = client.call("jobs.submit", {"argv": ["sleep", "600"], "kind": "server", "meta": {"url": job_server.url, "break_even": 2.46}})
    try:
        listed = wait_for(lambda: (lambda s: s if len(s) == 2 else None)(summary(client)["servers"]), 30, message="both servers read")
        assert [s["id"] for s in listed] == [job["id"], attached_id]  # jobs first, attached servers after
        attached.text = job_server.text = AFTER

        def both_drafting():
            found = {s["id"]: s for s in summary(client)["servers"]}
            return found if all(s["accept_length"] is not None for s in found.values()) else None

        found = wait_for(both_drafting, 30, message="both servers' accept length")
        assert found[job["id"]]["accept_length"] == pytest.approx(AFTER_ACCEPT_LENGTH)
        assert found[job["id"]]["break_even_accept_length"] == 2.46  # its job's
        assert found[attached_id]["break_even_accept_length"] is None  # an attached server has none
        assert found[attached_id]["stale"] is False and found[attached_id]["age_s"] < 2

        attached.behaviour = trickle  # from now on each scrape stops at its deadline
        stale = wait_for(lambda: (lambda s: s if s["stale"] and s["age_s"] > 3 else None)(
            next(s for s in summary(client)["servers"] if s["id"] == attached_id)), 60, message="the attached server stale")
        assert stale["accept_length"] == pytest.approx(AFTER_ACCEPT_LENGTH)  # its last figure, said to be old
        assert next(s for s in summary(client)["servers"] if s["id"] == job["id"])["stale"] is False  # the other stays current
    finally:
        client.call("jobs.stop", {"id": job["id"], "grace_s": 1.0})


def test_a_training_run_while_it_runs(client):
    script = ("echo 'train/loss=1.5, train/full_acc_0=0.7, train/full_acc_1=0.5, train/full_acc_2=0.3, epoch=0, global_step=40'; sleep 1; "
              "echo 'train/loss=1.4, train/full_acc_0=0.7, train/full_acc_1=0.5, train/full_acc_2=0.3, epoch=0, global_step=41'; sleep 600")
    job = client.call("training.start", {"argv": ["sh", "-c", script], "steps_total": 1000, "name": "tiny"})
    try:
        run = wait_for(lambda: (lambda t: t[0] if t and t[0]["step"] == 41 and t[0]["eta_s"] else None)(summary(client)["training"]), 30,
                       message="the run at step 41 with an ETA")
        curves = client.call("training.curves", {"id": job["id"]})
        assert (run["id"], run["predicted_accept_length"]) == (job["id"], pytest.approx(2.5))  # 1 + 0.7 + 0.5 + 0.3
        assert curves["latest"]["step"] == 41 and curves["predicted_accept_length"] == pytest.approx(run["predicted_accept_length"])
        assert 0 < run["eta_s"] and run["stale"] is False
    finally:
        client.call("jobs.stop", {"id": job["id"], "grace_s": 1.0})
    wait_for(lambda: summary(client)["training"] == [], 30, message="the stopped run gone from the summary")
