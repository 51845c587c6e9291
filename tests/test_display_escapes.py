"""Text from a host is data: a job name, a log, a tensor's name, a path, a receiver's reason
phrase that holds OSC 52 (the clipboard), OSC 0 (the title), CSI 2J (clear the screen), C1, a
bidirectional override or a newline reaches neither the terminal of `specdeck` nor the console's
screen as a control: each shows as a visible escape, and a name stays one row. `logs --raw`
alone writes a log as it is. The real local agent, real processes, a real HTTP receiver."""

import json

import pytest

from tests.checkpoint_fixtures import _t, raw_file
from tests.helpers.cli import run_cli
from tests.helpers.pilot import connected, job_rows, notifications, screen_lines, to_pane
from tests.helpers.waits import wait_for, wait_until
from tests.notify_receiver import Receiver
from tui.app import SpecdeckApp
from tui.transport.connection import open_client
from tui.display import LogFeed, log_text, safe_text
from tui.notify.desktop import sequence

CLIPBOARD = "\x1b]52;c;ZWNobyBwd25lZA==\x07"  # OSC 52: "echo pwned" into the clipboard
TITLE = "\x1b]0;owned\x07"
CLEAR = "\x1b[2J"
# A newline and a made-up row, a C1 CSI, a right-to-left override: what a hostile name holds.
EVIL_NAME = "evil" + CLIPBOARD + TITLE + CLEAR + "\nj99  command  succeeded  fake\x9b6n\u202eend"
# The bytes a terminal would act on: C0 but the CLI's own newline, DEL, C1, bidi controls.
CONTROLS = [chr(c) for c in range(0x20) if c != 0x0A] + ["\x7f"] + [chr(c) for c in range(0x80, 0xA0)] + [
    "\u061c", "\u200e", "\u200f", "\u202a", "\u202b", "\u202c", "\u202d", "\u202e", "\u2066", "\u2067", "\u2068", "\u2069"]


def controls_in(text):
    return sorted({"%04x" % ord(c) for c in text if c in CONTROLS})


def test_safe_text_shows_every_control_as_an_escape_and_keeps_text():
    assert safe_text("plain text: Kimi-K2 λ→μ 日本語 ✓") == "plain text: Kimi-K2 λ→μ 日本語 ✓"
    assert safe_text(CLIPBOARD + TITLE + CLEAR) == "\\x1b]52;c;ZWNobyBwd25lZA==\\x07\\x1b]0;owned\\x07\\x1b[2J"
    assert safe_text("a\nb\tc\rd\x00\x7f\x85\x9b") == "a\\nb\\tc\\rd\\x00\\x7f\\x85\\x9b"
    assert safe_text("abc\u202edef\u2066\u200f\u061c") == "abc\\u202edef\\u2066\\u200f\\u061c"
    for control in CONTROLS + ["\n"]:
        shown = safe_text("x%sy" % control)
        assert not controls_in(shown) and "\n" not in shown and shown.startswith("x\\") and shown.endswith("y"), repr(control)
    assert safe_text("one\ntwo", keep="\n") == "one\ntwo" and safe_text(None) == ""
    # A log line as the log view and `logs` show it: colours dropped, the rest visible.
    assert LogFeed(0).lines("\x1b[31mred\x1b[0m " + TITLE + "t\n50%\r100%\n") == ["red \\x1b]0;owned\\x07t", "100%"]
    # `logs`, piece by piece: a colour cut at a piece's end waits for the rest of it.
    shown, held = log_text("\x1b[31mred\x1b[0m " + TITLE + "\t50%\r\x1b[3")
    assert (shown, held) == ("red \\x1b]0;owned\\x07\t50%\r", "\x1b[3") and log_text(held + "2mok\n") == ("ok\n", "")
    # The desktop notification keeps to its one sequence, the name's escapes visible in it.
    sent = sequence("j1 failed", EVIL_NAME, "osc777")
    assert sent.count("\x1b") == 1 and sent.count("\x07") == 1 and "\\x1b]52" in sent


@pytest.fixture
def evil_job(agent_home):
    """A finished job named EVIL_NAME whose log prints colour, a title sequence and a redrawn bar."""
    client = open_client("local")
    try:
        job = client.call("jobs.submit", {"name": EVIL_NAME, "argv": [
            "printf", "plain\\n\\033[31mred\\033[0m\\n\\033]0;title\\007t\\n50%%\\r100%%\\n"]})
        wait_for(lambda: client.call("jobs.get", {"id": job["id"]})["state"] == "succeeded", message="the job ended")
    finally:
        client.close()
    return job["id"]


