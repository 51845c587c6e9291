"""The time-series chart: history-store points drawn against "time before now", a threshold
line, a spike kept visible by the bucket's max, and "no data yet" rather than an empty frame; a
chart too short to place its lines on rows of their own says so in words, with the values."""

import html
import re

import pytest
from textual.app import App

from tests.helpers.pilot import screen_lines

from tui.display import format_age
from tui.widgets.chart import TimeChart

NOW = 1_800_000_000.0


def screen_text(app):
    svg = app.export_screenshot()
    return html.unescape(re.sub(r"<[^>]+>", "", svg)).replace("\xa0", " ")


class ChartApp(App):
    def __init__(self, **chart_options):
        super().__init__()
        self.chart = TimeChart(**chart_options)

    def compose(self):
        yield self.chart


async def test_a_window_of_buckets_with_a_threshold_line():
    app = ChartApp(title="accept length", y_label="tokens")
    async with app.run_test(size=(80, 20)) as pilot:
        # 10 min of 10 s buckets [time, min, mean, max]; one bucket held a spike to 4.0.
        points = [[NOW - 600 + 10 * i, 1.8, 2.0, 4.0 if i == 30 else 2.1] for i in range(60)]
        app.chart.show({"j8": points}, window_s=600, now=NOW)
        app.chart.set_thresholds([(2.46, "break-even")])
        await pilot.pause()
        text = screen_text(app)
        assert "accept length" in text
        for label in ("10m", "5m", "now"):
            assert label in text, "the time axis lacks %s" % label
        assert app.chart.series_text() == "j8: 60 points, last 2; threshold break-even 2.46"
        assert "break-even" in text, "the threshold line is not named"
        # The max line is drawn because buckets' max differs from their mean: a spike stays visible.
        assert "4.00" in text, "the one-bucket spike to 4.0 was averaged away"


async def test_no_data_says_so():
    app = ChartApp(title="GPU 0 utilisation")
    async with app.run_test(size=(60, 12)) as pilot:
        app.chart.show({}, window_s=60, now=NOW)
        await pilot.pause()
        assert "no data yet" in screen_text(app)


async def test_curves_against_steps_use_a_plain_axis():
    app = ChartApp(title="loss", time_axis=False)
    async with app.run_test(size=(60, 14)) as pilot:
        app.chart.show({"train/loss": [[step, 5.0 / (1 + step)] for step in range(0, 200, 10)]})
        await pilot.pause()
        assert "190" in screen_text(app) or "200" in screen_text(app)
        assert "ago" not in screen_text(app)


def test_ages_on_the_axis_read_compactly():
    assert [format_age(s) for s in (0, 45, 600, 5400, 7200, 3 * 86400)] == ["now", "45s", "10m", "1.5h", "2h", "3d"]


def chart_rows(app):
    """The chart's plotted rows as the screen shows them (between the frame's top and bottom)."""
    lines = screen_lines(app)
    tops = [index for index, line in enumerate(lines) if "┌" in line]
    bottoms = [index for index, line in enumerate(lines) if "└" in line]
    return lines[tops[0] + 1:bottoms[0]] if tops and bottoms else []


def axis_label(line):
    match = re.match(r"\s*(\d+\.\d+)[┤├]", line)
    return float(match.group(1)) if match else None


async def accept_length_chart(pilot, app):
    """Accept length 2.46 for 5 min against break-even 2.05 and K+1 4 (the Speculation pane's)."""
    points = [[NOW - 300 + 10 * i, 2.46, 2.46, 2.46] for i in range(30)]
    app.chart.thresholds = [(2.05, "break-even"), (4.0, "K+1")]
    app.chart.show({"accept length": points}, window_s=300, now=NOW)
    await pilot.pause()


@pytest.mark.parametrize("height", [6, 8, 10])
async def test_a_chart_too_short_for_its_lines_says_so_in_words(height):
    """Two to six plotted rows: accept length 2.46 would be drawn on the break-even row (or on
    one the axis labels 1.00 or 3.10); the chart says it is too short, with the values."""
    app = ChartApp(title="accept length", y_floor=1.0)
    async with app.run_test(size=(80, height)) as pilot:
        await accept_length_chart(pilot, app)
        text = re.sub(r"\s+", " ", " ".join(screen_lines(app)))
        assert "accept length too short to draw: accept length 2.46, break-even 2.05, K+1 4.00 — enlarge the terminal" in text, text
        assert not chart_rows(app) and "1.00" not in text  # no axis left to misread


async def test_a_chart_tall_enough_draws_each_line_on_its_own_labelled_row():
    app = ChartApp(title="accept length", y_floor=1.0)
    async with app.run_test(size=(80, 12)) as pilot:
        await accept_length_chart(pilot, app)
        rows = chart_rows(app)
        assert "too short" not in screen_text(app)
        [break_even] = [index for index, line in enumerate(rows) if "break-even" in line]
        [ceiling] = [index for index, line in enumerate(rows) if "K+1" in line]
        accept = [index for index, line in enumerate(rows) if any("\u2800" < char <= "\u28ff" for char in line)]
        assert accept and break_even not in accept and ceiling not in accept, rows
        assert axis_label(rows[break_even]) == 2.05 and axis_label(rows[ceiling]) == 4.15, rows


async def test_a_short_chart_whose_line_sits_on_its_own_label_is_drawn():
    """Two plotted rows are enough for a lone series near the top of its axis (tokens/s at 80x24)."""
    app = ChartApp(title="generated tokens/s", y_floor=0.0)
    async with app.run_test(size=(80, 6)) as pilot:
        app.chart.show({"generated tok/s": [[NOW - 300 + 10 * i, 240.0, 240.0, 240.0] for i in range(30)]}, window_s=300, now=NOW)
        await pilot.pause()
        assert "too short" not in screen_text(app) and len(chart_rows(app)) == 2
