"""The console driven by keys (Pilot) against a real agent: the header, the Jobs pane, the dialogs.

Every test runs the agent on this machine (`local`, SPECDECK_HOME in tmp_path, the daemon
stopped afterwards by the agent_home fixture), except the host-key tests, which go
through a real sshd. Waits are bounds on a hang, not speed assertions.
"""

import re

import pytest

from tests.helpers.cli import use_home
from tests.helpers.pilot import (
    SIZE, connected, header_text, job_rows, notifications, screen_text, start_job_from_dialog, type_text,
)
from tests.helpers.waits import wait_until
from tui.app import SpecdeckApp
from tui.jobs.new_job import NewJobScreen
from tui.jobs.pane import JobsTable
from tui.screens.confirm import ConfirmScreen
from tui.screens.help import HelpScreen
from tui.screens.host_key import HostKeyScreen
from tui.screens.prompt import PromptScreen
from tui.widgets.header import describe_state
from tui.widgets.log_view import LogView


def numbered(lines, prefix="line "):
    return [int(line[len(prefix):]) for line in lines if line.startswith(prefix)]


async def test_job_from_dialog_runs_streams_its_log_in_order_and_stops(agent_home):
    app = SpecdeckApp(host="local")
    async with app.run_test(size=SIZE) as pilot:
        await connected(pilot)
        await wait_until(pilot, lambda: "● connected" in screen_text(app), message='the screen to show it')
        await start_job_from_dialog(
            pilot, "bash -c 'for i in $(seq 1 100000); do echo line $i; sleep 0.02; done'", name="numbered lines")
        rows = await wait_until(pilot, lambda: job_rows(app).get("j1", {}).get("state") == "running" and job_rows(app),
                                message="j1 running in the table")
        assert rows["j1"]["name"] == "numbered lines" and rows["j1"]["exit"] == "-"

        # Open its log with enter on its row; lines keep arriving, in order, none twice.
        app.query_one(JobsTable).focus()
        await pilot.press("enter")
        log = app.query_one(LogView)
        await wait_until(pilot, lambda: log.subject == "j1" and len(numbered(log.lines)) >= 40, message="40 log lines")
        first = numbered(log.lines)
        await wait_until(pilot, lambda: len(numbered(log.lines)) >= len(first) + 20, message="more lines while following")
        seen = numbered(log.lines)
        assert seen == list(range(1, len(seen) + 1))
        await wait_until(pilot, lambda: "log j1 (following)" in screen_text(app), message='the screen to show it')

        # s asks first; y stops it: TERM to the job, the table and the log title say so.
        app.query_one(JobsTable).focus()
        await pilot.press("s")
        await wait_until(pilot, lambda: isinstance(app.screen, ConfirmScreen), message="the stop question")
        assert "Stop j1 (numbered lines)?" in screen_text(app)
        await pilot.press("y")
        await wait_until(pilot, lambda: job_rows(app)["j1"]["state"] == "stopped", message="j1 stopped")
        assert job_rows(app)["j1"]["exit"] == "sig 15"
        await wait_until(pilot, lambda: "ended: stopped" in (log.border_title or ""), message="the log to end")
        final = numbered(log.lines)
        assert final == list(range(1, len(final) + 1)) and len(final) >= len(seen)
        assert "connected" in header_text(app)


async def test_unknown_command_is_one_line_in_the_dialog_and_no_job(agent_home):
    app = SpecdeckApp(host="local")
    async with app.run_test(size=SIZE) as pilot:
        await connected(pilot)
        await pilot.press("n")
        await wait_until(pilot, lambda: isinstance(app.screen, NewJobScreen), message="the new-job dialog")
        await type_text(pilot, "no-such-command-anywhere --flag")
        await pilot.press("enter")
        # The host's refusal stays in the dialog, with what was typed, to put right.
        error = app.screen.query_one("#new-job-error")
        message = await wait_until(pilot, lambda: "command not found" in str(error.render()) and str(error.render()),
                                   message="the agent's error")
        assert "\n" not in message and "no-such-command-anywhere" in message and "Traceback" not in message
        assert isinstance(app.screen, NewJobScreen) and app.screen.query_one("#command").value == "no-such-command-anywhere --flag"
        await pilot.press("escape")
        await pilot.pause(1.5)  # a refresh of the table or two
        assert job_rows(app) == {}


async def test_new_job_dialog_refuses_an_unfinished_quote(agent_home):
    app = SpecdeckApp(host="local")
    async with app.run_test(size=SIZE) as pilot:
        await connected(pilot)
        await pilot.press("n")
        await wait_until(pilot, lambda: isinstance(app.screen, NewJobScreen), message="the new-job dialog")
        await type_text(pilot, "echo 'unfinished")
        await pilot.press("enter")
        await pilot.pause(0.2)
        assert isinstance(app.screen, NewJobScreen)
        assert "cannot split the command line" in screen_text(app)
        await pilot.press("escape")
        await wait_until(pilot, lambda: not isinstance(app.screen, NewJobScreen), message="escape to cancel")
        await pilot.pause(1.5)
        assert job_rows(app) == {}


