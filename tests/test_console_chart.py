"""The time-series chart: history-store points drawn against "time before now", a threshold
line, a spike kept visible by the bucket's max, and "no data yet" rather than an empty frame."""

import html
import re

from textual.app import App

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
