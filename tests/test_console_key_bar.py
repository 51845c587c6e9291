"""The key bar lists the keys that work where the focus is, a click on one runs it, and a narrow
terminal gets every key written closer, then over two lines, `? help` always among them; the
help says where the keys work."""

import re

from tests.helpers.pilot import SIZE, connected, screen_lines
from tests.helpers.waits import wait_until
from tui.app import SpecdeckApp
from tui.transport.client import ConnectError
from tui.screens.help import HelpScreen
from tui.widgets.key_bar import Entry, KeyBar, fit


async def test_the_bar_follows_the_focus_and_a_click_runs_the_key(agent_home):
    app = SpecdeckApp(host="local")
    async with app.run_test(size=SIZE) as pilot:
        await connected(pilot)  # the Jobs pane
        bar = app.query_one(KeyBar)
        await wait_until(pilot, lambda: "n new" in str(bar.render()), message="the Jobs pane's keys")
        assert "1-6 panes" in str(bar.render()) and "? help" in str(bar.render())
        await pilot.press("3")  # Downloads: other keys
        await wait_until(pilot, lambda: "x cancel" in str(bar.render()), message="the Downloads pane's keys")
        assert "n new download" in str(bar.render()) and "s stop" not in str(bar.render())
        text = str(bar.render())
        start = text.index(" ? help")
        await pilot.click(KeyBar, offset=(start + 2, 0))
        await wait_until(pilot, lambda: isinstance(app.screen, HelpScreen), message="help opened by a click")


async def test_the_help_says_where_the_brackets_switch_hosts():
    """With several hosts, `[`/`]` switch hosts in the panes that do not step a list of their
    own with them: the help says which, instead of "anywhere"."""

    def down(host, on_state, ask_host_key):
        raise ConnectError("%s is down" % host)

    app = SpecdeckApp(hosts=["alpha", "beta"], connect=down)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("question_mark")
        await wait_until(pilot, lambda: isinstance(app.screen, HelpScreen), message="the help")
        shown = " ".join(re.sub(r"[█▌▐│┃▊▎]", " ", line) for line in screen_lines(app))
        shown = " ".join(shown.split())
        assert "show the next host in the other panes (in Jobs, GPUs, Downloads, Tensors and the Fleet pane;" in shown, shown
        assert "in Speculation and Training [ ] step servers and runs" in shown, shown


def test_a_narrow_bar_writes_its_keys_closer_then_on_two_lines_and_keeps_help():
    pane_keys = [("n", "new download", "new"), ("x", "cancel", "cancel"), ("r", "retry/repair", "retry/repair"),
                 ("v", "verify again", "verify"), ("t", "open in Tensors", "Tensors")]
    app_keys = [("q", "quit", "quit"), ("1-6", "panes", "panes"), ("?", "help", "help")]
    entries = [Entry(key, label, short, True, label, "pane") for key, label, short in pane_keys]
    entries += [Entry(key, label, short, True, label, "app") for key, label, short in app_keys]

    def written(width):
        lines, compact = fit(entries, width, lambda node: node == "app")
        return [(" " if compact else "  ").join("%s %s" % (entry.key, entry.description) for entry in line) for line in lines]

    assert written(120) == ["n new download  x cancel  r retry/repair  v verify again  t open in Tensors  q quit  1-6 panes  ? help"]
    assert written(80) == ["n new x cancel r retry/repair v verify t Tensors q quit 1-6 panes ? help"]
    assert written(40) == ["n new x cancel r retry/repair v verify", "t Tensors q quit 1-6 panes ? help"]
    narrow = written(24)
    assert len(narrow) == 2 and narrow[-1].endswith("1-6 panes ? help") and "q quit" in " ".join(narrow)
