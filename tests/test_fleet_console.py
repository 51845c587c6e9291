"""The console on several hosts (Pilot, real agents): the Fleet pane (wide, and at 80x24 where
its columns scroll), the host the other panes show and how it changes, alerts of a host not
shown, a host that drops and comes back, a host that is down from the start. Each host is a local agent with its own state directory (its own
daemon, jobs and alerts), the 8-GPU one replaying an H200 recording; tests/test_fleet_ssh.py
runs the console over real SSH hosts."""

import pytest
from rich.cells import cell_len
from textual.widgets import DataTable, TabbedContent

from tests.helpers.fleet import LocalFleet
from tests.helpers.pilot import job_rows, screen_lines, text_of
from tests.helpers.waits import wait_until
from tui.app import SpecdeckApp
from tui.fleet import model
from tui.fleet.pane import FleetPane
from tui.jobs.pane import JobsPane
from tui.widgets.key_bar import KeyBar

SIZE = (180, 40)


@pytest.fixture
def fleet(tmp_path):
    fleet = LocalFleet(tmp_path, ["alpha", "beta", "gamma"], gpus={"beta": 8})
    yield fleet
    fleet.stop()


def fleet_rows(app):
    """{host: its row's cells, in model.COLUMNS' order after the ▶ column} (the pane puts its
    main columns first)."""
    table = app.query_one(FleetPane).query_one(DataTable)
    return {str(row_key.value): [str(table.get_cell(row_key, key)) for key in ("shown",) + model.COLUMNS] for row_key in table.rows}


def jobs_seen(app, host):
    """What the screen shows in the JOBS column of `host`'s row (None while the column is not in view)."""
    lines = screen_lines(app)
    header = next((line for line in lines if line.split()[:1] == ["HOST"]), "")
    row = next((line for line in lines if line[4:].startswith(host + " ")), None)
    if "JOBS" not in header or row is None:
        return None
    column = header.index("JOBS")
    return row[column:column + 4].strip()


def summarised(app, *names):
    return all(app.link_of(name).summary is not None for name in names)


async def test_the_fleet_pane_lists_every_host_and_a_host_that_is_down_fails_alone(fleet):
    fleet.down.add("gamma")
    app = SpecdeckApp(hosts=["alpha", "beta", "gamma"], connect=fleet.connect)
    async with app.run_test(size=SIZE) as pilot:
        assert app.query_one(TabbedContent).active == "fleet"  # several hosts: the Fleet pane first
        await wait_until(pilot, lambda: summarised(app, "alpha", "beta") and app.link_of("gamma").state == "reconnecting",
                         message="two hosts' summaries, and the third tried again")
        # The rows are drawn on a timer: wait for a drawing made after both summaries came.
        await wait_until(pilot, lambda: all(fleet_rows(app)[name][2] == "up" and not fleet_rows(app)[name][4].startswith("connected,")
                                            for name in ("alpha", "beta")), message="the rows drawn")
        rows, table = fleet_rows(app), app.query_one(FleetPane).query_one(DataTable)
        beta = dict(zip(("shown",) + model.COLUMNS, rows["beta"]))
        assert beta["GPUS BUSY"].endswith("/8") and beta["MEM GiB"].endswith("/1123.2") and beta["HOTTEST"].endswith("°C")
        # No GPU on this machine: a word, not zeros and not its reason, which is under the table.
        alpha = dict(zip(("shown",) + model.COLUMNS, rows["alpha"]))
        assert (alpha["GPUS BUSY"], alpha["MEM GiB"], alpha["JOBS"], alpha["ALERTS"]) == ("no NVML", "-", "0", "0")
        await wait_until(pilot, lambda: "alpha: up; no GPUs shown: NVML did not start: " in text_of(app.query_one("#fleet-detail")),
                         message="why alpha shows no GPU, under the table")
        assert rows["gamma"][2] == "reconnecting" and rows["gamma"][4].startswith(("next try in", "trying again now"))
        reason_cell, reason_column = rows["gamma"][4], table.columns["GPUS BUSY"]
        assert "(cannot connect to gamma port 22: Connection refused)" in reason_cell or (
            reason_cell.endswith("…") and cell_len(reason_cell) == reason_column.content_width)  # cut where its column ends
        assert rows["alpha"][0] == "▶"  # the host the other panes show
        bar = app.query_one(KeyBar)
        assert "⏎ show host" in text_of(bar) and "more columns" not in text_of(bar)  # 180 columns: every column in view
        await wait_until(pilot, lambda: app.header.fleet_text == "host 1 of 3 · 1 reconnecting", message="the header's count")

        # 80x24: the main columns in view, the others past the edge said on the bar, and → brings
        # them in, a column a key.
        await pilot.resize_terminal(80, 24)
        await wait_until(pilot, lambda: "←/→ more columns" in text_of(bar), message="the hint that more columns are to the right")
        assert "⏎ show host" in text_of(bar) and any("ALERTS" in line for line in screen_lines(app))
        assert not any("THROTTLING" in line for line in screen_lines(app))
        assert fleet_rows(app)["gamma"][4].endswith("…") and cell_len(fleet_rows(app)["gamma"][4]) == table.columns["GPUS BUSY"].content_width
        for _ in range(12):
            await pilot.press("right")
        await wait_until(pilot, lambda: any("THROTTLING" in line for line in screen_lines(app)), message="the last columns scrolled in")
        assert any(line[4:].startswith("alpha ") for line in screen_lines(app))  # the host's name stays in view beside them
        await pilot.press(*["left"] * 12)
        await wait_until(pilot, lambda: table.scroll_x == 0, message="back to the first columns")
        # 120x40: the GPU-less host's row goes on past its GPU column.
        await pilot.resize_terminal(120, 40)
        await wait_until(pilot, lambda: jobs_seen(app, "alpha") == "0", message="alpha's row with its other columns at 120")

        await pilot.press("down", "down")  # the host that is down selected: its whole reason under the table
        await wait_until(pilot, lambda: "(cannot connect to gamma port 22: Connection refused)" in text_of(
            app.query_one("#fleet-detail")), message="gamma's reason in full")
        fleet.down.discard("gamma")  # the host is back: it joins without a key pressed
        await wait_until(pilot, lambda: summarised(app, "gamma"), timeout_s=30, message="gamma joined")


