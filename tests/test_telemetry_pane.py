"""The GPUs pane, driven by Pilot against a real local agent: 8 GPUs (a replay of the H200
recording standing in for the GPUs; the daemon, stream and store are real) fit in 80x24 with
their jobs; the metric and window keys redraw the chart from the history store; an alert that
fired rings the bell; a host without NVML says so in one line and still shows CPU and memory."""

import time

from textual.widgets import Static

from remote.core.protocol import RemoteError
from tests.helpers.cli import REPO_ROOT
from tests.helpers.pilot import GpusApp
from tests.helpers.waits import wait_for, wait_until
from tui.transport.connection import open_client
from tui.telemetry.pane import GpusPane
from tui.widgets.chart import TimeChart

RECORDING = REPO_ROOT / "tests" / "data" / "nvml-h200x2.json.gz"


def text_of(app, selector):
    return str(app.query_one(selector, Static).render())


async def test_eight_gpus_fit_80x24_with_jobs_and_the_chart_follows_the_keys(agent_home, monkeypatch):
    monkeypatch.setenv("SPECDECK_NVML_REPLAY", "%s:8" % RECORDING)
    client = open_client("local")
    app = GpusApp(client=client)
    try:
        async with app.run_test(size=(80, 24)) as pilot:
            pane = app.query_one(GpusPane)
            await wait_until(pilot, lambda: pane.sample and len(pane.sample["gpus"]) == 8, message="8 GPUs in the pane")
            rows = text_of(app, "#gpu-rows").splitlines()
            assert len(rows) == 8 and all(len(row) <= 80 for row in rows)
            assert rows[7].startswith("7 ") and "G" in rows[7] and "W" in rows[7]
            # Every GPU row is on the screen at 80x24, with the chart and the status line below.
            await pilot.pause(0.2)
            region = app.query_one("#gpu-rows").region
            assert region.height == 8 and region.bottom <= 24
            chart = app.query_one(TimeChart)
            assert chart.region.height >= 5 and chart.region.bottom <= 24
            await wait_until(pilot, lambda: "gpu7" in chart.series_text(), message="a line per GPU in the chart")

            await pilot.press("m")
            assert pane.metric_index == 1 and "memory" in chart.title
            await wait_until(pilot, lambda: "gpu0" in chart.series_text() and "threshold memory total" in chart.series_text(),
                             message="memory charted against the total")
            await pilot.press("w")
            assert "1h" in chart.title
            assert "w window: 1h" in str(app.query_one(".pane-status", Static).render())
    finally:
        client.close()


async def test_alert_rings_the_bell_and_what_fired_unseen_is_shown_on_connect(agent_home, monkeypatch):
    monkeypatch.setenv("SPECDECK_NVML_REPLAY", "%s:2" % RECORDING)
    client = open_client("local")
    # Memory above 0 % for 0 s: fires at once on any GPU with memory in use; before any console
    # is connected, so the pane must show it as missed.
    client.call("telemetry.configure", {"alerts": {"memory_full": {"threshold": 0, "duration_s": 0}}})
    wait_for(lambda: client.call("telemetry.alerts", {"unseen": True})["alerts"], 30, message="the alert to fire")
    app = GpusApp(client=client)
    bells = []
    app.bell = lambda: bells.append(time.time())
    try:
        async with app.run_test(size=(80, 24)) as pilot:
            await wait_until(pilot, lambda: bells, message="the bell")
            await wait_until(pilot, lambda: any("GPU 0: memory" in n.message and "full for" in n.message for n in app._notifications),
                             message="what fired while nobody watched, in a notification")
            assert any(n.title == "while nobody watched" for n in app._notifications)
            # A toast of several lines (alerts, a failed connection and what to do): each line is
            # cleaned of a host's controls, and the lines show one under the other.
            app.notify(["GPU 1: \x1b[2Jcleared", "press r to try again"], title="two lines", markup=False)
            await wait_until(pilot, lambda: any(n.title == "two lines" for n in app._notifications), message="the toast")
            [toast] = [n for n in app._notifications if n.title == "two lines"]
            assert toast.message == "GPU 1: \\x1b[2Jcleared\npress r to try again"
            await wait_until(pilot, lambda: client.call("telemetry.alerts", {"unseen": True})["alerts"] == [], message="marked seen")
            # A new one while connected rings again.
            rung = len(bells)
            client.call("telemetry.configure", {"alerts": {"temperature": {"threshold": 0, "duration_s": 0}}})
            await wait_until(pilot, lambda: len(bells) > rung, message="the bell for a live alert")
            await wait_until(pilot, lambda: any("GPU 0: temperature" in n.message and "°C" in n.message and n.title == "GPU temperature" for n in app._notifications),
                             message="the live alert in a notification")
    finally:
        client.close()


async def test_a_host_without_nvml_says_so_in_one_line_and_shows_the_host(agent_home, monkeypatch):
    monkeypatch.delenv("SPECDECK_NVML_REPLAY", raising=False)
    client = open_client("local")  # this CI machine has no NVIDIA driver
    app = GpusApp(client=client)
    try:
        async with app.run_test(size=(80, 24)) as pilot:
            pane = app.query_one(GpusPane)
            await wait_until(pilot, lambda: pane.sample and pane.sample["host"].get("cpu_percent") is not None, message="a host sample")
            host = text_of(app, "#gpu-host").splitlines()
            assert len(host) == 2 and host[0].startswith("no GPUs shown: NVML did not start")
            assert host[1].startswith("cpu ") and " mem " in host[1] and "state " in host[1]
            assert not app.query_one("#gpu-rows").display
            assert text_of(app, "#gpu-processes") == "no GPU processes"
            try:
                client.call("telemetry.history", {"metric": "utilization_percent"})
            except RemoteError as exc:  # pragma: no cover - the store is part of the daemon
                raise AssertionError(exc.message)
    finally:
        client.close()
