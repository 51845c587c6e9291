"""Snapshots of the Jobs and GPUs panes at 80x24 and 200x50 (tests/snapshot_app.py's fixed
host), and of the GPUs pane of a host without GPUs, which charts the host's CPU and memory.
At 200 columns the job names are whole; at 80 they are cut, never the state or runtime.

Update them after a deliberate change of the screen: pytest tests/test_console_snapshots_panes.py --snapshot-update
"""

import pytest

from tests.helpers.snapshot import NoGpuSnapshotApp, SnapshotApp, freeze

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
