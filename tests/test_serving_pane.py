"""The Speculation pane against the real local agent and a real HTTP server that serves vLLM's
metric text (as a real vLLM wrote it) with counters growing every scrape: accept length shown
live with the break-even line, the per-position bars, and the host's alert once accept length
has stayed under break-even for the host's time (shortened for the test's daemon); a line set
in the pane is the host's: it alerts a real webhook with the console closed, and a laptop with
an empty config sees it in `spec --json`, as it sees one set with `specdeck breakeven HOST
SERVER --set`; in the console at 80x24 and 120x40 both charts keep plotted rows; a K sweep that
ends is in the rows of K at once."""

import json
import re
import sys

import pytest
from textual.widgets import Static

from tests.helpers.cli import run_cli
from tests.helpers.pilot import OnePane, questions_asked, screen_lines, text_of, to_pane
from tests.helpers.waits import wait_for, wait_until
from tests.helpers.metrics import DRAFTER, TARGET, WRITE_RESULT, GrowingServer, SlowServer
from tests.helpers.sweeps import known_sweep
from tests.notify_receiver import Receiver
from tui.transport.connection import open_client
from tui.app import SpecdeckApp
from tui.screens.prompt import PromptScreen
from tui.serving.pane import SpeculationPane
from tui.widgets.chart import TimeChart


@pytest.fixture
def quick_client(agent_home, monkeypatch):
    """A client of a local daemon that tells accept length under break-even after 3 s (the
    product waits 5 min): the environment it starts with says so."""
    monkeypatch.setenv("SPECDECK_BELOW_BREAK_EVEN_S", "3")
    client = open_client("local")
    yield client
    client.close()


def below_alerts(client, server_id):
    """The host's below_break_even alerts for a server (notify.list: the newest it raised)."""
    return [a for a in client.call("notify.list")["recent"] if a["kind"] == "below_break_even" and a.get("server") == server_id]


async def test_pane_shows_accept_length_against_break_even_and_the_hosts_alert(quick_client):
    client = quick_client
    server = GrowingServer()
    try:
        server_id = client.call("serving.attach", {"url": server.url})["id"]
        asked = questions_asked(client)
        app = OnePane(SpeculationPane(), client=client)
        async with app.run_test(size=(120, 40)) as pilot:
            pane = app.query_one(SpeculationPane)
            pane.focus()
            summary = pane.query_one("#spec-summary", Static)
            await wait_until(pilot, lambda: "accept length now 3.90" in str(summary.render()))
            assert server_id in str(summary.render())
            bars = pane.query_one("#spec-bars", Static)
            await wait_until(pilot, lambda: "pos 0" in str(bars.render()) and "96.8%" in str(bars.render()))
            # The window's figures, bars and rows of K are one question to the host, per window.
            await pilot.press("w")
            await wait_until(pilot, lambda: "window 15 min" in str(summary.render()) and ("serving.advise", {"id": server_id, "window_s": 900.0}) in asked
                             and "per position over the last" in str(bars.render()), message="the 15 min window")
            windows = [params["window_s"] for method, params in asked if method == "serving.advise"]
            assert 300.0 in windows and [method for method, _ in asked if method == "serving.stats"] == []
            await pilot.press("b")
            await pilot.pause()
            app.screen.query_one("Input").value = "40@112.5"  # 0.040 s x 112.5 tok/s = 4.50
            await pilot.press("enter")
            await wait_until(pilot, lambda: "break-even 4.50 (set: 40 ms x 112.5 tok/s)" in str(summary.render()))
            chart = pane.query_one("#spec-accept-chart", TimeChart)
            assert "threshold break-even 4.5" in chart.series_text() and "accept length:" in chart.series_text()
            await wait_until(pilot, lambda: "UNDER BREAK-EVEN since" in str(summary.render()), message="the host's alert")
            [told] = below_alerts(client, server_id)  # raised by the host, once
            assert "accept length 3.90 under break-even 4.50" in told["message"] and told["break_even"]["source"] == "set"
    finally:
        server.close()


