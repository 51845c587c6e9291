"""The host's job watcher (remote/jobs/watcher.py) under failure, on a real job store and
a real service runner: every job that appears after the baseline is announced on the `jobs`
topic, even when a scan failed in between and the runner restarted the watcher."""

import os
import time

from remote.core import services
from remote.jobs.watcher import JobWatcher
from remote.jobs.store import JobStore
from remote.core.services import ServiceRunner
from remote.core.streams import Topic
from tests.helpers.waits import wait_for

def announced(topic):
    records, _, _ = topic.after(topic.last_seq - 4096)
    return [(record["event"], record["id"]) for record in records]


def test_a_job_that_appears_while_the_watcher_fails_is_announced_after_its_restart(agent_home, tmp_path, monkeypatch):
    monkeypatch.setattr(services, "BACKOFF_S", (0.05, 0.1))
    root = tmp_path / "jobs"
    root.mkdir()
    store = JobStore(str(root))
    first = store.submit(["true"])
    wait_for(lambda: store.describe(first["id"])["state"] == "succeeded", message="the first job to end")

    topic = Topic("jobs")
    runner = ServiceRunner(JobWatcher(store, topic))
    runner.start()
    try:
        wait_for(lambda: runner.status()["last_ok_at"], message="the baseline scan")
        # The job directory is away (a file system remounted, say): every scan fails, and the
        # runner restarts the watcher, until it is back, with a job that came meanwhile.
        away = tmp_path / "jobs-away"
        os.rename(root, away)
        wait_for(lambda: runner.status()["restarts"] >= 1, message="a failed scan and a restart")
        meanwhile = JobStore(str(away)).submit(["true"], name="meanwhile")
        wait_for(lambda: JobStore(str(away)).describe(meanwhile["id"])["state"] == "succeeded", message="the job meanwhile to end")
        os.rename(away, root)
        back_at = time.time()
        wait_for(lambda: runner.status()["state"] == "running" and runner.status()["last_ok_at"] > back_at, message="the watcher healthy again")

        assert ("submitted", meanwhile["id"]) in announced(topic), announced(topic)
        assert ("ended", meanwhile["id"]) in announced(topic)
        assert ("submitted", first["id"]) not in announced(topic), "a job of the baseline announced again"
    finally:
        runner.stop()


def test_an_unreadable_job_is_named_in_the_status_and_the_others_go_on(agent_home, tmp_path):
    root = tmp_path / "jobs"
    root.mkdir()
    store = JobStore(str(root))
    topic = Topic("jobs")
    runner = ServiceRunner(JobWatcher(store, topic))
    runner.start()
    try:
        wait_for(lambda: runner.status()["last_ok_at"], message="the baseline scan")
        damaged = root / "j1"
        damaged.mkdir()
        (damaged / "job.json").write_text('{"id": "j1", "argv": ["true"], "submitted_at": "yesterday"}')
        wait_for(lambda: "j1" in runner.status()["detail"].get("unreadable", {}), message="the status to name the unreadable job")
        assert "TypeError" in runner.status()["detail"]["unreadable"]["j1"]
        job = store.submit(["true"], name="after it")
        wait_for(lambda: ("ended", job["id"]) in announced(topic), message="the next job announced")
        assert runner.status()["state"] == "running" and runner.status()["failures"] == 0
        assert ("submitted", "j1") not in announced(topic)

        # Repaired by hand: it is a job like the others from then on.
        (damaged / "job.json").write_text('{"id": "j1", "argv": ["true"], "submitted_at": %r}' % (time.time() - 3600))
        wait_for(lambda: ("submitted", "j1") in announced(topic), message="the repaired job announced")
        assert "unreadable" not in runner.status()["detail"]
    finally:
        runner.stop()
