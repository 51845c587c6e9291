"""The console learns about jobs from the host's job events, not by polling: while it sits
idle it sends no request but pings, a job started elsewhere appears in its Jobs and Downloads
panes, and a hidden pane's log stream is paused and resumed from where it stopped."""

import time

from tests.test_app_jobs import SIZE, connected, job_rows, pane_key, wait_until
from tui.app import SpecdeckApp
from tui.panes.jobs import JobsTable
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
    from tui.connection import open_client

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
        time.sleep(1.0)
        await pilot.pause(0.5)
        assert len(log.lines) == lines_when_hidden, "a hidden pane kept receiving its log"
        hidden_calls = [m for m in sent if m != "stream.cancel"]
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

        def counted(lines, width=None, force=False):
            if lines:
                batches.append(time.monotonic())
            return append(lines, width, force)

        log.append = counted
        await wait_until(pilot, lambda: "line 40000" in log.lines, message="the last line")
        # The last batch may follow the one before at once: the stream's end delivers what is left.
        gaps = [b - a for a, b in zip(batches, batches[1:-1])]
        assert len(gaps) >= 2 and min(gaps) >= 0.09, "batches %.3f s apart" % min(gaps)
        numbers = [int(line.split()[1]) for line in log.lines if line.startswith("line ")]
        assert numbers == list(range(numbers[0], 40001)), "lines lost or repeated"
