"""The Jobs pane as a new user meets it (Pilot, the real local agent): where it opens, the keys
after starting a job, names as wide as the terminal allows, the new-job form's kind after a
cancel, forgetting an ended job, the search's place as the log grows to its end, and every
pane's keys on the key bar of an 80x24 terminal."""

from textual.widgets import Select

from tests.helpers.pilot import (
    SIZE, connected, job_rows, notifications, screen_text, start_job_from_dialog, to_pane, type_text,
)
from tests.helpers.waits import wait_until
from tui.app import SpecdeckApp
from tui.jobs.new_job import NewJobScreen
from tui.jobs.pane import JobsTable
from tui.screens.confirm import ConfirmScreen
from tui.widgets.key_bar import KeyBar
from tui.widgets.log_view import LogView


def cursor_job(app):
    table = app.query_one(JobsTable)
    return table.coordinate_to_cell_key((table.cursor_row, 0)).row_key.value


async def test_the_arrow_keys_choose_jobs_after_one_starts_from_the_form(agent_home):
    app = SpecdeckApp(host="local")
    async with app.run_test(size=SIZE) as pilot:
        await connected(pilot)
        for number in range(3):
            app.client.call("jobs.submit", {"argv": ["seq", "1", "500"], "name": "earlier %d" % number})
        await wait_until(pilot, lambda: len(job_rows(app)) == 3, message="three jobs")
        await pilot.press("enter")
        log = app.query_one(LogView)
        await wait_until(pilot, lambda: log.subject and len(log.lines) > 100, message="a long log open")
        log.focus()  # as after a search, or a click in the log
        await pilot.pause()

        await start_job_from_dialog(pilot, "sleep 300", name="the new one")
        await wait_until(pilot, lambda: log.subject == "j4", message="the new job's log open")
        await wait_until(pilot, lambda: app.focused is app.query_one(JobsTable) and cursor_job(app) == "j4",
                         message="the table focused on the new job")
        scrolled = log.scroll_y
        await pilot.press("up", "up")
        assert cursor_job(app) == "j2", "the arrow keys did not move among the jobs"
        assert log.scroll_y == scrolled
        app.client.call("jobs.stop", {"id": "j4", "grace_s": 0})


async def test_names_take_the_width_there_is(agent_home):
    name = "finetune AQ-MedAI Kimi-K2 eagle3 drafter on 25K regenerated samples, lr 3e-5, 4 epochs, one H200"
    app = SpecdeckApp(host="local")
    async with app.run_test(size=(200, 50)) as pilot:
        await connected(pilot)
        job = app.client.call("jobs.submit", {"argv": ["true"], "name": name})
        await wait_until(pilot, lambda: job_rows(app).get(job["id"], {}).get("state") == "succeeded", message="the job listed")
        await wait_until(pilot, lambda: job_rows(app)[job["id"]]["name"] == name, message="the whole name at 200 columns")
        assert name in screen_text(app)

        await pilot.resize_terminal(80, 24)
        await wait_until(pilot, lambda: job_rows(app)[job["id"]]["name"] != name, message="the name cut at 80 columns")
        cut = job_rows(app)[job["id"]]["name"]
        assert cut.endswith("…") and name.startswith(cut[:-1]) and len(cut) >= 12
        table = app.query_one(JobsTable)
        assert table.virtual_size.width <= table.size.width, "the row runs past the edge of an 80-column terminal"


