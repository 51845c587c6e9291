"""The host's state held by the laptop's host model as typed, aged records: its jobs (one
record per job, kept while the host says nothing new of it, replaced when it does) and its
alerts (each once, newest first, the Notifications screen's list), against the real local agent."""

import re
import time

from tests.helpers.cli import run_cli
from tests.helpers.pilot import SIZE, connected, screen_text
from tests.helpers.waits import wait_until
from tui.app import SpecdeckApp
from tui.host.alerts import AlertLog
from tui.host.records import AlertRecord, JobRecord
from tui.notify.screen import NotificationsScreen
from tui.screens.host_info import HostInfoScreen


async def test_jobs_and_alerts_are_the_models_aged_records(agent_home):
    app = SpecdeckApp(host="local")
    async with app.run_test(size=SIZE) as pilot:
        await connected(pilot)
        book = app.model.book
        job_id = run_cli("run", "local", "--name", "records", "--", "sleep", "600", check=0).stdout.strip()
        await wait_until(pilot, lambda: job_id in book.jobs and book.job(job_id)["state"] == "running", message="the CLI's job held")
        record = book.jobs[job_id]
        assert isinstance(record, JobRecord) and record.id == job_id and book.job(job_id)["name"] == "records"
        first_age = record.age_s()
        time.sleep(0.3)
        assert book.jobs[job_id] is record and record.age_s() >= first_age + 0.3  # nothing new: the same record, older
        # The Notifications screen opened before the alert: the alert shows in it as it comes.
        await pilot.press("i")
        await wait_until(pilot, lambda: isinstance(app.screen, HostInfoScreen), message="the host screen")
        await pilot.press("n")
        await wait_until(pilot, lambda: isinstance(app.screen, NotificationsScreen), message="the notifications screen")
        await wait_until(pilot, lambda: "none yet" in screen_text(app) or len(app.model.alerts), message="the recent alerts drawn")
        run_cli("stop", "local", job_id, check=0)
        failed = run_cli("run", "local", "--name", "fails", "--", "sh", "-c", "exit 5", check=0).stdout.strip()
        await wait_until(pilot, lambda: book.jobs[job_id] is not record and book.job(job_id)["state"] != "running",
                         message="the stopped job's record replaced")
        await wait_until(pilot, lambda: any(failed in (r.alert.get("message") or "") for r in app.model.alerts.newest()),
                         message="the failed job's alert held")
        alert = next(r for r in app.model.alerts.newest() if failed in r.alert["message"])
        assert isinstance(alert, AlertRecord) and alert.host == "local" and alert.age_s() >= 0
        await wait_until(pilot, lambda: "%s (fails) exited 5" % failed in screen_text(app), message="the alert on the open screen")
        # A reconnect brings notify.list's recent alerts again: each is held once.
        count = len(app.model.alerts)
        app.model.alerts.take([r.alert for r in app.model.alerts.newest()], "local")
        assert len(app.model.alerts) == count


def test_the_alert_log_keeps_each_alert_once_newest_first_and_bounded():
    log = AlertLog(limit=3)
    alerts = [{"id": "a%d" % n, "time": 1000.0 + n, "message": "m%d" % n} for n in range(5)]
    assert [r.alert["id"] for r in log.take(alerts[:2])] == ["a0", "a1"]
    version = log.version
    assert log.take(alerts[:2]) == [] and log.version == version  # seen: nothing new, nothing to redraw
    log.take(alerts[2:] + [{"message": "no time"}, "not an alert"])
    assert [r.alert["id"] for r in log.newest()] == ["a4", "a3", "a2"] and [r.alert["id"] for r in log.newest(1)] == ["a4"]


async def test_a_training_run_is_the_models_record_and_a_silent_run_says_how_long(client, tmp_path, monkeypatch):
    from pathlib import Path

    from textual.widgets import Static

    from tests.helpers.pilot import OnePane
    from tui.host.training import RunRecord
    from tui.training import pane as training_pane
    from tui.training.pane import TrainingPane

    monkeypatch.setattr(training_pane, "QUIET_S", 2.0)
    lines = (Path(__file__).parent / "data" / "speculators-train-80cols.log").read_text().splitlines(keepends=True)
    (tmp_path / "part.log").write_text("".join(lines[:200]))
    app = OnePane(TrainingPane(), client=client)
    async with app.run_test(size=(120, 40)) as pilot:
        pane = app.query_one(TrainingPane)
        job = client.call("training.start", {"argv": ["sh", "-c", "cat %s; sleep 600" % (tmp_path / "part.log")], "name": "goes quiet"})
        summary = lambda p: str(p.query_one("#training-summary", Static).render())  # noqa: E731
        await wait_until(pilot, lambda: pane.selected == job["id"] and "step " in summary(pane) and "step -" not in summary(pane),
                         message="the run's steps")
        record = app.model.training.records[job["id"]]
        assert isinstance(record, RunRecord) and record.curves["steps"] and record.job["name"] == "goes quiet"
        # Alive, printing nothing more: the pane says how long the host has told nothing new.
        await wait_until(pilot, lambda: "nothing new for" in summary(pane), message="the quiet run said so")
        # A Training pane made again (the host shown again) is a view of the same record: its step at once.
        step = re.search(r"step \S+ +epoch \S+", summary(pane)).group(0)
        await pane.remove()
        again = TrainingPane()
        await app.mount(again)
        await wait_until(pilot, lambda: again.selected == job["id"] and step in summary(again), message="the run shown again")
        assert app.model.training.records[job["id"]] is record
        client.call("jobs.stop", {"id": job["id"]})
