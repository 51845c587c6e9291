"""The Tensors pane names each of its keys once, on the console's key bar (issue 40, item 9): its
own status line says what the bar cannot (the order the tensors are in), in the real console at
80x24 against the real local agent, before and after a checkpoint is opened and re-sorted."""

from tests.checkpoint_fixtures import build_drafter
from tests.helpers.pilot import screen_lines, to_pane
from tests.helpers.waits import wait_until
from tui.app import SpecdeckApp
from tui.checkpoints.pane import TensorsPane

KEY_WORDS = ("filter", "compare", "patterns")  # each the label of one of the pane's keys


def times_shown(app, word):
    return sum(line.count(word) for line in screen_lines(app))


async def test_the_tensors_keys_are_shown_once(client, tmp_path):
    drafter = build_drafter(tmp_path / "drafter")
    app = SpecdeckApp(host="local")
    async with app.run_test(size=(80, 24)) as pilot:
        await wait_until(pilot, lambda: app.client is not None, message="the connection")
        await to_pane(pilot, "Tensors")
        await wait_until(pilot, lambda: all(times_shown(app, word) for word in KEY_WORDS), message="the pane's keys on the bar")
        assert {word: times_shown(app, word) for word in KEY_WORDS} == dict.fromkeys(KEY_WORDS, 1), screen_lines(app)
        pane = app.query_one(TensorsPane)
        pane.open_path(str(drafter))
        await wait_until(pilot, lambda: any("sorted by name" in line for line in screen_lines(app)), message="the order said")
        assert {word: times_shown(app, word) for word in KEY_WORDS} == dict.fromkeys(KEY_WORDS, 1), screen_lines(app)
        await pilot.press("s")
        await wait_until(pilot, lambda: any("sorted by size" in line for line in screen_lines(app)), message="the new order said")
        assert {word: times_shown(app, word) for word in KEY_WORDS} == dict.fromkeys(KEY_WORDS, 1), screen_lines(app)