async def test_a_kind_left_in_a_cancelled_form_does_not_start_the_next_job(agent_home):
    app = SpecdeckApp(host="local")
    async with app.run_test(size=SIZE) as pilot:
        await connected(pilot)
        await pilot.press("n")
        await wait_until(pilot, lambda: isinstance(app.screen, NewJobScreen), message="the form")
        await type_text(pilot, "python train.py")
        app.screen.query_one("#kind", Select).focus()
        await pilot.press("enter", "down", "down", "enter")
        assert app.screen.query_one("#kind", Select).value == "training"
        await pilot.press("escape")
        await wait_until(pilot, lambda: not isinstance(app.screen, NewJobScreen), message="the form cancelled")

        await pilot.press("n")
        await wait_until(pilot, lambda: isinstance(app.screen, NewJobScreen), message="the form again")
        form = app.screen
        assert form.query_one("#command").value == "python train.py", "what was typed is kept"
        assert form.query_one("#kind", Select).value == "command"
        assert "training" not in screen_text(app)
        form.query_one("#command").value = "echo hello"
        form.query_one("#command").focus()
        await pilot.press("enter")
        await wait_until(pilot, lambda: not isinstance(app.screen, NewJobScreen), message="the job started")
        jobs = app.client.call("jobs.list")["jobs"]
        assert [(job["argv"][1:], job["kind"]) for job in jobs] == [(["hello"], "command")]
        await wait_until(pilot, lambda: job_rows(app).get(jobs[0]["id"], {}).get("kind") == "command", message="its row")


async def test_the_pane_opens_on_the_newest_running_job(agent_home):
    from tui.transport.connection import open_client

    other = open_client("local")
    try:
        running = other.call("jobs.submit", {"argv": ["sleep", "300"], "name": "the run people watch"})
        ended = other.call("jobs.submit", {"argv": ["true"], "name": "a quick check"})
        while other.call("jobs.get", {"id": ended["id"]})["process_state"] != "succeeded":
            other.call("jobs.tail", {"id": ended["id"], "offset": 0})  # a round trip between looks
        app = SpecdeckApp(host="local")
        async with app.run_test(size=SIZE) as pilot:
            await connected(pilot)
            await wait_until(pilot, lambda: len(job_rows(app)) == 2, message="both jobs listed")
            assert cursor_job(app) == running["id"], "the pane opened on %s, not on the running job" % cursor_job(app)
        other.call("jobs.stop", {"id": running["id"], "grace_s": 0})
    finally:
        other.close()


async def test_x_forgets_an_ended_job_after_asking_and_refuses_a_running_one(agent_home):
    app = SpecdeckApp(host="local")
    async with app.run_test(size=SIZE) as pilot:
        await connected(pilot)
        ended = app.client.call("jobs.submit", {"argv": ["echo", "done"], "name": "to forget"})
        running = app.client.call("jobs.submit", {"argv": ["sleep", "300"], "name": "still running"})
        await wait_until(pilot, lambda: job_rows(app).get(ended["id"], {}).get("state") == "succeeded"
                         and job_rows(app).get(running["id"], {}).get("state") == "running", message="both jobs listed")
        table = app.query_one(JobsTable)
        table.focus()
        table.move_cursor(row=table.get_row_index(running["id"]))
        await pilot.press("x")
        await wait_until(pilot, lambda: any("still running" in n[1] and "s stops it" in n[1] for n in notifications(app)),
                         message="a running job refused")
        assert not isinstance(app.screen, ConfirmScreen)

        table.move_cursor(row=table.get_row_index(ended["id"]))
        await pilot.press("enter")  # its log open: it says it is gone once forgotten
        log = app.query_one(LogView)
        await wait_until(pilot, lambda: log.subject == ended["id"] and "done" in log.lines, message="its log")
        await pilot.press("x")
        await wait_until(pilot, lambda: isinstance(app.screen, ConfirmScreen), message="the question")
        assert "Forget %s (to forget)?" % ended["id"] in screen_text(app)
        await pilot.press("escape")  # no: nothing happens
        await pilot.pause(0.3)
        assert ended["id"] in job_rows(app)
        await pilot.press("x")
        await wait_until(pilot, lambda: isinstance(app.screen, ConfirmScreen), message="the question again")
        await pilot.press("y")
        await wait_until(pilot, lambda: ended["id"] not in job_rows(app), message="the row gone")
        assert any(n[1] == "forgot %s" % ended["id"] for n in notifications(app))
        assert "forgotten" in log.border_title
        assert [job["id"] for job in app.client.call("jobs.list")["jobs"]] == [running["id"]]
        app.client.call("jobs.stop", {"id": running["id"], "grace_s": 0})


