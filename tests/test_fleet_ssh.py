"""The console on a fleet of real SSH hosts (tests/fleet_fixtures.py: three host users behind a
real sshd, one replaying 8 GPUs, a host through a 300 ms delay proxy, a port that accepts and
says nothing, a refused port, a host key nobody knows): the hosts that answer are shown while
the others fail alone, each with its own reason, and the unknown key is asked about, never
accepted silently, without holding up the rest."""

from textual.widgets import DataTable

from tests.helpers.waits import wait_until
from tui.app import SpecdeckApp
from tui.fleet import model
from tui.fleet.pane import FleetPane
from tui.screens.host_key import HostKeyScreen

SIZE = (200, 40)


def fleet_rows(app):
    """{host: its row's cells, in model.COLUMNS' order after the ▶ column}."""
    table = app.query_one(FleetPane).query_one(DataTable)
    return {str(row_key.value): [str(table.get_cell(row_key, key)) for key in ("shown",) + model.COLUMNS] for row_key in table.rows}


async def test_a_fleet_of_ssh_hosts_where_some_are_down_slow_or_unknown(fleet, monkeypatch):
    fleet.use(monkeypatch)
    names = fleet.names()
    app = SpecdeckApp(hosts=names, python=fleet.python)
    async with app.run_test(size=SIZE) as pilot:
        # The unknown key is asked about while the hosts that answer are already shown.
        await wait_until(pilot, lambda: isinstance(app.screen, HostKeyScreen), timeout_s=60, message="the host key question")
        assert app.screen.host_key.name == "fleet-host-key-nobody-knows"
        await wait_until(pilot, lambda: all(app.link_of(n).summary is not None for n in fleet.names("up")), timeout_s=60,
                         message="the hosts that are up, while the question waits")
        await pilot.press("n")
        await wait_until(pilot, lambda: app.link_of("unknown-key").state == "failed", message="the refused key: that host fails")
        assert "not accepted: press r" in app.link_of("unknown-key").detail["error"]
        await wait_until(pilot, lambda: "error" in app.link_of("silent-1").detail and "error" in app.link_of("refused-1").detail
                         and app.link_of("slow-1").summary is not None, timeout_s=60, message="the silent, refused and slow hosts")
        await wait_until(pilot, lambda: fleet_rows(app).get("slow-1", [""] * 3)[2] == "up", message="the rows drawn")
        rows = fleet_rows(app)
        assert [rows[n][2] for n in ("gpu-a", "gpu-b", "gpu-c", "slow-1")] == ["up"] * 4
        assert rows["gpu-b"][4].endswith("/8")  # the replayed GPUs
        # Its round trip, through the 300 ms proxy (measured by the heartbeat's pings).
        await wait_until(pilot, lambda: fleet_rows(app)["slow-1"][3] != "-", message="the slow host's round trip")
        assert int(fleet_rows(app)["slow-1"][3].split()[0]) >= 300
        # Down, not refused for good: tried again, each with its own reason; the key refused: failed.
        await wait_until(pilot, lambda: fleet_rows(app)["silent-1"][2] == fleet_rows(app)["refused-1"][2] == "reconnecting",
                         message="the silent and refused hosts' rows")
        assert app.link_of("silent-1").detail["error"].startswith("no SSH greeting from 127.0.0.1")
        assert app.link_of("refused-1").detail["error"].startswith("cannot connect to 127.0.0.1 port")
        assert app.link_of("refused-1").detail["error"].endswith("Connection refused")
        assert fleet_rows(app)["unknown-key"][2] == "failed"
        await wait_until(pilot, lambda: app.header.fleet_text == "host 1 of %d · 1 failed · 2 reconnecting" % len(names),
                         message="the header's count")
