"""The console learns about jobs from the host's job events, not by polling: while it sits
idle it sends no request but pings, a job started elsewhere appears in its Jobs and Downloads
panes (even after the host's job watcher met a job it could not read), and a hidden pane's
log stream is paused and resumed from where it stopped."""

import json
import os
import time

from tests.helpers.pilot import SIZE, connected, job_rows, notifications, pane_key
from tests.helpers.waits import wait_for, wait_until
from tui.app import SpecdeckApp
from tui.jobs.pane import JobsTable
from tui.widgets.log_view import LogView


def record_calls(client):
    """Wrap the client's call() to keep the methods it sends (pings are not calls)."""
    sent = []
    original = client.call

    def call(method, params=None, timeout=60.0):
        sent.append(method)
        return original(method, params, timeout)

    client.call = call
    return sent


async def test_idle_console_sends_nothing_and_sees_jobs_started_elsewhere(agent_home):
    from tui.transport.connection import open_client

    other = open_client("local")  # another console, or the CLI
    app = SpecdeckApp(host="local")
    try:
        async with app.run_test(size=SIZE) as pilot:
            await connected(pilot)
            await wait_until(pilot, lambda: app.book.loaded, message="the first snapshot of jobs")
            sent = record_calls(app.client)
            await pilot.pause(3.0)
            assert sent == [], "an idle console sent %r" % sent

            job = other.call("jobs.submit", {"argv": ["sh", "-c", "sleep 1; exit 5"], "name": "from elsewhere"})
            await wait_until(pilot, lambda: job_rows(app).get(job["id"], {}).get("exit") == "5", message="its end in the table")
            assert job_rows(app)[job["id"]]["state"] == "failed"
            assert "jobs.list" not in sent and "jobs.get" not in sent, sent
    finally:
        other.close()


def job_watcher(client):
    return next(s for s in client.call("daemon.info")["services"] if s["name"] == "job-events")


async def test_a_job_started_elsewhere_appears_after_the_watcher_met_an_unreadable_job(agent_home):
    """With the console open over 30 jobs, a job directory the watcher cannot describe (its
    job.json hand-edited: a date where a number belongs) made the watcher's step fail; the
    restart that followed took every job that had appeared meanwhile in as its new baseline,
    never announced, so the open console never listed them (a restarted console did, from
    its snapshot). The watcher now names the unreadable job and announces the others."""
    from tui.transport.connection import open_client

    other = open_client("local")  # the CLI, or another console
    app = SpecdeckApp(host="local")
    started = None
    try:
        for number in range(30):
            other.call("jobs.submit", {"argv": ["true"], "name": "earlier job %d" % number})
        async with app.run_test(size=SIZE) as pilot:
            await connected(pilot)
            await wait_until(pilot, lambda: len(job_rows(app)) == 30, message="the 30 jobs in the table")

            damaged = os.path.join(other.call("daemon.info")["state_dir"], "jobs", "j31")
            os.mkdir(damaged, 0o700)
            with open(os.path.join(damaged, "job.json"), "w") as f:
                json.dump({"id": "j31", "argv": ["true"], "submitted_at": "yesterday"}, f)

            def watcher_met_it():
                watcher = job_watcher(other)
                return watcher["state"] == "retrying" or "j31" in (watcher["detail"].get("unreadable") or {})

            await wait_until(pilot, watcher_met_it, message="the job watcher to meet the unreadable job")
            started = other.call("jobs.submit", {"argv": ["sleep", "600"], "name": "started from the CLI"})
            # Running, so that nothing about it changes once the watcher has looked at it again.
            await wait_until(pilot, lambda: other.call("jobs.get", {"id": started["id"]})["process_state"] == "running",
                             message="the new job running")
            os.unlink(os.path.join(damaged, "job.json"))
            os.rmdir(damaged)
            removed_at = time.time()
            await wait_until(pilot, lambda: job_watcher(other)["state"] == "running"
                             and (job_watcher(other)["last_ok_at"] or 0) > removed_at, message="the watcher healthy again")

            # Events come in order: once a job submitted after all this is listed, the one
            # started before it would have been too, had it been announced.
            marker = other.call("jobs.submit", {"argv": ["true"], "name": "marker"})
            await wait_until(pilot, lambda: marker["id"] in job_rows(app), message="the marker job in the table")
            rows = job_rows(app)
            assert started["id"] in rows, "the job started from the CLI is missing from the open console"
            assert rows[started["id"]]["name"] == "started from the CLI" and rows[started["id"]]["state"] == "running"
            assert "j31" not in rows
    finally:
        if started is not None:
            other.call("jobs.stop", {"id": started["id"], "grace_s": 0})
        other.close()