async def test_the_search_status_follows_the_log_to_its_end(agent_home):
    app = SpecdeckApp(host="local")
    async with app.run_test(size=SIZE) as pilot:
        await connected(pilot)
        job = app.client.call("jobs.submit", {"argv": ["bash", "-c", "for i in $(seq 1 60); do echo line $i; sleep 0.05; done"]})
        await wait_until(pilot, lambda: job["id"] in job_rows(app), message="the job listed")
        await pilot.press("enter")
        log = app.query_one(LogView)
        await wait_until(pilot, lambda: log.subject == job["id"] and len(log.lines) >= 12, message="a few lines")
        await pilot.press("slash")
        await type_text(pilot, "line 1")
        await pilot.press("enter")
        await wait_until(pilot, lambda: "/line 1: line" in (log.border_title or ""), message="a match")
        match = log.match_line + 1
        assert "/line 1: line %d of %d" % (match, len(log.lines)) in log.border_title
        assert "] next match" in str(app.query_one(KeyBar).render())
        await wait_until(pilot, lambda: log.ended, message="the job's end")
        await pilot.pause()
        assert len(log.lines) == 60
        assert "/line 1: line %d of 60" % match in log.border_title, log.border_title
        await pilot.press("right_square_bracket")
        following = log.match_line + 1
        assert log.lines[log.match_line].startswith("line 1") and following != match
        assert "/line 1: line %d of 60" % following in log.border_title
        await pilot.press("escape")
        assert "/line 1" not in log.border_title
        await wait_until(pilot, lambda: "] next match" not in str(app.query_one(KeyBar).render()), message="] gone from the bar")


def bar_lines(bar):
    return str(bar.render()).split("\n")


def on_bar(bar, *labels):
    """Each `key label` on the bar's lines (the bar writes them closer when short of room)."""
    text = " ".join(" ".join(line.split()) for line in bar_lines(bar))
    return all(" ".join(label.split()) in text for label in labels)


async def test_every_key_of_a_pane_is_on_the_bar_at_80x24(agent_home):
    app = SpecdeckApp(host="local")
    async with app.run_test(size=(80, 24)) as pilot:
        await connected(pilot)
        bar = app.query_one(KeyBar)
        for title in [pane.PANE_TITLE for pane in app.pane_classes]:
            await to_pane(pilot, title)
            await wait_until(pilot, lambda: on_bar(bar, "1-6 panes", "? help") and all(
                entry.key in str(bar.render()) for entry in bar.entries()), message="every key of the %s pane" % title)
            assert all(len(line) <= 80 for line in bar_lines(bar)), (title, bar_lines(bar))
        await to_pane(pilot, "Downloads")
        await wait_until(pilot, lambda: on_bar(bar, "n new", "x cancel", "r retry/repair", "v verify", "t Tensors", "q quit"),
                         message="the Downloads pane's keys, v and t with them")
        assert len(bar_lines(bar)) == 1
        await to_pane(pilot, "Jobs")
        await wait_until(pilot, lambda: on_bar(bar, "⏎ open", "n new", "s stop", "/ search", "f follow", "w save", "x forget"),
                         message="the Jobs pane's keys, x with them")
        # A search in the log adds its keys: the bar takes a second line rather than lose one.
        job = app.client.call("jobs.submit", {"argv": ["seq", "1", "30"]})
        await wait_until(pilot, lambda: job["id"] in job_rows(app), message="the job listed")
        await pilot.press("enter")
        log = app.query_one(LogView)
        await wait_until(pilot, lambda: log.subject == job["id"] and len(log.lines) == 30, message="the log")
        await pilot.press("slash")
        await type_text(pilot, "2")
        await pilot.press("enter")
        await wait_until(pilot, lambda: on_bar(bar, "] next", "[ previous", "n new", "s stop", "x forget", "? help"),
                         message="the search's keys and the pane's")
        assert len(bar_lines(bar)) == 2 and bar.size.height == 2 and all(len(line) <= 80 for line in bar_lines(bar))
        await pilot.press("escape")
        await wait_until(pilot, lambda: len(bar_lines(bar)) == 1 and bar.size.height == 1, message="one line again")
