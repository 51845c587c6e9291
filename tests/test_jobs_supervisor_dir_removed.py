"""A supervisor whose job directory was removed under it (a user's rm -rf of the job) lets its
job run to the end, then says so in one line of the daemon's log and exits, instead of
retrying its record for as long as it lives. The real daemon, a real supervisor."""

import json
import shutil

from remote.jobs.processes import process_start_ticks
from tests.helpers.waits import wait_for


def test_a_supervisor_whose_job_directory_was_removed_exits_once_its_job_ends(client, agent_home, tmp_path):
    go = tmp_path / "go"
    job = client.call("jobs.submit", {"argv": ["bash", "-c", "echo ready; while [ ! -e %s ]; do sleep 0.05; done; exit 4" % go]})
    job_dir = agent_home / "jobs" / job["id"]
    wait_for(lambda: "ready" in client.call("jobs.tail", {"id": job["id"]})["text"], 30)
    run = json.loads((job_dir / "run.json").read_text())
    supervisor = (run["supervisor_pid"], run["supervisor_start_ticks"])
    main = (run["pid"], run["start_ticks"])
    shutil.rmtree(job_dir)
    # The job itself is not cut short by its directory going: it ends when it would have.
    assert process_start_ticks(main[0]) == main[1] and process_start_ticks(supervisor[0]) == supervisor[1]
    go.touch()
    wait_for(lambda: process_start_ticks(main[0]) != main[1], 30)
    wait_for(lambda: process_start_ticks(supervisor[0]) != supervisor[1], 30)
    lines = [line for line in (agent_home / "daemon.log").read_text().splitlines() if "specdeck.supervisor" in line]
    assert len(lines) == 1, lines
    assert job["id"] in lines[0] and "removed" in lines[0] and "exit code 4" in lines[0]
    assert not job_dir.exists()  # nothing written back where the user removed it