async def test_a_hidden_pane_pauses_its_log_and_resumes_it_without_loss(agent_home):
    app = SpecdeckApp(host="local")
    async with app.run_test(size=SIZE) as pilot:
        await connected(pilot)
        job = app.client.call("jobs.submit", {"argv": ["bash", "-c", "for i in $(seq 1 400); do echo line $i; sleep 0.01; done"]})
        await wait_until(pilot, lambda: job["id"] in job_rows(app), message="the job in the table")
        app.query_one(JobsTable).focus()
        await pilot.press("enter")
        log = app.query_one(LogView)
        await wait_until(pilot, lambda: log.subject == job["id"] and len(log.lines) >= 5, message="the first lines")

        sent = record_calls(app.client)
        await pilot.press(pane_key(app, "Tensors"))  # the Jobs pane is hidden now
        await wait_until(pilot, lambda: "stream.cancel" in sent, message="the log stream paused")
        lines_when_hidden = len(log.lines)
        time.sleep(1.0)  # the job writes on meanwhile
        app.client.call("ping")  # asked after: every frame the host sent before its answer is in
        await pilot.pause()
        assert len(log.lines) == lines_when_hidden, "a hidden pane kept receiving its log"
        hidden_calls = [m for m in sent if m not in ("stream.cancel", "ping")]
        assert hidden_calls == [], "hidden panes sent %r" % hidden_calls

        await pilot.press(pane_key(app, "Jobs"))
        await wait_until(pilot, lambda: "line 400" in log.lines, message="the rest of the log after coming back")
        numbers = [int(line.split()[1]) for line in log.lines if line.startswith("line ")]
        assert numbers == list(range(numbers[0], 401)), "lines lost or repeated across the pause"
        assert "jobs.follow" in sent  # resumed from where it stopped, not re-read from the start


async def test_a_fast_log_is_painted_ten_times_a_second_and_whole(agent_home):
    """A job printing thousands of lines a second is shown in batches at most every 0.1 s (each
    batch a repaint the keys would wait behind), and every line arrives, in order."""
    app = SpecdeckApp(host="local")
    async with app.run_test(size=SIZE) as pilot:
        await connected(pilot)
        script = "import time\nfor i in range(1, 40001):\n    print('line', i, flush=True)\n    i % 100 or time.sleep(0.01)\n"
        job = app.client.call("jobs.submit", {"argv": ["python3", "-c", script]})
        await wait_until(pilot, lambda: job["id"] in job_rows(app), message="the job in the table")
        app.query_one(JobsTable).focus()
        await pilot.press("enter")
        log = app.query_one(LogView)
        # Counted from when the log is open: its first lines come from a tail request, not the stream.
        await wait_until(pilot, lambda: log.subject == job["id"] and any(line.startswith("line ") for line in log.lines),
                         message="the log open")
        batches = []
        append = log.append

        def counted(lines, width=None, partial=None):
            if lines:
                batches.append(time.monotonic())
            return append(lines, width, partial=partial)

        log.append = counted
        await wait_until(pilot, lambda: "line 40000" in log.lines, message="the last line")
        # The last batch may follow the one before at once: the stream's end delivers what is left.
        gaps = [b - a for a, b in zip(batches, batches[1:-1])]
        assert len(gaps) >= 2 and min(gaps) >= 0.09, "batches %.3f s apart" % min(gaps)
        numbers = [int(line.split()[1]) for line in log.lines if line.startswith("line ")]
        assert numbers == list(range(numbers[0], 40001)), "lines lost or repeated"


async def test_a_hand_edited_job_never_keeps_the_others_from_the_console(agent_home):
    """A job directory hand-edited into something that is not a job (a time that is not a
    number) is skipped by the host's listing: the console lists the other jobs at once, and
    the damaged one is named in the job watcher's status instead of ending the job events."""
    from tui.transport.connection import open_client

    other = open_client("local")
    try:
        job = other.call("jobs.submit", {"argv": ["true"], "name": "listed beside a damaged one"})
        damaged = os.path.join(other.call("daemon.info")["state_dir"], "jobs", "j2")
        os.mkdir(damaged, 0o700)
        with open(os.path.join(damaged, "job.json"), "w") as f:
            json.dump({"id": "j2", "argv": ["true"], "submitted_at": "yesterday"}, f)
        assert [j["id"] for j in other.call("jobs.list")["jobs"]] == [job["id"]]
        app = SpecdeckApp(host="local")
        async with app.run_test(size=SIZE) as pilot:
            await connected(pilot)
            await wait_until(pilot, lambda: job["id"] in job_rows(app), message="the readable job listed")
            assert app.book.loaded and "j2" not in job_rows(app)
            assert not any(title == "job events" for title, _, _ in notifications(app))
        said = wait_for(lambda: (job_watcher(other)["detail"].get("unreadable") or {}).get("j2"),
                        message="the job watcher to name j2 as unreadable")
        assert "TypeError" in said, said
    finally:
        other.close()