def test_the_cli_writes_a_hosts_text_with_visible_escapes(evil_job, tmp_path):
    listed = run_cli("jobs", "local", check=0).stdout
    assert not controls_in(listed), "a control reached the terminal: %s" % controls_in(listed)
    rows = [line for line in listed.splitlines() if line.startswith("j")]
    assert len(rows) == 1 and "fake" in rows[0], "the name's newline split its row: %r" % listed
    assert "evil\\x1b]52;c;ZWNobyBwd25lZA==\\x07\\x1b]0;owned\\x07\\x1b[2J\\nj99" in rows[0] and "\\u202eend" in rows[0]
    as_json = run_cli("jobs", "local", "--json", check=0).stdout
    assert not controls_in(as_json) and json.loads(as_json)[0]["name"] == EVIL_NAME  # JSON keeps the name exact

    log = run_cli("logs", "local", evil_job, check=0).stdout
    assert log == "plain\nred\n\\x1b]0;title\\x07t\n50%\n100%\n"  # the bar's \r kept (text mode reads it as \n)
    raw = run_cli("logs", "local", evil_job, "--raw", check=0).stdout
    assert raw == "plain\n\x1b[31mred\x1b[0m\n\x1b]0;title\x07t\n50%\n100%\n"  # run_cli's text mode reads \r as \n

    # A tensor's name in `inspect`: one row, its controls as escapes; the host's path in an error too.
    folder = tmp_path / ("ck" + TITLE)
    folder.mkdir()
    raw_file(folder / "model.safetensors", {"w" + CLEAR + "\nfake.row": _t("F32", [1], 0, 4)}, b"\0" * 4)
    inspected = run_cli("inspect", "local:%s" % folder, check=0).stdout
    assert not controls_in(inspected), controls_in(inspected)
    assert "w\\x1b[2J\\nfake.row" in inspected and not any(line.lstrip().startswith("fake.row") for line in inspected.splitlines())
    missing = run_cli("inspect", "local:%s" % (folder / "gone"), check=1)
    assert not controls_in(missing.stderr) and "ck\\x1b]0;owned\\x07/gone" in missing.stderr


def test_a_receivers_reason_phrase_is_shown_with_visible_escapes(agent_home, tmp_path):
    receiver = Receiver(mode="500")
    receiver.reason = "Bad" + TITLE + CLEAR + " Gateway"
    try:
        home = tmp_path / "laptop"
        home.mkdir()
        run_cli("notify", "local", "--add", receiver.url + "/hook", "--format", "json", home=home, check=0)
        tested = run_cli("notify", "local", "--test", home=home, check=1)
        assert not controls_in(tested.stdout + tested.stderr), controls_in(tested.stdout + tested.stderr)
        assert "HTTP 500 Bad\\x1b]0;owned\\x07\\x1b[2J Gateway" in tested.stdout
    finally:
        receiver.close()


async def test_the_jobs_pane_shows_a_hosts_name_with_visible_escapes(evil_job):
    app = SpecdeckApp(host="local")
    async with app.run_test(size=(200, 40)) as pilot:
        await connected(pilot)
        await to_pane(pilot, "Jobs")
        await wait_until(pilot, lambda: evil_job in job_rows(app), message="the job listed")
        assert job_rows(app)[evil_job]["name"].startswith("evil\\x1b]52;c;ZWNobyBwd25lZA==\\x07\\x1b]0;owned")
        app.notify("started %s: %s" % (evil_job, EVIL_NAME))  # a toast with a host's name in it
        await wait_until(pilot, lambda: any(evil_job in message for _title, message, _severity in notifications(app)), message="the toast")
        toast = notifications(app)[-1][1]  # what the toast says, as the rack renders it
        assert not controls_in(toast) and toast.startswith("started %s: evil\\x1b]52" % evil_job), toast
        await pilot.pause()
        lines = screen_lines(app)
        shown = "\n".join(lines)
        assert not controls_in(shown), "a control reached the screen: %s" % controls_in(shown)
        assert "evil\\x1b]52" in shown
        assert not any(line.lstrip("│ ").startswith("j99") for line in lines), "the name's newline made a row"
