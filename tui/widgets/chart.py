"""A time-series chart with threshold lines, drawn by plotext (through Textualize's
textual-plotext widget): GPU use over a window, accept length against the break-even line,
training loss and accuracy against steps.

Series come as the history store gives them, `[[time, min, mean, max], ...]`, or as plain
`[[x, y], ...]`. The mean is drawn as a line; where a bucket's max differs from its mean the
max is drawn too, faint, so a one-second spike stays visible in a week-long window. The x
axis is "time before now" (`-10m`, `-2h`) for time series and the plain value otherwise. A
chart of a figure that is never negative (tokens/s) is given `y_floor=0`: its axis starts there,
and a flat series (no traffic: all zeros) still has an axis that runs up from it.
"""

import time

from textual_plotext import PlotextPlot

from ..display import format_age

PALETTE = ("cyan", "orange", "green", "magenta", "yellow", "blue", "red", "white")


class TimeChart(PlotextPlot):
    """`show(series, window_s)`; `thresholds = [(value, label)]` draws horizontal lines."""

    DEFAULT_CSS = """
    TimeChart { height: 1fr; min-height: 6; }
    """

    def __init__(self, title="", y_label="", time_axis=True, y_range=None, y_floor=None, **kwargs):
        super().__init__(**kwargs)
        self.title = title
        self.y_label = y_label
        self.time_axis = time_axis
        self.y_range = y_range  # (low, high), or None to fit the data
        self.y_floor = y_floor  # the lowest value the figure can take (0 for a rate), or None
        self.thresholds = []
        self._series = {}
        self._window_s = None
        self._now = None

    def show(self, series, window_s=None, now=None):
        """Draw `series` ({label: points}) over the last `window_s` seconds (time axis) or all."""
        self._series = series
        self._window_s = window_s
        self._now = now
        self.replot()

    def set_thresholds(self, thresholds):
        self.thresholds = list(thresholds)
        self.replot()

    def replot(self):
        plt = self.plt
        plt.clear_data()
        plt.clear_figure()
        plt.title(self.title)
        now = self._now if self._now is not None else time.time()
        drawn = False
        for index, (label, points) in enumerate(sorted(self._series.items())):
            if not points:
                continue
            color = PALETTE[index % len(PALETTE)]
            xs = [self._x(point[0], now) for point in points]
            means = [point[2] if len(point) >= 4 else point[1] for point in points]
            plt.plot(xs, means, label=str(label) if len(self._series) > 1 else None, color=color, marker="braille")
            if any(len(point) >= 4 and point[3] is not None and point[3] > point[2] for point in points):
                plt.plot(xs, [point[3] for point in points], color=color, marker="dot")
            drawn = True
        left = -(self._window_s or 60) if self.time_axis else min((p[0] for pts in self._series.values() for p in pts), default=0)
        for value, label in self.thresholds:
            if value is not None:
                plt.hline(value, "red")
                if label:
                    plt.text(label, x=left, y=value, color="red", alignment="left")
                drawn = True
        if self.y_range:
            plt.ylim(*self.y_range)
        elif drawn and self.y_floor is not None:
            plt.ylim(*self._floored_range())
        if self.time_axis:
            span = self._window_s or 60
            plt.xlim(-span, 0)
            ticks = [-span, -span * 3 / 4, -span / 2, -span / 4, 0]
            plt.xticks(ticks, [format_age(-tick) for tick in ticks])
        if self.y_label:
            plt.ylabel(self.y_label)
        if not drawn:
            plt.title("%s (no data yet)" % self.title if self.title else "no data yet")
        self.refresh()

    def _floored_range(self):
        """(low, high) of the y axis of a chart with a floor: from the floor to the highest value
        or threshold drawn (a bucket's max included), and a span of 1 when all sit on the floor
        (plotext would run a flat 0 from -1.00 to 0.00)."""
        values = [value for points in self._series.values() for point in points for value in point[1:] if value is not None]
        values += [value for value, _label in self.thresholds if value is not None]
        high = max(values + [self.y_floor])
        span = high - self.y_floor
        return (self.y_floor, self.y_floor + (span * 1.05 if span > 1e-9 else 1.0))

    def _x(self, value, now):
        return value - now if self.time_axis else value

    def series_text(self):
        """What the chart holds, in words (for tests and screen readers): label, points, last value."""
        parts = []
        for label, points in sorted(self._series.items()):
            last = points[-1] if points else None
            value = None if last is None else (last[2] if len(last) >= 4 else last[1])
            parts.append("%s: %d points, last %s" % (label, len(points), "-" if value is None else "%.3g" % value))
        parts += ["threshold %s %.3g" % (label, value) for value, label in self.thresholds if value is not None]
        return "; ".join(parts)