async def test_enter_and_the_brackets_change_the_host_the_panes_show(fleet):
    job = fleet.client("beta").call("jobs.submit", {"argv": ["sleep", "60"], "name": "on beta"})
    app = SpecdeckApp(hosts=["alpha", "beta", "gamma"], connect=fleet.connect)
    async with app.run_test(size=SIZE) as pilot:
        await wait_until(pilot, lambda: summarised(app, "alpha", "beta", "gamma"), message="every host's summary")
        await wait_until(pilot, lambda: fleet_rows(app)["beta"][8] == "1", message="beta's running job in its row")
        await pilot.press("down", "enter")
        await wait_until(pilot, lambda: app.current.name == "beta" and app.query_one(TabbedContent).active == "gpus",
                         message="beta shown, on its first pane")
        assert "beta" in app.header.host_label
        await pilot.press("2")
        await wait_until(pilot, lambda: list(job_rows(app)) == [job["id"]],
                         message="beta's job in the Jobs pane")
        await pilot.press("right_square_bracket")
        await wait_until(pilot, lambda: app.current.name == "gamma" and app.query_one(TabbedContent).active == "jobs",
                         message="] shows the next host on the same pane")
        await wait_until(pilot, lambda: app.client is not None and app.query_one(JobsPane).is_attached, message="gamma's panes")
        await pilot.pause(0.5)
        assert job_rows(app) == {}  # gamma has no job: nothing of beta's is left
        beta = app.models["beta"]
        assert beta is not app.model and job["id"] in beta.book.jobs  # beta's model holds its jobs while gamma is shown
        gammas = app.query_one(JobsPane)
        await pilot.press("left_square_bracket")
        await wait_until(pilot, lambda: app.model is beta and [p for p in app.query(JobsPane) if p is not gammas and p.is_attached],
                         message="[ : beta's panes again")
        assert list(job_rows(app)) == [job["id"]]  # at once, from beta's model, before its job events are asked again
        await pilot.press("left_square_bracket")
        await wait_until(pilot, lambda: app.current.name == "alpha", message="[ twice: back to alpha")
        await pilot.press("0")
        await wait_until(pilot, lambda: fleet_rows(app)["alpha"][0] == "▶" and fleet_rows(app)["beta"][0] == "",
                         message="the Fleet pane marks the host shown")
    fleet.client("beta").call("jobs.stop", {"id": job["id"]})


