"""A stop that nothing escapes: three chains of processes that respawn themselves detached
(setsid, double fork) with a cleared environment (env -i), each process living a moment, are
stopped six times out of six; held by a cgroup of the job's own where this machine offers one
(as root here), and by the supervisor's scans where not (forced with
SPECDECK_CONTAINMENT=process-group). The job's record says which held it. The real daemon,
real processes; what is left is found by a marker every process of a chain carries in argv."""

import json
import os
import signal
import uuid
from pathlib import Path

import pytest

from remote.core.words import LIVE_STATES as LIVE
from remote.jobs import containment
from tests.helpers.cli import run_cli
from tests.helpers.waits import wait_for
from tui.transport.connection import open_client

RUNS = 6

# Every process of a chain starts the next one (a subshell: double fork; setsid: a session of
# its own; env -i: no SPECDECK_JOB_TOKEN) and exits. TERM is ignored, so KILL has to find them.
CHAIN = """trap '' TERM
marker=$1
link() { (setsid env -i /bin/sh "$0" "$marker" link &) }
if [ "$2" = main ]; then
  link; link; link
  echo ready
  while :; do sleep 1; done
fi
link
"""


def marked(marker):
    """Pids of the processes whose command line holds `marker` (a zombie's is empty)."""
    found = []
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                with open("/proc/%s/cmdline" % name, "rb") as f:
                    if marker.encode() in f.read():
                        found.append(int(name))
            except OSError:
                pass
    return found


def chain_left(marker, looks=20):
    """What is left of the chains: several looks, since one walk of /proc can miss a process
    born while it ran (the very race a stop must not lose)."""
    left = set()
    for _ in range(looks):
        left.update(marked(marker))
    return left


def exterminate(marker):
    """Kill what a failed stop left, until many looks in a row find nothing."""
    quiet = 0
    for _ in range(100000):
        pids = marked(marker)
        quiet = 0 if pids else quiet + 1
        if quiet >= 50:
            return
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass


def expected_holder():
    """What should hold a job on this machine, as the agent decides it, or None for no container."""
    if containment.user_manager_runtime_dir(dict(os.environ)) and containment.shutil.which("systemd-run"):
        return "systemd-scope"
    return "cgroup" if containment.writable_parent() else None


@pytest.mark.parametrize("holder", ["container", "process-group"])
def test_a_respawning_environment_clearing_chain_is_stopped_every_time(agent_home, tmp_path, monkeypatch, holder):
    if holder == "container":
        expected = expected_holder()
        if expected is None:
            pytest.skip("this machine offers no cgroup v2 this user may write, and no systemd user manager")
    else:
        expected = "process-group"
        monkeypatch.setenv("SPECDECK_CONTAINMENT", "process-group")  # the daemon, and so the supervisor, start with it
    script = tmp_path / "chain.sh"
    script.write_text(CHAIN)
    client = open_client("local")
    escaped = []
    try:
        for _ in range(RUNS):
            marker = "chain-" + uuid.uuid4().hex
            job = client.call("jobs.submit", {"argv": ["/bin/sh", str(script), marker, "main"]})
            try:
                wait_for(lambda: "ready" in client.call("jobs.tail", {"id": job["id"]})["text"], 30)
                wait_for(lambda: len(marked(marker)) >= 3, 30)  # the main process and links under way
                assert client.call("jobs.get", {"id": job["id"]})["containment"] == expected
                client.call("jobs.stop", {"id": job["id"], "grace_s": 0.5})
                ended = wait_for(lambda: (lambda j: j["process_state"] not in LIVE and j)(client.call("jobs.get", {"id": job["id"]})), 60)
                assert ended["state"] == "stopped"
                escaped.append(len(chain_left(marker)))
            finally:
                exterminate(marker)
        print("%s: runs whose chains left processes after the stop: %d of %d" % (expected, sum(map(bool, escaped)), RUNS))
        assert escaped == [0] * RUNS
        listed = json.loads(run_cli("jobs", "local", "--json", check=0).stdout)
        assert {job["containment"] for job in listed} == {expected}
        if expected == "cgroup":  # each job's cgroup is removed once it has ended
            for job in listed:
                run = json.loads((agent_home / "jobs" / job["id"] / "run.json").read_text())
                wait_for(lambda: not os.path.exists(run["cgroup"]), 30)
    finally:
        client.close()


def test_the_cgroup_of_a_killed_supervisor_is_swept_and_a_running_jobs_is_not(client, agent_home):
    parent = containment.writable_parent()
    if expected_holder() != "cgroup":
        pytest.skip("jobs are not held by a cgroup of their own on this machine")
    lost, running = (client.call("jobs.submit", {"argv": ["sleep", "300"]}) for _ in range(2))
    runs = {}
    for job in (lost, running):
        wait_for(lambda: client.call("jobs.get", {"id": job["id"]})["state"] == "running", 30)
        runs[job["id"]] = json.loads((agent_home / "jobs" / job["id"] / "run.json").read_text())
    try:
        os.kill(runs[lost["id"]]["supervisor_pid"], signal.SIGKILL)  # as the OOM killer might
        os.kill(runs[lost["id"]]["pid"], signal.SIGKILL)
        wait_for(lambda: client.call("jobs.get", {"id": lost["id"]})["state"] == "lost", 30)
        assert os.path.isdir(runs[lost["id"]]["cgroup"])  # nobody was left to remove it
        # The killed job's process leaves the cgroup once the kernel has reaped it, a moment after
        # the job reads as lost; the sweep leaves a cgroup that still holds a process.
        events = os.path.join(runs[lost["id"]]["cgroup"], "cgroup.events")
        wait_for(lambda: "populated 0" in Path(events).read_text(), 30)
        containment.sweep(parent, older_than_s=0)  # what the next job's start does, for those a minute old
        assert not os.path.exists(runs[lost["id"]]["cgroup"])
        assert os.path.isdir(runs[running["id"]]["cgroup"])
        assert client.call("jobs.get", {"id": running["id"]})["state"] == "running"
    finally:
        client.call("jobs.stop", {"id": running["id"], "grace_s": 0})
