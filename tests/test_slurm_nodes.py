"""Every node's GPUs while a Slurm job runs, on the real two-node Slurm of tests/slurm_fixtures.py,
through the host user's real daemon over a real sshd: a two-node job submitted with
SPECDECK_NVML_REPLAY in its environment (8 replayed H200 GPUs a node) has its nodes sampled on
the nodes by a step of the job (srun --overlap), and the samples reach the daemon labelled n1
and n2 (the telemetry stream, the history store, `specdeck gpus --job`); the GPU pane shows both
nodes; an alert names its node; a sampling step killed is started again while the job runs and
none is left once the job ends; a site whose srun refuses a step in the job says so in one line.
"""

import json
import os
import signal
import time
from pathlib import Path

import pytest
from textual.widgets import Static

from tests.helpers.cli import REPO_ROOT, run_cli
from tests.helpers.pilot import GpusApp
from tests.helpers.waits import wait_for, wait_until
from tui.transport.connection import open_client
from tui.telemetry.pane import GpusPane

RECORDING = REPO_ROOT / "tests" / "data" / "nvml-h200x2.json.gz"
NODES = ("n1", "n2")


@pytest.fixture
def cluster(slurm_host, laptop, host_user, host_python):
    """A client of the host user's daemon, on a host whose login environment knows the cluster."""
    client = open_client("gpuhost", python=host_python)
    yield client
    client.close()


def submit(client, seconds=600):
    """A two-node Slurm job that holds its nodes, its environment naming the NVML replay."""
    return client.call("jobs.submit", {"argv": ["sleep", str(seconds)], "name": "two nodes", "job_engine": "slurm",
                                       "job_engine_options": {"nodes": 2},
                                       "env": {"SPECDECK_NVML_REPLAY": "%s:8" % RECORDING}})


def nodes_now(client):
    return client.call("telemetry.latest").get("nodes") or {}


def sampled(client, job_id):
    """The job's nodes once both have current figures of 8 GPUs."""
    nodes = nodes_now(client)
    if sorted(nodes) == list(NODES) and all(len(n["gpus"]) == 8 and not n["stale"] and n["job_id"] == job_id for n in nodes.values()):
        return nodes
    return None


def sampler_processes(user):
    """{node: [pid]} of the node-sample processes the user runs (the step's tasks), by their node."""
    found = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            if entry.stat().st_uid != user.uid:
                continue
            argv = (entry / "cmdline").read_bytes().split(b"\0")
            environ = (entry / "environ").read_bytes().split(b"\0")
        except OSError:
            continue
        node = next((e.split(b"=", 1)[1].decode() for e in environ if e.startswith(b"SLURMD_NODENAME=")), None)
        if b"node-sample" in argv and node is not None:  # a task of the step (srun's own argv names it too)
            found.setdefault(node, []).append(int(entry.name))
    return found


def nodes_status(client):
    return next(s for s in client.call("daemon.services")["services"] if s["name"] == "nodes")


def test_a_two_node_jobs_nodes_are_both_sampled_and_reach_the_daemon_by_node(cluster, slurm_host, laptop, host_python):
    job = submit(cluster)
    nodes = wait_for(lambda: sampled(cluster, job["id"]), 90, message="both nodes sampled")
    assert nodes["n1"]["slurm_job_id"] == nodes["n2"]["slurm_job_id"] == job["slurm_id"] != None
    assert all(n["gpus"][7]["name"] == "NVIDIA H200" for n in nodes.values())
    assert (nodes["n1"]["node"], nodes["n2"]["node"]) == NODES  # each line named by the node it was read on
    # The history store: each node's GPUs as series of their own, apart from the host's.
    for node in NODES:
        series = wait_for(lambda: cluster.call("telemetry.history", {"metric": "power_w", "node": node, "since_s": 600})["series"],
                          message="%s's series" % node)
        assert sorted(s["gpu_index"] for s in series) == list(range(8)) and all(s["points"] for s in series)
    assert cluster.call("telemetry.history", {"metric": "power_w", "since_s": 600})["series"] == []  # this host has no GPU
    # A node's host figures reach the store on its flush, like its GPUs' above: waited for the same way.
    host_cpu = wait_for(lambda: (lambda reply: reply if reply["series"] else None)(cluster.call(
        "telemetry.history", {"metric": "cpu_percent", "host": True, "node": "n2", "since_s": 600})), message="n2's host series")
    assert host_cpu["node"] == "n2" and len(host_cpu["series"]) == 1
    # The command line shows the job's nodes.
    shown = run_cli("gpus", "--python", host_python, "gpuhost", "--job", job["id"], home=laptop, check=0).stdout
    assert "node n1  job %s (Slurm %s)" % (job["id"], job["slurm_id"]) in shown and "node n2  job" in shown
    assert shown.count("H200") == 16
    by_node = json.loads(run_cli("gpus", "--python", host_python, "gpuhost", "--node", "n2", "--json", home=laptop, check=0).stdout)
    assert list(by_node["nodes"]) == ["n2"] and len(by_node["nodes"]["n2"]["gpus"]) == 8

    cluster.call("jobs.stop", {"id": job["id"]})
    wait_for(lambda: nodes_now(cluster) == {}, 90, message="the nodes gone with the job")


