"""A job that redraws a progress line with \\r (tqdm, every training script) is visible as it
changes, not only once its line ends: in the stream, in the console's log view, in `logs -f`."""

import subprocess
import sys
import threading
import time

from tests.helpers.cli import REPO_ROOT
from tests.helpers.pilot import SIZE, connected
from tests.helpers.waits import wait_for, wait_until
from tui.app import SpecdeckApp
from tui.transport.connection import open_client
from tui.jobs.pane import JobsTable
from tui.widgets.log_view import LogFeed, LogView

# A bar redrawn 60 times over ~12 s, its line ended only at the very end.
PROGRESS = ("import sys, time\nprint('starting', flush=True)\nfor i in range(60):\n"
            "    sys.stdout.write('\\r%3d%% |' % (i * 100 // 59) + '#' * (i // 3)); sys.stdout.flush(); time.sleep(0.2)\n"
            "print(' done', flush=True)\n")


def test_the_stream_carries_the_unfinished_line_as_it_is_redrawn(agent_home):
    client = open_client("local")
    try:
        job = client.call("jobs.submit", {"argv": [sys.executable, "-c", PROGRESS]})
        texts, ended = [], threading.Event()
        client.subscribe("jobs.follow", {"id": job["id"], "after": 0}, lambda data, seq: texts.append(data["text"]), lambda data: ended.set())
        wait_for(lambda: "\r 16%" in "".join(texts), 60, interval_s=0.05, message=lambda: "a redraw of the bar: %r" % texts)
        seen_at = time.time()
        assert ended.wait(60)
        ended_at = client.call("jobs.get", {"id": job["id"]})["ended_at"]
        assert seen_at < ended_at - 3, "the bar's redraws came only with the end of the job"
        feed = LogFeed(0)
        lines = feed.lines("".join(texts)) + feed.finish()
        assert lines == ["starting", "100% |################### done"]
    finally:
        client.close()


def test_the_log_view_shows_the_bar_as_it_moves(agent_home):
    app = SpecdeckApp(host="local")

    async def run():
        async with app.run_test(size=SIZE) as pilot:
            await connected(pilot)
            job = app.client.call("jobs.submit", {"argv": [sys.executable, "-c", PROGRESS], "name": "bar"})
            await wait_until(pilot, lambda: job["id"] in app.query_one("JobsPane").jobs, message="the job")
            app.query_one(JobsTable).focus()
            await pilot.press("enter")
            log = app.query_one(LogView)
            await wait_until(pilot, lambda: log.subject == job["id"] and log.lines[-1:] == ["starting"], message="the first line")
            first = await wait_until(pilot, lambda: log.partial.startswith(" ") and "%" in log.partial and log.partial, message="the bar")
            later = await wait_until(pilot, lambda: log.partial and log.partial != first and log.partial, message="the bar moving")
            assert "\r" not in later and int(later.split("%")[0]) > int(first.split("%")[0])
            assert log.lines[-1] == "starting", "the unfinished line must not be taken for a whole one"
            await wait_until(pilot, lambda: log.lines[-1:] == ["100% |################### done"], message="the line ended")
            assert log.partial == ""

    import asyncio

    asyncio.run(run())


def test_logs_follow_prints_the_bar_before_the_line_ends(agent_home):
    client = open_client("local")
    try:
        job = client.call("jobs.submit", {"argv": [sys.executable, "-c", PROGRESS]})
    finally:
        client.close()
    cli = subprocess.Popen([sys.executable, "-m", "tui.cli", "logs", "local", job["id"], "--follow"], cwd=str(REPO_ROOT),
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    seen = b""
    deadline = time.monotonic() + 60
    try:
        while b"\r 33%" not in seen:
            assert time.monotonic() < deadline and cli.poll() is None, "logs -f showed no redraw: %r" % seen
            seen += cli.stdout.read1(4096)
        seen_at = time.time()
    finally:
        rest, _ = cli.communicate(timeout=60)
    assert (seen + rest).endswith(b"|################### done\n") and cli.returncode == 0
    client = open_client("local")
    try:
        ended_at = client.call("jobs.get", {"id": job["id"]})["ended_at"]
    finally:
        client.close()
    assert seen_at < ended_at - 3, "logs -f printed the bar only once the job had ended"
