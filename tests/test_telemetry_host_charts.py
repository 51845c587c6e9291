"""The GPUs pane on a host without GPUs (this machine: no NVIDIA driver), Pilot against a real
local agent: instead of an empty GPU chart it draws the host's CPU and memory, live and from
the history store, and says so; m (a GPU metric) has nothing to pick."""

from tests.helpers.pilot import GpusApp
from tests.helpers.waits import wait_until
from tui.transport.connection import open_client
from tui.telemetry.pane import GpusPane
from tui.widgets.chart import TimeChart


def chart_series(pane):
    return {name: len(points) for name, points in pane.query_one(TimeChart)._series.items()}


async def test_a_host_without_gpus_charts_its_cpu_and_memory(agent_home, monkeypatch):
    monkeypatch.delenv("SPECDECK_NVML_REPLAY", raising=False)
    client = open_client("local")
    app = GpusApp(client=client)
    try:
        async with app.run_test(size=(80, 24)) as pilot:
            pane = app.query_one(GpusPane)
            await wait_until(pilot, lambda: pane.sample and not (pane.sample.get("nvml") or {}).get("available"), message="a sample")
            chart = pane.query_one(TimeChart)
            await wait_until(pilot, lambda: all(count >= 2 for count in chart_series(pane).values()) and len(chart_series(pane)) == 2,
                             message="CPU and memory points in the chart")
            assert set(chart_series(pane)) == {"cpu", "memory"}
            assert chart.title.startswith("CPU and memory % of the host (no GPUs)")
            memory = [point[2] for point in chart._series["memory"]]
            assert all(0 < value <= 100 for value in memory), memory  # a share of the memory, not bytes
            status = str(pane.query_one(".pane-status").render())
            assert "no GPUs: the chart shows the host's CPU and memory" in status

            # A longer window comes from the store, for the host's series.
            await pilot.press("w")
            await wait_until(pilot, lambda: "last 1h" in chart.title and len(chart_series(pane)) == 2
                             and chart_series(pane)["cpu"] >= 1, message="the hour from the store")
            await pilot.press("m")  # no GPU metric: nothing changes
            assert chart.title.startswith("CPU and memory") and "m metric" not in str(pane.query_one(".pane-status").render())
    finally:
        client.close()
