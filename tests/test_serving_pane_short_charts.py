"""The Speculation pane's accept-length chart never draws a line on a row labelled with another
value (issue 40, item 6): in the console against the real local agent, a server whose accept
length is 2.45 (a real HTTP server serving vLLM's recorded /metrics, counters growing) against a
break-even of 2.05 kept on the host, at 80x24 and at 120x40 beside a K sweep's rows, the chart
either places accept length, break-even and K+1 on rows of their own, each labelled with its
value, or says in words that it is too short and what the values are."""

import json
import re
import sys

import pytest
from textual.widgets import Static

from tests.helpers.pilot import screen_lines, text_of, to_pane
from tests.helpers.sweeps import known_sweep
from tests.helpers.waits import wait_until
from tests.helpers.metrics import DRAFTER, TARGET, WRITE_RESULT, SlowServer
from tui.app import SpecdeckApp
from tui.serving.pane import SpeculationPane
from tui.widgets.chart import TimeChart


def chart_lines(app, chart):
    region = chart.region
    return [line[region.x:region.right] for line in screen_lines(app)[region.y:region.bottom]]


def axis_label(line):
    """The number an axis row is labelled with (`2.05├break-even──`), or None."""
    match = re.match(r"\s*(\d+\.\d+)[┤├]", line)
    return float(match.group(1)) if match else None


@pytest.mark.parametrize("size,sweep", [((80, 24), False), ((120, 40), True)], ids=["80x24", "120x40-with-K-rows"])
async def test_the_accept_length_chart_places_its_lines_or_says_it_is_too_short(client, size, sweep):
    server = SlowServer()
    job = client.call("jobs.submit", {"argv": ["sleep", "600"], "kind": "server", "name": "tiny server (K=3)",
                                      "meta": {"url": server.url, "target": TARGET, "drafter": DRAFTER, "k": 3}})["id"]
    try:
        client.call("serving.set_break_even", {"id": job, "accept_length": 2.05})
        if sweep:
            bench = client.call("jobs.submit", {"argv": [sys.executable, "-c", WRITE_RESULT, json.dumps(known_sweep())], "kind": "benchmark",
                                                "name": "bench --k 1,2,3,4", "meta": {"target": TARGET, "drafter": DRAFTER}})["id"]
        app = SpecdeckApp(host="local")
        async with app.run_test(size=size) as pilot:
            await wait_until(pilot, lambda: app.client is not None, message="the connection")
            await to_pane(pilot, "Speculation")
            pane = app.query_one(SpeculationPane)
            chart = pane.query_one("#spec-accept-chart", TimeChart)
            await wait_until(pilot, lambda: "accept length now 2.45" in text_of(pane.query_one("#spec-summary", Static))
                             and "break-even 2.05" in chart.series_text(), message="accept length 2.45 against break-even 2.05")
            if sweep:
                await wait_until(pilot, lambda: "sweep %s" % bench in text_of(pane.query_one("#spec-k", Static)), message="the sweep's rows")
            await pilot.pause()
            shown = chart_lines(app, chart)
            words = re.sub(r"\s+", " ", " ".join(shown))
            if "too short to draw" in words:
                assert re.search(r"accept length 2\.4\d, break-even 2\.05, K\+1 4\.00 — enlarge the terminal", words), shown
                assert not any(axis_label(line) is not None for line in shown), shown  # no axis left to misread
                return
            [break_even_row] = [index for index, line in enumerate(shown) if "break-even" in line]
            [k_row] = [index for index, line in enumerate(shown) if "K+1" in line]
            accept_rows = [index for index, line in enumerate(shown) if any("\u2800" < char <= "\u28ff" for char in line)]
            assert accept_rows and break_even_row not in accept_rows and k_row not in accept_rows, shown
            step = (4.0 * 1.05 - 1.0) / (sum(1 for line in shown if re.match(r"\s*(\d+\.\d+)?[┤├│]", line)) - 1)
            for row, value in [(break_even_row, 2.05), (k_row, 4.0)] + [(row, 2.45) for row in accept_rows]:
                label = axis_label(shown[row])
                assert label is None or abs(label - value) <= step / 2 + 0.01, (value, shown[row], shown)
    finally:
        client.call("jobs.stop", {"id": job})
        server.close()