async def test_long_log_shows_its_tail_searches_and_saves_whole(agent_home, tmp_path):
    count = 300_000  # about 2 MB: the view gets the last 256 KiB, the saved file all of it
    app = SpecdeckApp(host="local")
    async with app.run_test(size=SIZE) as pilot:
        await connected(pilot)
        job = app.client.call("jobs.submit", {"argv": ["seq", "1", str(count)], "name": "many lines"})
        await wait_until(pilot, lambda: job_rows(app).get(job["id"], {}).get("state") == "succeeded", message="seq to finish")
        app.query_one(JobsTable).focus()
        await pilot.press("enter")
        log = app.query_one(LogView)
        await wait_until(pilot, lambda: "ended: succeeded, exit 0" in (log.border_title or ""), message="the log to open")
        assert log.lines[0].startswith("… ") and "earlier in the log" in log.lines[0]
        shown = [int(line) for line in log.lines[1:]]
        assert shown[-1] == count and shown == list(range(shown[0], count + 1))
        assert 20_000 < len(shown) < 60_000  # 256 KiB of 7-byte lines, from a line start

        # / finds a line, ] goes on to the next match (here: wraps to the same one).
        await pilot.press("slash")
        await type_text(pilot, "299990")
        await pilot.press("enter")
        await wait_until(pilot, lambda: "/299990: line" in (log.border_title or ""), message="the match")
        match_line = log.match_line
        assert log.lines[match_line] == "299990"
        assert log.scroll_y <= match_line < log.scroll_y + log.size.height
        await pilot.press("right_square_bracket")
        assert log.match_line == match_line and "wrapped" in log.border_title
        await pilot.press("escape")
        assert log.pattern is None

        # w asks where to, then writes the whole log, read in 1 MiB windows.
        target = tmp_path / "saved" / "many.log"
        target.parent.mkdir()
        await pilot.press("w")
        await wait_until(pilot, lambda: isinstance(app.screen, PromptScreen), message="the save question")
        assert "./%s.log" % job["id"] in screen_text(app)
        await pilot.press("ctrl+u")  # clear the default path
        await type_text(pilot, str(target))
        await pilot.press("enter")
        await wait_until(pilot, lambda: any("saved the log" in n[1] for n in notifications(app)), message="the save")
        assert target.read_text() == "".join("%d\n" % i for i in range(1, count + 1))


async def test_help_lists_the_keys(agent_home):
    app = SpecdeckApp(host="local")
    async with app.run_test(size=(SIZE[0], 60)) as pilot:  # every section in view at once (it scrolls on a smaller screen)
        await pilot.press("question_mark")
        await wait_until(pilot, lambda: isinstance(app.screen, HelpScreen), message="the help screen")
        text = screen_text(app)
        for key, what in (("q", "quit"), ("n", "start a new job"), ("s", "stop the selected job"), ("/", "search the log"),
                          ("f", "follow the log"), ("w", "save the whole log"), ("1-%d" % len(app.pane_classes), "panes"), ("⏎", "open the job's log")):
            assert re.search(r"(?<!\w)%s\s+%s" % (re.escape(key), re.escape(what)), text), (key, what)
        await pilot.press("escape")
        await wait_until(pilot, lambda: not isinstance(app.screen, HelpScreen), message="help to close")


async def test_panes_are_a_key_away(agent_home):
    app = SpecdeckApp(host="local")
    async with app.run_test(size=SIZE) as pilot:
        titles = [pane.PANE_TITLE for pane in app.pane_classes]
        assert titles[0] == "GPUs" and {"Jobs", "Downloads", "Tensors", "Speculation"} <= set(titles)
        from textual.widgets import TabbedContent

        tabs = app.query_one(TabbedContent)
        keys = [(str(number), title.lower()) for number, title in enumerate(titles, 1)]
        for key, pane in keys[1:] + keys[:2]:
            await pilot.press(key)
            await wait_until(pilot, lambda: tabs.active == pane, message="pane %s after key %s" % (pane, key))
            assert "%s %s" % (key, titles[int(key) - 1]) in screen_text(app)  # its tab, numbered
        assert app.focused is app.query_one(JobsTable)


