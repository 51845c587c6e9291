"""Dialogs at 80x24 show their whole text (tests/helpers/snapshot.py's fixed host, no agent):
the cancel-download question wraps instead of running under the border, and its buttons do not
both say "Cancel"."""

from textual.widgets import Button

from tests.helpers.pilot import screen_lines
from tests.helpers.snapshot import SnapshotApp, freeze
from tests.helpers.waits import wait_until
from tui.screens.confirm import ConfirmScreen


def shown(app):
    """The dialog's text as the screen shows it, its lines joined."""
    region = app.screen.query_one(".dialog").region
    lines = screen_lines(app)[region.y:region.bottom]
    return " ".join(" ".join(line[region.x:region.right].replace("█", " ").split()) for line in lines)


async def test_the_cancel_download_question_is_whole_at_80x24(monkeypatch):
    freeze(monkeypatch)
    app = SnapshotApp(host="gpu01")
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.pause()
        await pilot.press("3", "down")  # Downloads, j10: still downloading
        await pilot.pause()
        await pilot.press("x")
        await wait_until(pilot, lambda: isinstance(app.screen, ConfirmScreen), message="the cancel question")
        await pilot.pause()
        text = shown(app)
        assert "Cancel j10, the download of team/tiny-drafter?" in text
        assert "The bytes on disk are kept: r starts it again from them." in text
        assert [str(button.label) for button in app.screen.query(Button)] == ["Cancel the download (y)", "Keep it (n)"]
        await pilot.press("n")
        await wait_until(pilot, lambda: not isinstance(app.screen, ConfirmScreen), message="the question answered")

        # A question longer than the dialog is wide goes on over lines, every word of it seen.
        words = ["word%02d" % number for number in range(30)]
        app.push_screen(ConfirmScreen("Cancel " + " ".join(words) + "?"))
        await wait_until(pilot, lambda: isinstance(app.screen, ConfirmScreen), message="the long question")
        await pilot.pause()
        assert " ".join(words) + "?" in shown(app)
