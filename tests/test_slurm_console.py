"""The Jobs pane over a real Slurm (tests/slurm_fixtures.py) and a real sshd (Pilot): a job of
ours submitted through Slurm shows its Slurm id beside ours, the user's own sbatch job is listed
marked as not ours, and stopping that one asks a question that says specdeck did not start it,
then cancels it through Slurm."""

import json

from tests.helpers.cli import run_cli
from tests.helpers.pilot import job_rows, screen_text
from tests.helpers.waits import wait_until
from tui.app import SpecdeckApp
from tui.jobs.table import JobsTable
from tui.screens.confirm import ConfirmScreen

SIZE = (160, 40)


async def test_the_jobs_pane_shows_slurm_ids_and_asks_before_cancelling_a_job_specdeck_did_not_start(
        slurm_host, laptop, host_user, host_python):
    ours = json.loads(run_cli("run", "gpuhost", "--python", host_python, "--slurm", "--json", "--", "sleep", "1000",
                              home=laptop, check=0).stdout)
    out = host_user.home / "by-hand.out"
    slurm_id = slurm_host.run(["sbatch", "--parsable", "-o", str(out), "--job-name", "by-hand", "--wrap", "exec sleep 1000"],
                              user=host_user).stdout.strip()
    app = SpecdeckApp(host="gpuhost", python=host_python)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("2")
        foreign = "s" + slurm_id
        rows = await wait_until(pilot, lambda: ours["id"] in job_rows(app) and foreign in job_rows(app) and job_rows(app),
                                timeout_s=60, message="our Slurm job and the user's own in the Jobs pane")
        assert any("(slurm %s)" % ours["slurm_id"] in text for text in rows[ours["id"]].values())
        assert any("(not ours)" in text for text in rows[foreign].values())
        table = app.query_one(JobsTable)
        table.move_cursor(row=table.get_row_index(foreign))
        await pilot.press("s")
        await wait_until(pilot, lambda: isinstance(app.screen, ConfirmScreen), message="the question")
        question = screen_text(app)
        assert "Cancel Slurm job %s" % slurm_id in question and "specdeck did not start it" in question
        await pilot.press("y")
        await wait_until(pilot, lambda: slurm_host.job(slurm_id).get("JobState") in ("CANCELLED", "FAILED", None),
                         timeout_s=60, message="the user's job cancelled through Slurm")
        assert slurm_host.job(ours["slurm_id"])["JobState"] in ("PENDING", "RUNNING")  # ours untouched
