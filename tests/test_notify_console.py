"""The console while it is open: an alert the host raises reaches the laptop's desktop through
the terminal (the escape sequence written to the app's driver), and the notifications screen
(i, then n) lists the channels with their state and adds one; the new-job form's box asks to be
told when the job ends."""

import pytest

from tests.helpers.notify import status
from tests.helpers.pilot import SIZE, connected, screen_text
from tests.helpers.waits import wait_for, wait_until
from tests.notify_receiver import Receiver
from tui.app import SpecdeckApp
from tui.jobs.new_job import submit_params
from tui.notify.desktop import kind_for, sequence
from tui.notify.screen import NotificationsScreen, parse_add
from tui.screens.host_info import HostInfoScreen


def capture_driver(app):
    """Keep what the app writes to its driver (the terminal), still passing it on."""
    written = []
    original = app._driver.write

    def write(data):
        written.append(data)
        original(data)

    app._driver.write = write
    return written


async def test_an_alert_reaches_the_desktop_through_the_terminal(agent_home, monkeypatch):
    monkeypatch.setenv("TERM_PROGRAM", "WezTerm")
    monkeypatch.delenv("SPECDECK_DESKTOP_NOTIFY", raising=False)
    app = SpecdeckApp(host="local")
    async with app.run_test(size=SIZE) as pilot:
        await connected(pilot)
        written = capture_driver(app)
        # The app follows the host's alerts once connected: a failing job is one.
        job = app.client.call("jobs.submit", {"argv": ["sh", "-c", "exit 7"], "name": "overnight; run"})
        await wait_until(pilot, lambda: any("\x1b]777;notify;" in w for w in written), message="the desktop notification")
        sent = next(w for w in written if "\x1b]777;notify;" in w)
        assert sent.startswith("\x1b]777;notify;%s failed on %s;%s (overnight, run) exited 7 after " % (
            job["id"], app.header.hostname, job["id"]))
        assert sent.endswith("\x07") and sent.count(";") == 3  # the job name's ';' cannot split the fields
        await wait_until(pilot, lambda: any("exited 7" in n.message for n in app._notifications), message="the toast in the app")


@pytest.mark.parametrize("env, kind", [
    ({"TERM_PROGRAM": "iTerm.app"}, "osc9"), ({"WT_SESSION": "x", "TERM": "xterm-256color"}, "osc9"), ({"TERM": "xterm-kitty"}, "osc9"),
    ({"TERM": "foot"}, "osc777"), ({"TERM": "rxvt-unicode-256color"}, "osc777"), ({"TERM_PROGRAM": "ghostty"}, "osc777"),
    ({"TERM_PROGRAM": "tmux", "TERM": "tmux-256color"}, "bell"), ({"TERM": "xterm-256color"}, "bell"),
    ({"TERM": "foot", "SPECDECK_DESKTOP_NOTIFY": "off"}, "off"),
])
def test_each_terminal_gets_the_sequence_it_understands(env, kind):
    assert kind_for(env) == kind


def test_a_name_with_escapes_cannot_break_out_of_the_sequence():
    text = sequence("j1 failed", "name\x1b]0;pwned\x07 done", "osc9")
    assert text.count("\x1b") == 1 and text.count("\x07") == 1 and text.startswith("\x1b]9;specdeck: j1 failed: ")
    assert sequence("a", "b", "bell") == "\x07" and sequence("a", "b", "off") == ""


async def test_the_notifications_screen_lists_adds_and_tests_channels(agent_home):
    receiver = Receiver(mode="500")
    app = SpecdeckApp(host="local")
    try:
        async with app.run_test(size=SIZE) as pilot:
            await connected(pilot)
            app.client.call("notify.add", {"url": receiver.url + "/hook/secret-token-42", "format": "slack", "on": "failed"})
            await pilot.press("i")
            await wait_until(pilot, lambda: isinstance(app.screen, HostInfoScreen), message="the host screen")
            await wait_until(pilot, lambda: "notify" in screen_text(app), message="the notify service listed")
            await pilot.press("n")
            await wait_until(pilot, lambda: isinstance(app.screen, NotificationsScreen), message="the notifications screen")
            await wait_until(pilot, lambda: "c1" in screen_text(app) and "slack" in screen_text(app), message="the channel")
            text = screen_text(app)
            assert "%s/…" % receiver.url in text and "secret-token-42" not in text and "nothing sent yet" in text

            await pilot.press("t")
            await wait_until(pilot, lambda: "c1: test not delivered: HTTP 500" in screen_text(app), message="the test's result")
            await wait_until(pilot, lambda: "last error HTTP 500" in screen_text(app) or "HTTP 500" in screen_text(app), message="its error")

            await pilot.press("a")
            for key in "command true":
                await pilot.press("space" if key == " " else key)
            await pilot.press("enter")
            await wait_until(pilot, lambda: "c2" in screen_text(app) and "command" in screen_text(app), message="the added channel")
            assert [c["format"] for c in app.client.call("notify.list")["channels"]] == ["slack", "command"]
            wait_for(lambda: status(app.client, "c1")["last_error"], message="the error kept")
    finally:
        receiver.close()


def test_the_add_field_and_the_new_job_box():
    assert parse_add("https://ntfy.sh/my-topic ntfy", "failed") == {"url": "https://ntfy.sh/my-topic", "format": "ntfy", "on": "failed"}
    assert parse_add("command mail -s 'specdeck alert' me@example.org") == {
        "argv": ["mail", "-s", "specdeck alert", "me@example.org"], "on": "all"}
    with pytest.raises(ValueError):
        parse_add("command")
    assert submit_params({"command": "python train.py", "notify": True})["notify"] is True
    assert "notify" not in submit_params({"command": "python train.py", "notify": False})
