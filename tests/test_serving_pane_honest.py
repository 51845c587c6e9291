"""The Speculation pane never misleads (issue 40, item 6), in the console against the real local
agent and a real HTTP server serving vLLM's recorded /metrics: a drafter whose every draft is
rejected reads accept length 1.00 over the window with its drafts counted, at 80x24, 120x40 and
a phone's size; on the phone the blocks stand one under another, each line whole."""

import re

import pytest
from textual.widgets import Static

from tests.helpers.metrics import AFTER, MetricsServer, scaled
from tests.helpers.pilot import screen_lines, text_of, to_pane
from tests.helpers.waits import wait_until
from tui.app import SpecdeckApp
from tui.serving.pane import SpeculationPane

PHONE = (64, 60)  # a phone's browser: ~64 columns (tests/test_web_console.py), a tall page
SIZES = [(80, 24), (120, 40), PHONE]
SIZE_IDS = ["80x24", "120x40", "phone"]


class RejectingServer(MetricsServer):
    """Every scrape sees AFTER's drafts once more (62 a second) and no token accepted: the
    random drafter's counters (accept length 1.00)."""

    def __init__(self):
        self.scrapes = 0
        super().__init__()

    @property
    def text(self):
        self.scrapes += 1
        lines = []
        for line in scaled(AFTER, self.scrapes).splitlines():
            if line.startswith("vllm:spec_decode_num_accepted_tokens"):
                line = "%s 0.0" % line.rsplit(" ", 1)[0]
            lines.append(line)
        return "\n".join(lines) + "\n"

    @text.setter
    def text(self, value):
        pass


def words(text):
    return re.sub(r"\s+", " ", text)


@pytest.fixture
def rejecting_server():
    server = RejectingServer()
    yield server
    server.close()


@pytest.mark.parametrize("size", SIZES, ids=SIZE_IDS)
async def test_every_draft_rejected_reads_accept_length_one_with_its_drafts(client, rejecting_server, size):
    client.call("serving.attach", {"url": rejecting_server.url})
    app = SpecdeckApp(host="local")
    async with app.run_test(size=size) as pilot:
        await wait_until(pilot, lambda: app.client is not None, message="the connection")
        await to_pane(pilot, "Speculation")
        pane = app.query_one(SpeculationPane)
        summary = pane.query_one("#spec-summary", Static)
        said = re.compile(r"window 1\.00 \((\d+) drafts\)")
        await wait_until(pilot, lambda: said.search(words(text_of(summary))), message="the window's 1.00 with its drafts")
        shown = words(" ".join(screen_lines(app)))
        drafts = int(said.search(words(text_of(summary))).group(1))
        assert drafts >= 62 and "no drafts in the window" not in shown and "window -" not in shown
        if size == PHONE:  # the blocks one under another: the throughput lines whole, as wide as the screen
            await wait_until(pilot, lambda: "last 10 s: generated" in " ".join(screen_lines(app)), message="the throughput lines whole")
            block = pane.query_one("#spec-throughput-text", Static)
            assert block.region.width >= PHONE[0] - 2, block.region
            assert any(re.search(r"drafted \d+\.\d tok/s", line) for line in screen_lines(app))
