"""The Speculation pane against the real local agent and a real HTTP server that serves vLLM's
metric text (as a real vLLM wrote it) with counters growing every scrape: accept length shown
live with the break-even line, the per-position bars, and the alert once accept length has
stayed under break-even for the set time."""

import threading

from textual.widgets import Static

from tests.helpers.pilot import OnePane
from tests.helpers.waits import wait_until
from tests.helpers.metrics import AFTER, MetricsServer, scaled
from tui.serving.pane import SpeculationPane
from tui.widgets.chart import TimeChart


class GrowingServer(MetricsServer):
    """Every scrape sees AFTER's counts once more: 62 drafts, 180 accepted tokens (accept length
    1 + 180/62 = 3.90) each second."""

    def __init__(self):
        self.scrapes = 0
        self._lock = threading.Lock()
        super().__init__()

    @property
    def text(self):
        with self._lock:
            self.scrapes += 1
            return scaled(AFTER, self.scrapes)

    @text.setter
    def text(self, value):
        pass


async def test_pane_shows_accept_length_against_break_even_and_alerts(client):
    server = GrowingServer()
    try:
        server_id = client.call("serving.attach", {"url": server.url})["id"]
        app = OnePane(SpeculationPane(), client=client)
        async with app.run_test(size=(120, 40)) as pilot:
            pane = app.query_one(SpeculationPane)
            pane.alert_after_s = 2.0
            pane.focus()
            summary = pane.query_one("#spec-summary", Static)
            await wait_until(pilot, lambda: "accept length now 3.90" in str(summary.render()))
            assert server_id in str(summary.render())
            bars = pane.query_one("#spec-bars", Static)
            await wait_until(pilot, lambda: "pos 0" in str(bars.render()) and "96.8%" in str(bars.render()))
            await pilot.press("b")
            await pilot.pause()
            app.screen.query_one("Input").value = "40@112.5"  # 0.040 s x 112.5 tok/s = 4.50
            await pilot.press("enter")
            await wait_until(pilot, lambda: "break-even 4.50" in str(summary.render()))
            chart = pane.query_one("#spec-accept-chart", TimeChart)
            assert "threshold break-even 4.5" in chart.series_text() and "accept length:" in chart.series_text()
            await wait_until(pilot, lambda: "UNDER BREAK-EVEN" in str(summary.render()))
            assert any("under break-even" in n.message for n in app._notifications)
    finally:
        server.close()