async def test_a_line_set_in_the_pane_alerts_from_the_host_with_the_console_closed(quick_client, tmp_path):
    """`b` 2.8 in the pane, the console closed: the host's rule raises below_break_even against
    2.8 and delivers it to a real webhook; a console opened later shows the line and that alert;
    laptops with empty configs read the same line from the host (`spec --json`), and one set
    with `specdeck breakeven local SERVER --set 30@82`."""
    client = quick_client
    server, receiver = SlowServer(), Receiver()
    try:
        client.call("notify.add", {"url": receiver.url + "/hook", "format": "json", "on": "speculation"})
        server_id = client.call("serving.attach", {"url": server.url})["id"]
        app = OnePane(SpeculationPane(), client=client)
        async with app.run_test(size=(120, 40)) as pilot:
            pane = app.query_one(SpeculationPane)
            pane.focus()
            summary = pane.query_one("#spec-summary", Static)
            await wait_until(pilot, lambda: "accept length now 2.45" in text_of(summary), message="the slow drafter's figures")
            assert "break-even: not known" in text_of(summary)
            await pilot.press("b")
            await wait_until(pilot, lambda: isinstance(app.screen, PromptScreen), message="the break-even prompt")
            app.screen.query_one("Input").value = "2.8"
            await pilot.press("enter")
            await wait_until(pilot, lambda: "break-even 2.80 (set)" in text_of(summary), message="the line the host keeps")
        # The console is closed: the host alone compares the server with the line and tells the webhook.
        told = wait_for(lambda: [a for r in receiver.requests for a in json.loads(r["body"])["alerts"]
                                 if a["kind"] == "below_break_even" and a.get("server") == server_id], 60)
        assert "accept length 2.45 under break-even 2.80" in told[0]["message"] and "(line: set)" in told[0]["message"]
        # Another console, opened later: the host's line, and the alert it raised meanwhile.
        again = OnePane(SpeculationPane(), client=client)
        async with again.run_test(size=(120, 40)) as pilot:
            summary = again.query_one(SpeculationPane).query_one("#spec-summary", Static)
            await wait_until(pilot, lambda: "break-even 2.80 (set)" in text_of(summary) and "UNDER BREAK-EVEN since" in text_of(summary),
                             message="the host's line and its alert in another console")

        def spec(config):
            env = {"XDG_CONFIG_HOME": str(tmp_path / config)}  # another laptop: an empty config
            return json.loads(run_cli("spec", "local", server_id, "--window", "10s", "--json", env=env, check=0).stdout)["break_even"]

        assert spec("second-laptop") == {"accept_length": 2.8, "source": "set", "how": None}
        run_cli("breakeven", "local", server_id, "--set", "30@82", "--json", env={"XDG_CONFIG_HOME": str(tmp_path / "third")}, check=0)
        line = spec("fourth-laptop")
        assert line["accept_length"] == pytest.approx(2.46) and (line["source"], line["how"]) == ("set", "30 ms x 82 tok/s")
    finally:
        receiver.close()
        server.close()


def region_lines(app, widget):
    """The screen's lines where `widget` is drawn, cut to its columns."""
    region = widget.region
    return [line[region.x:region.right] for line in screen_lines(app)[region.y:region.bottom]]


def plotted_rows(app, chart):
    """How many rows of the chart's plot box are drawn (between its top and bottom edges), and
    whether a point of the series is among them."""
    lines = region_lines(app, chart)
    tops = [n for n, line in enumerate(lines) if "┌" in line]
    bottoms = [n for n, line in enumerate(lines) if "└" in line]
    if not tops or not bottoms:
        return 0, False
    rows = lines[tops[0] + 1:bottoms[0]]
    return len(rows), any(any("\u2800" < char <= "\u28ff" or char == "•" for char in row) for row in rows)


