"""`specdeck jobs` says a run stands still while its stall alert is open (issue 40, item 9):
`training, stalled N s`, and `training` again once it steps; a real trainer on the local agent
that prints speculators' step lines, hangs with its process alive, then goes on."""

import re
import sys
import textwrap

from tests.helpers.cli import run_cli
from tests.helpers.waits import wait_for
from tests.helpers.training import STEP_LINE

TRAINER = """\
    import os, sys, time
    n = 0
    while True:
        if n == 15:
            while not os.path.exists(sys.argv[1]):  # hung until the test lets it go
                time.sleep(0.05)
        print(%r %% (1.0 / (n + 1), n), flush=True)
        time.sleep(0.2)
        n += 1
""" % STEP_LINE


def row_of(job_id):
    out = run_cli("jobs", "local", check=0).stdout
    return next(line for line in out.splitlines() if line.split()[:1] == [job_id])


def test_jobs_says_a_run_is_stalled_while_its_stall_alert_is_open(client, tmp_path):
    script, go = tmp_path / "trainer.py", tmp_path / "go"
    script.write_text(textwrap.dedent(TRAINER))
    job_id = run_cli("train", "local", "--name", "eagle3 hang", "--stall-after", "3s", "--",
                     sys.executable, str(script), str(go), check=0).stdout.strip()
    try:
        wait_for(lambda: "training" in row_of(job_id), message="the run training")
        assert "stalled" not in row_of(job_id)
        wait_for(lambda: any(a["kind"] == "training_stalled" and a["job_id"] == job_id for a in client.call("notify.list")["recent"]),
                 message="the stall's alert")
        assert re.search(r"\btraining, stalled \d+ s\b", row_of(job_id)), row_of(job_id)
        assert client.call("jobs.get", {"id": job_id})["stalled_since"] > 0
        go.write_text("")
        wait_for(lambda: any(a["kind"] == "resumed" and a["job_id"] == job_id for a in client.call("notify.list")["recent"]),
                 message="the run's steps again")
        assert "stalled" not in row_of(job_id) and "training" in row_of(job_id)
    finally:
        client.call("jobs.stop", {"id": job_id, "grace_s": 0})
