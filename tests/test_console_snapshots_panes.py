"""Snapshots of the Jobs and GPUs panes at 80x24 and 200x50 (tests/snapshot_app.py's fixed
host), and of the GPUs pane of a host without GPUs, which charts the host's CPU and memory.
At 200 columns the job names are whole; at 80 they are cut, never the state or runtime. The
Speculation pane at 80x24 and 120x40 with the figures the host's sampler read from a real HTTP
server serving vLLM's recorded /metrics, on a fixed clock.

Update them after a deliberate change of the screen: pytest tests/test_console_snapshots_panes.py --snapshot-update
"""

import pytest

from tests.helpers.snapshot import NOW, FixedClock, NoGpuSnapshotApp, SnapshotApp, freeze

SIZES = {"80x24": (80, 24), "200x50": (200, 50)}
PANES = {"jobs": "2", "gpus": "1"}


def show(key):
    async def run_before(pilot):
        await pilot.pause()
        await pilot.press(key)
        await pilot.pause(0.3)

    return run_before


@pytest.mark.parametrize("size", SIZES)
@pytest.mark.parametrize("pane", PANES)
def test_pane(snap_compare, monkeypatch, pane, size):
    freeze(monkeypatch)
    assert snap_compare(SnapshotApp(host="gpu01"), terminal_size=SIZES[size], run_before=show(PANES[pane]))


@pytest.mark.parametrize("size", SIZES)
def test_gpus_pane_of_a_host_without_gpus(snap_compare, monkeypatch, size):
    freeze(monkeypatch)
    assert snap_compare(NoGpuSnapshotApp(host="gpu01"), terminal_size=SIZES[size], run_before=show("1"))


# ---------------------------------------------------------------------- the Speculation pane, with figures

SPEC_SIZES = {"80x24": (80, 24), "120x40": (120, 40)}
READS = 30  # seconds of a server read by the host, one read a second


class SteppedClock(FixedClock):
    """The host's clock, one second a read, ending at the snapshot's fixed now."""

    def __init__(self, real, now):
        super().__init__(real)
        self.now = now

    def time(self):
        return self.now


def speculation_figures(monkeypatch):
    """What the host's sampler reads from a real HTTP server serving vLLM's recorded /metrics
    (tests/serving_data), its counters growing by the recording's counts each second, for
    READS seconds before the snapshot's now: the records `serving.follow` sends for the
    console's running server (j8), and its `serving.advise` over 5 min (with `serving.stats`'s figures)."""
    import time as real_time

    from remote.core.feed_source import Budget
    from remote.serving import advice, sampler
    from tests.helpers.metrics import AFTER, MetricsServer, scaled

    clock = SteppedClock(real_time, NOW - READS)
    monkeypatch.setattr(sampler, "time", clock)
    server = MetricsServer()
    try:
        source = sampler.ServerSource("j8", server.url)
        records = []
        for read in range(READS + 1):
            clock.now = NOW - READS + read
            server.text = scaled(AFTER, read)
            record = source.read(Budget(source.deadline_s, source.max_bytes))
            records.append(dict(record, age_s=0.0, stale=False))
        window = dict(sampler.figures_over(list(source.snapshots), 300.0), server="j8", age_s=0.0, stale=False)
    finally:
        server.close()
    per_position = window["per_position"]
    advised = dict(advice.advise(len(per_position), per_position, None), window_s=window["window_s"], num_drafts=window["num_drafts"])
    return records, window, advised


@pytest.mark.parametrize("size", SPEC_SIZES)
def test_speculation_pane_with_live_figures(snap_compare, monkeypatch, size):
    """The Speculation pane as a user sees it once figures come: both charts plotted, the bars
    one line per position, the K rows (one line of them at 80x24), "connected" with figures."""
    freeze(monkeypatch)
    from tui.serving import pane as serving_pane
    from tui.widgets import chart

    records, window, advised = speculation_figures(monkeypatch)
    for module in (serving_pane, chart):
        monkeypatch.setattr(module, "time", FixedClock(__import__("time")))

    async def run_before(pilot):
        await pilot.pause()
        await pilot.press("5")
        await pilot.pause()
        pane = pilot.app.query_one(serving_pane.SpeculationPane)
        serving = pane.model.serving  # what the host's model hears: the follow's records, then one serving.advise
        serving.take_frames(pane, [({"snapshot": {}, "records": records}, 1)])
        serving.take_window(pane, "j8", pane.window_s, dict(advised, window=window))
        await pilot.pause(0.3)

    assert snap_compare(SnapshotApp(host="gpu01"), terminal_size=SPEC_SIZES[size], run_before=run_before)