@pytest.mark.parametrize("size", [(80, 24), (120, 40)], ids=["80x24", "120x40"])
async def test_the_console_keeps_both_charts_and_one_line_per_position_and_whole_dialogs(agent_home, client, size):
    """In the console at 80x24 and 120x40: both charts have plotted rows with the series in
    them (not titles alone), each draft position's acceptance is on one line, the tokens/s axis
    starts at 0, the break-even prompt shows its whole hint, and 0 on a one-host console says
    in the status line why nothing happened."""
    server = GrowingServer()
    try:
        client.call("serving.attach", {"url": server.url})
        app = SpecdeckApp(host="local")
        async with app.run_test(size=size) as pilot:
            await wait_until(pilot, lambda: app.client is not None, message="the connection")
            await to_pane(pilot, "Speculation")
            pane = app.query_one(SpeculationPane)
            charts = [pane.query_one("#spec-accept-chart", TimeChart), pane.query_one("#spec-throughput-chart", TimeChart)]
            await wait_until(pilot, lambda: "96.8%" in text_of(pane.query_one("#spec-bars", Static))
                             and "conditional" in text_of(pane.query_one("#spec-bars", Static))  # the window's, not the last 10 s'
                             and all(plotted_rows(app, chart) >= (2, True) for chart in charts),
                             message="both charts plotted, with the bars: %s" % [plotted_rows(app, chart) for chart in charts])
            await pilot.pause()  # laid out for the text it has
            positions = [line for line in region_lines(app, pane.query_one("#spec-bars", Static)) if re.search(r"pos \d", line)]
            assert positions and all(line.count("%") == line.count("pos ") for line in positions), positions
            assert "pos 2" in "".join(positions)  # the three positions, none wrapped onto a line of its own
            axis = [line.split("┤")[0].strip() for line in region_lines(app, charts[1]) if "┤" in line]
            assert not any(label.startswith("-") for label in axis), axis  # tokens/s are never negative

            await pilot.press("b")
            await wait_until(pilot, lambda: isinstance(app.screen, PromptScreen), message="the break-even prompt")
            await pilot.pause()
            shown = " ".join(line.strip(" █▌▐") for line in screen_lines(app))
            assert "CYCLE_MS@BASELINE_TPS (30@82)" in re.sub(r"\s+", " ", shown), shown
            await pilot.press("escape")
            await wait_until(pilot, lambda: not isinstance(app.screen, PromptScreen), message="the prompt to close")

            await pilot.press("0")
            status = pane.query_one(".pane-status", Static)
            await wait_until(pilot, lambda: "one host" in text_of(status), message="0 said in the status line")
            await pilot.pause(1.5)  # the pane's figures come each second: the line stays said
            assert "one host" in text_of(status)
    finally:
        server.close()


async def test_the_rows_of_k_take_a_k_sweep_as_soon_as_it_ends(client, metrics_server):
    """An idle server job (its figures from a real HTTP server serving vLLM's recorded idle
    /metrics) shows no rows of K; a K sweep of its target and drafter ends (a benchmark job that
    writes a sweep's result as bench does): the open pane shows the sweep's rows at once, not
    when it is opened again."""
    server = client.call("jobs.submit", {"argv": ["sleep", "600"], "kind": "server", "name": "tiny server (K=3)",
                                         "meta": {"url": metrics_server.url, "target": TARGET, "drafter": DRAFTER, "k": 3}})["id"]
    try:
        app = OnePane(SpeculationPane(), client=client)
        async with app.run_test(size=(120, 40)) as pilot:
            pane = app.query_one(SpeculationPane)
            pane.focus()
            bars, k_rows = pane.query_one("#spec-bars", Static), pane.query_one("#spec-k", Static)
            await wait_until(pilot, lambda: pane.selected == server and "no drafts in the last 5 min" in text_of(bars),
                             message="the idle server's window")
            assert "no drafts in the window yet" in text_of(k_rows)
            result = known_sweep()
            bench = client.call("jobs.submit", {"argv": [sys.executable, "-c", WRITE_RESULT, json.dumps(result)], "kind": "benchmark",
                                                "name": "bench --k 1,2,3,4", "meta": {"target": TARGET, "drafter": DRAFTER}})["id"]
            await wait_until(pilot, lambda: "sweep %s" % bench in text_of(k_rows), message="the sweep's rows")
            assert "no drafts in the window yet" not in text_of(k_rows)
    finally:
        client.call("jobs.stop", {"id": server})