async def test_unreachable_host_says_failed_in_the_header_without_a_traceback(tmp_path, monkeypatch):
    home = tmp_path / "home"
    (home / ".ssh").mkdir(parents=True)
    use_home(monkeypatch, home)
    app = SpecdeckApp(host="someone@no-such-host.invalid")
    async with app.run_test(size=SIZE) as pilot:
        await wait_until(pilot, lambda: app.connection_state == "failed", message="the failure")
        assert header_text(app).startswith("✕ failed: cannot resolve host")
        assert any(n[2] == "error" and "no-such-host.invalid" in n[1] for n in notifications(app))
        assert app.client is None
        # r tries again (and fails again, with a second notification).
        await pilot.press("r")
        await wait_until(pilot, lambda: len([n for n in notifications(app) if n[2] == "error"]) == 2, message="the second try")
        assert app.connection_state == "failed"
        await pilot.press("question_mark")  # still answering keys
        await wait_until(pilot, lambda: isinstance(app.screen, HelpScreen), message="the help screen")


def test_header_lines_for_each_state():
    now = 1000.0
    assert describe_state("connecting", {}) == "○ connecting…"
    assert describe_state("connected", {}, rtt_s=0.0114) == "● connected  rtt 11 ms"
    assert describe_state("connected", {}) == "● connected"
    detail = {"error": "no answer from the host for 4 s", "attempt": 3, "next_try_at": now + 1.8}
    assert describe_state("reconnecting", detail, now=now) == "○ reconnecting, next try in 2 s, attempt 3 (no answer from the host for 4 s)"
    assert describe_state("reconnecting", dict(detail, next_try_at=now - 1, attempt=1), now=now) == (
        "○ reconnecting, trying again now (no answer from the host for 4 s)")
    assert describe_state("failed", {"error": "cannot resolve host 'x'"}) == "✕ failed: cannot resolve host 'x'"


# ---------------------------------------------------------------------- first contact over SSH


@pytest.mark.parametrize("accept", [True, False])
async def test_unknown_host_key_is_asked_with_its_fingerprint(sshd, host_python, tmp_path, monkeypatch, accept):
    home = sshd.client_home(tmp_path, known_hosts=False)
    use_home(monkeypatch, home)
    monkeypatch.delenv("SSH_AUTH_SOCK", raising=False)
    app = SpecdeckApp(host="gpuhost", python=host_python)
    async with app.run_test(size=SIZE) as pilot:
        await wait_until(pilot, lambda: isinstance(app.screen, HostKeyScreen), message="the host key question")
        text = await wait_until(pilot, lambda: "Unknown host key" in screen_text(app) and screen_text(app), message="the dialog painted")
        assert sshd.host_fingerprint in text and sshd.host_spec in text
        assert app.client is None and "connecting" in header_text(app)
        await pilot.press("y" if accept else "n")
        if accept:
            await connected(pilot)
            assert sshd.host_key_pub.split()[1] in (home / ".ssh" / "known_hosts").read_text()
            await wait_until(pilot, lambda: "%s@" % sshd.user in screen_text(app), message="user@host in the header")
        else:
            await wait_until(pilot, lambda: app.connection_state == "failed", message="the refusal")
            assert "unknown host key" in header_text(app)
            assert (home / ".ssh" / "known_hosts").read_text() == ""


async def test_cut_link_shows_reconnecting_and_the_log_goes_on_without_loss(netns_host, host_python, tmp_path, monkeypatch):
    home = netns_host.client_home(tmp_path)
    use_home(monkeypatch, home)
    monkeypatch.delenv("SSH_AUTH_SOCK", raising=False)
    app = SpecdeckApp(host="gpuhost", python=host_python)
    async with app.run_test(size=SIZE) as pilot:
        await connected(pilot)
        job = app.client.call("jobs.submit", {"argv": ["bash", "-c", "for i in $(seq 1 100000); do echo line $i; sleep 0.02; done"]})
        await wait_until(pilot, lambda: job_rows(app).get(job["id"], {}).get("state") == "running", message="the job running")
        table = app.query_one(JobsTable)
        table.focus()
        table.move_cursor(row=table.get_row_index(job["id"]))  # the host may have older jobs
        await pilot.press("enter")
        log = app.query_one(LogView)
        await wait_until(pilot, lambda: len(numbered(log.lines)) >= 20, message="the first lines")

        netns_host.cut()
        await wait_until(pilot, lambda: app.connection_state == "reconnecting", message="the cut to be noticed")
        text = header_text(app)
        assert text.startswith("○ reconnecting, ") and "(" in text, text  # when, and why
        await wait_until(pilot, lambda: "reconnecting" in screen_text(app), message='the screen to show it')
        before = len(numbered(log.lines))
        await pilot.pause(2)
        netns_host.restore()
        await wait_until(pilot, lambda: app.connection_state == "connected", message="the link back")
        # The job ran on meanwhile; the view catches up from where the stream stopped.
        await wait_until(pilot, lambda: len(numbered(log.lines)) >= before + 150, message="the lines written while cut")
        seen = numbered(log.lines)
        assert seen == list(range(1, len(seen) + 1))
        await wait_until(pilot, lambda: "log %s (following)" % job["id"] in screen_text(app), message='the screen to show it')
        app.client.call("jobs.stop", {"id": job["id"], "grace_s": 1})
