"""Snapshot tests: each pane of the console at 80x24 and at a wide size, with a fixed host
state (tests/snapshot_app.py), compared with the SVGs under tests/__snapshots__/. A layout
that breaks (a column cut, a pane that no longer fits 80x24) fails here.

Update them after a deliberate change of the screen: pytest tests/test_console_snapshots.py --snapshot-update
"""

import pytest

from tests.helpers.snapshot import SnapshotApp, freeze

SIZES = {"80x24": (80, 24), "wide": (160, 48)}


def pane_keys():
    """Every pane but Speculation, which needs a server's figures that the fixed host state has
    none of (it would show "not connected" under a connected header, a state that cannot
    happen): test_console_snapshots_panes.py snapshots it with live figures from a real source."""
    from tui.app import PANES

    return [(str(number), pane.PANE_TITLE.lower()) for number, pane in enumerate(PANES, 1) if pane.PANE_TITLE != "Speculation"]


@pytest.mark.parametrize("size", SIZES, ids=list(SIZES))
@pytest.mark.parametrize("key,pane", pane_keys(), ids=[pane for _, pane in pane_keys()])
def test_pane_layout(snap_compare, monkeypatch, key, pane, size):
    freeze(monkeypatch)

    async def show_pane(pilot):
        await pilot.pause()
        await pilot.press(key)
        await pilot.pause(0.3)

    assert snap_compare(SnapshotApp(host="gpu01"), terminal_size=SIZES[size], run_before=show_pane)


def test_help_screen(snap_compare, monkeypatch):
    freeze(monkeypatch)
    assert snap_compare(SnapshotApp(host="gpu01"), terminal_size=(80, 24), press=["question_mark"])