async def test_an_alert_of_a_host_not_shown_reaches_the_console_with_its_name(fleet, monkeypatch):
    monkeypatch.setenv("SPECDECK_DESKTOP_NOTIFY", "off")
    app = SpecdeckApp(hosts=["alpha", "beta", "gamma"], connect=fleet.connect)
    async with app.run_test(size=SIZE) as pilot:
        await wait_until(pilot, lambda: all(model.alerts_followed for model in app.models.values()), message="alerts followed")
        # A name too long for an alert is cut with "…": its last words are not read as how it ended.
        name = "gen states for the long run " + "x" * 60 + "; exit 0"
        job = fleet.client("beta").call("jobs.submit", {"argv": ["sh", "-c", "exit 3"], "name": name})
        await wait_until(pilot, lambda: any(n.title.startswith("beta: ") and "exited 3" in n.message for n in app._notifications),
                         message="beta's alert, named, while alpha is shown")
        message = next(n.message for n in app._notifications if "exited 3" in n.message)
        assert "(gen states for the long run xxx" in message and "…) exited 3" in message and "exit 0" not in message
        assert app.link_of("beta").unseen_alerts == 1
        await wait_until(pilot, lambda: fleet_rows(app)["beta"][-1].endswith("1 new"), message="unseen in the Fleet row")
        app.show_host(app.link_of("beta"))
        assert app.link_of("beta").unseen_alerts == 0  # seen once its host is shown
        assert job["id"]


async def test_a_host_that_drops_is_reconnecting_in_its_row_and_comes_back_while_the_others_stay(fleet):
    app = SpecdeckApp(hosts=["alpha", "beta"], connect=fleet.connect)
    async with app.run_test(size=SIZE) as pilot:
        await wait_until(pilot, lambda: summarised(app, "alpha", "beta"), message="both hosts")
        beta = app.link_of("beta")
        fleet.down.add("beta")
        beta.client.link.process.kill()  # the link drops (the agent's end of it dies)
        await wait_until(pilot, lambda: fleet_rows(app)["beta"][2] == "reconnecting", message="beta reconnecting in its row")
        assert "next try" in fleet_rows(app)["beta"][4] or "trying again" in fleet_rows(app)["beta"][4]
        await wait_until(pilot, lambda: fleet_rows(app)["alpha"][2] == "up", message="alpha up while beta is away")
        fleet.down.discard("beta")
        await wait_until(pilot, lambda: fleet_rows(app)["beta"][2] == "up", timeout_s=30, message="beta back")


async def test_at_60_columns_the_tabs_have_short_titles_and_a_click_on_one_opens_its_pane(fleet):
    """A narrow terminal (a phone's browser, ~64 columns): every tab on the row, by its number and
    a short word; a click on one shows its pane; wide again, the full titles."""
    app = SpecdeckApp(hosts=["alpha", "beta"], connect=fleet.connect)
    short = ["0 Fleet", "1 GPUs", "2 Jobs", "3 Down", "4 Tens", "5 Spec", "6 Train"]
    async with app.run_test(size=(60, 40)) as pilot:
        await wait_until(pilot, lambda: summarised(app, "alpha", "beta"), message="both hosts' summaries")
        lines = screen_lines(app)
        row = next(i for i, line in enumerate(lines) if "0 Fleet" in line)
        assert all(title in lines[row] for title in short) and "Downloads" not in lines[row], lines[row]
        for title, tab in zip(short[1:] + short[:1], ("gpus", "jobs", "downloads", "tensors", "speculation", "training", "fleet")):
            await pilot.click(offset=(screen_lines(app)[row].index(title) + 1, row))
            await wait_until(pilot, lambda: app.query_one(TabbedContent).active == tab, message="the %s pane, clicked" % title)
        await wait_until(pilot, lambda: "beta" in "".join(screen_lines(app)), message="the Fleet pane's hosts at 60 columns")
        await pilot.resize_terminal(100, 40)
        await wait_until(pilot, lambda: "3 Downloads" in "".join(screen_lines(app)) and "5 Speculation" in "".join(screen_lines(app)),
                         message="the full titles at 100 columns")