async def test_the_gpu_pane_shows_both_nodes(cluster):
    job = submit(cluster)
    wait_for(lambda: sampled(cluster, job["id"]), 90, message="both nodes sampled")
    app = GpusApp(client=cluster)
    async with app.run_test(size=(80, 24)) as pilot:
        pane = app.query_one(GpusPane)

        def text(selector):
            return str(app.query_one(selector, Static).render())

        await wait_until(pilot, lambda: "n1 8 GPUs" in text("#gpu-nodes") and "n2 8 GPUs" in text("#gpu-nodes"), message="both nodes named")
        assert "of %s (Slurm %s)" % (job["id"], job["slurm_id"]) in text("#gpu-nodes")
        await pilot.press("n")
        await wait_until(pilot, lambda: text("#gpu-host").startswith("n1:") and len(text("#gpu-rows").splitlines()) == 8, message="n1's GPUs")
        assert "[n1]" in text("#gpu-nodes") and "n node: n1" in text(".pane-status")
        await pilot.press("n")
        await wait_until(pilot, lambda: text("#gpu-host").startswith("n2:"), message="n2's GPUs")
        await pilot.press("n")
        await wait_until(pilot, lambda: pane.node is None and "no GPUs shown: " in text("#gpu-host"), message="this host (no GPUs) again")
        assert "n node: this host" in text(".pane-status")
    cluster.call("jobs.stop", {"id": job["id"]})


def test_an_alert_on_a_node_names_the_node(cluster):
    job = submit(cluster)
    wait_for(lambda: sampled(cluster, job["id"]), 90, message="both nodes sampled")
    # Memory above 0 % for 0 s: fires on every replayed GPU with memory in use, on both nodes.
    cluster.call("telemetry.configure", {"alerts": {"memory_full": {"threshold": 0, "duration_s": 0}}})
    alerts = wait_for(lambda: [a for a in cluster.call("telemetry.alerts")["alerts"] if a.get("node") == "n2"], 30, message="n2's alert")
    alert = alerts[0]
    assert alert["kind"] == "memory_full" and alert["source"] == "n2 GPU %d" % alert["gpu_index"] and alert["job_id"] == job["id"]
    assert alert["message"].startswith("n2 GPU %d: memory " % alert["gpu_index"])
    # n1's sample comes on its own clock: its alert follows n2's, within the same rule.
    assert wait_for(lambda: any(a.get("node") == "n1" for a in cluster.call("telemetry.alerts")["alerts"]), 30, message="n1's alert")
    cluster.call("jobs.stop", {"id": job["id"]})
    # The job ended: its nodes' alerts end with it.
    wait_for(lambda: all(a["ended_at"] for a in cluster.call("telemetry.alerts")["alerts"] if a.get("node")), 90, message="the alerts ended")


