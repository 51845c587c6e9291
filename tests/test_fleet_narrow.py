"""The Fleet pane's main columns on a narrow terminal (issue 40, item 6), in the console on three
hosts of real local agents (one replaying 8 H200s, one down): at 80x24 and 120x40 the host, its
state, GPUs, jobs and alerts are on screen whole, a host with failed jobs its alerts count and
how many are new included; the rest are past the edge, and the key bar says which keys bring
them in."""

import pytest
from textual.widgets import DataTable

from tests.helpers.fleet import LocalFleet
from tests.helpers.pilot import screen_lines, text_of
from tests.helpers.waits import wait_until
from tui.app import SpecdeckApp
from tui.fleet.pane import FleetPane
from tui.widgets.key_bar import KeyBar

MAIN = ("HOST", "STATE", "GPUS BUSY", "JOBS", "ALERTS")


@pytest.fixture
def fleet(tmp_path):
    fleet = LocalFleet(tmp_path, ["alpha", "beta", "gamma"], gpus={"beta": 8})
    yield fleet
    fleet.stop()


def cell(app, host, column):
    return str(app.query_one(FleetPane).query_one(DataTable).get_cell(host, column))


def seen(app, host, column):
    """What the screen shows in `column` of `host`'s row, as wide as its cell's text; None while
    the column's heading is not on screen whole."""
    lines = screen_lines(app)
    header = next((line for line in lines if line.split()[:1] == ["HOST"]), "")
    row = next((line for line in lines if line[4:].startswith(host + " ")), None)
    if row is None or column + " " not in header + " ":
        return None
    start = header.index(column)
    return row[start:start + len(cell(app, host, column))]


@pytest.mark.parametrize("size", [(80, 24), (120, 40)], ids=["80x24", "120x40"])
async def test_the_main_columns_are_on_screen_whole_at_80_and_120_columns(fleet, monkeypatch, size):
    monkeypatch.setenv("SPECDECK_DESKTOP_NOTIFY", "off")
    fleet.down.add("gamma")
    app = SpecdeckApp(hosts=["alpha", "beta", "gamma"], connect=fleet.connect)
    async with app.run_test(size=size) as pilot:
        await wait_until(pilot, lambda: all(model.alerts_followed for name, model in app.models.items() if name != "gamma"),
                         message="alerts followed")
        beta = fleet.client("beta")
        for _ in range(2):  # two failed jobs on a host not shown: alerts, new to this console
            beta.call("jobs.submit", {"argv": ["sh", "-c", "exit 3"], "name": "fails"})
        await wait_until(pilot, lambda: cell(app, "beta", "ALERTS").endswith(", 2 new") and cell(app, "beta", "STATE") == "up"
                         and cell(app, "alpha", "STATE") == "up" and cell(app, "gamma", "STATE") == "reconnecting",
                         message="beta's new alerts in its row: %s" % [line for line in screen_lines(app) if "beta" in line])
        await pilot.pause()
        header = next(line for line in screen_lines(app) if line.split()[:1] == ["HOST"])
        for column in MAIN:
            assert column in header, (column, header)
        for host in ("alpha", "beta"):
            for column in MAIN:
                assert seen(app, host, column) == cell(app, host, column), (host, column, screen_lines(app))
        assert seen(app, "gamma", "STATE") == "reconnecting"
        if size[0] == 80:  # the other columns are past the edge: the bar says how to reach them
            assert "THROTTLING" not in header and "←/→ more columns" in text_of(app.query_one(KeyBar))
        beta.close()