def test_a_killed_sampling_step_is_started_again_and_none_is_left_when_the_job_ends(cluster, host_user):
    job = submit(cluster)
    wait_for(lambda: sampled(cluster, job["id"]), 90, message="both nodes sampled")
    running = sampler_processes(host_user)
    assert sorted(running) == list(NODES) and all(len(pids) == 1 for pids in running.values())
    starts = nodes_status(cluster)["detail"]["step_starts"]
    killed_at = time.time()
    os.kill(running["n2"][0], signal.SIGKILL)
    # The step ends (srun --kill-on-bad-exit) and a new one samples both nodes.
    wait_for(lambda: nodes_status(cluster)["detail"]["step_starts"] > starts, 60, message="a new step")

    def sampled_again():
        nodes = sampled(cluster, job["id"])
        return nodes and all(n["time"] > killed_at + 1 for n in nodes.values())

    wait_for(sampled_again, 60, message="both nodes sampled by the new step")
    again = sampler_processes(host_user)
    assert sorted(again) == list(NODES) and again["n2"] != running["n2"] and again["n1"] != running["n1"]

    cluster.call("jobs.stop", {"id": job["id"]})
    wait_for(lambda: nodes_now(cluster) == {}, 90, message="the nodes gone with the job")
    wait_for(lambda: sampler_processes(host_user) == {}, 60, message="no sampling step left")


@pytest.fixture
def site_srun(host_user):
    """`site_srun(body)`: a site's srun in front of Slurm's own on the user's login PATH (a
    directory first on it from ~/.profile), taken away after the test."""
    directory = host_user.home / "site-bin"
    profile = host_user.home / ".profile"
    before = profile.read_text() if profile.exists() else None

    def make(body):
        directory.mkdir(exist_ok=True)
        wrapper = directory / "srun"
        wrapper.write_text("#!/bin/sh\n" + body)
        wrapper.chmod(0o755)
        os.chown(directory, host_user.uid, host_user.gid)
        os.chown(wrapper, host_user.uid, host_user.gid)
        with open(profile, "a") as f:
            f.write('\nexport PATH="$HOME/site-bin:$PATH"\n')

    yield make
    # The Slurm fixture's teardown takes its own line out of ~/.profile after this one.
    if profile.exists() and before is not None:
        profile.write_text(profile.read_text().replace('\nexport PATH="$HOME/site-bin:$PATH"\n', ""))
    if (directory / "srun").exists():
        (directory / "srun").unlink()


def test_an_srun_without_overlap_is_asked_without_it(cluster, site_srun):
    """Slurm before 20.11 does not know --overlap (its steps share the allocation without it)."""
    site_srun('for a in "$@"; do [ "$a" = --overlap ] && { echo "srun: unrecognized option \'--overlap\'" >&2; exit 1; }; done\n'
                             'exec /usr/bin/srun "$@"\n')
    job = submit(cluster)
    wait_for(lambda: sampled(cluster, job["id"]), 90, message="both nodes sampled without --overlap")
    cluster.call("jobs.stop", {"id": job["id"]})


def test_a_site_that_refuses_the_step_says_so_for_each_node(cluster, site_srun):
    site_srun('echo "srun: error: Unable to create step for job $3: steps in an allocation are not allowed on this cluster" >&2\nexit 1\n')
    job = submit(cluster)

    def refused():
        nodes = nodes_now(cluster)
        # Each node says why in one line, with no figure and marked stale (a node's first
        # refusal can come before its record is judged stale: wait for both).
        return sorted(nodes) == list(NODES) and all(
            "not allowed on this cluster" in (n["error"] or "") and n["gpus"] == [] and n["stale"] and "\n" not in n["error"]
            for n in nodes.values()) and nodes

    nodes = wait_for(refused, 90, message="the refusal on both nodes, stale and without figures")
    assert nodes["n1"]["error"].startswith("the sampling step (srun in Slurm job %s) ended with exit 1: srun: error: Unable" % job["slurm_id"])
    # The job itself runs on: only its nodes' figures are missing.
    assert cluster.call("jobs.get", {"id": job["id"]})["process_state"] == "running"
    cluster.call("jobs.stop", {"id": job["id"]})
    wait_for(lambda: nodes_now(cluster) == {}, 90, message="the nodes gone with the job")
