"""A time-series chart with threshold lines, drawn by plotext (through Textualize's
textual-plotext widget): GPU use over a window, accept length against the break-even line,
training loss and accuracy against steps.

Series come as the history store gives them, `[[time, min, mean, max], ...]`, or as plain
`[[x, y], ...]`. The mean is drawn as a line; where a bucket's max differs from its mean the
max is drawn too, faint, so a one-second spike stays visible in a week-long window. The x
axis is "time before now" (`-10m`, `-2h`) for time series and the plain value otherwise. A
chart of a figure that is never negative (tokens/s) is given `y_floor=0`: its axis starts there,
and a flat series (no traffic: all zeros) still has an axis that runs up from it.

A chart too short to put its lines (each threshold, each series' last value) on rows of their
own, each on a row whose axis label is its value to within half a row, says so in words with
the values instead: two plotted rows would draw an accept length of 2.46 on the row labelled
1.00 that also holds the break-even line at 2.05.
"""

import re
import time

from rich.text import Text
from textual_plotext import PlotextPlot

from ..display import format_age

PALETTE = ("cyan", "orange", "green", "magenta", "yellow", "blue", "red", "white")
# Lines closer than this share of the axis may share a row (a chart of 12 rows would draw them
# on one too); lines further apart need rows of their own.
SAME_ROW_SHARE = 1.0 / 12
# The y axis label of a plotted row: the number just left of the frame (`2.05├`, `1.52┤`, `    │`).
ROW_LABEL = re.compile(r"^(.*?)([┤├│])")


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

    def render(self):
        drawn = super().render()
        unplaceable = self._unplaceable(drawn.plain.splitlines())
        if unplaceable is None:
            return drawn
        text = Text(self.title + "\n" if self.title else "", style="bold")
        text.append("too short to draw: %s — enlarge the terminal" % unplaceable)
        return text

    def lines(self):
        """[(label, value, is_threshold)]: what the chart must place, each threshold and each
        series' last value."""
        lines = []
        for label, points in sorted(self._series.items()):
            if points:
                last = points[-1]
                value = last[2] if len(last) >= 4 else last[1]
                if value is not None:
                    lines.append((str(label), value, False))
        lines += [(label or "line", value, True) for value, label in self.thresholds if value is not None]
        return lines

    def _unplaceable(self, built):
        """None when every line is on a row of its own, correctly labelled, in `built` (the
        plotext canvas as text); else the lines in words (`accept length 2.46, break-even 2.05`)."""
        lines = self.lines()
        y_range = self._y_range()
        tops = [index for index, line in enumerate(built) if "┌" in line]
        bottoms = [index for index, line in enumerate(built) if "└" in line]
        if not lines or y_range is None or not tops or not bottoms:
            return None
        rows = built[tops[0] + 1:bottoms[-1]]
        low, high = y_range
        if high - low <= 1e-12:
            return None
        count = len(rows)
        step = (high - low) / max(count - 1, 1)

        def row_of(value):
            return round((high - value) / (high - low) * (count - 1)) if count > 1 else 0

        placed = count >= 2
        for index, (_label, value, threshold) in enumerate(lines):
            row = row_of(value)
            if not 0 <= row < count:
                continue  # off the axis (a y_range that cuts it): not drawn, not misdrawn
            label = _row_label(rows[row])
            if label is not None and abs(label - value) > step / 2 + 1e-9:
                placed = False  # drawn on a row the axis names another value
            for _other, other_value, other_threshold in lines[index + 1:]:
                if (threshold or other_threshold) and abs(other_value - value) >= SAME_ROW_SHARE * (high - low) \
                        and row_of(other_value) == row:
                    placed = False  # two lines apart in value drawn as one
        if placed:
            return None
        return ", ".join("%s %s" % (label, _number(value)) for label, value, _threshold in lines)

    def _y_range(self):
        """(low, high) of the y axis as drawn: the range given, the floored one, or the data's."""
        if self.y_range:
            return tuple(self.y_range)
        if not any(self._series.values()) and not any(value is not None for value, _label in self.thresholds):
            return None
        if self.y_floor is not None:
            return self._floored_range()
        values = []
        for points in self._series.values():
            for point in points:
                mean = point[2] if len(point) >= 4 else point[1]
                values += [mean] + ([point[3]] if len(point) >= 4 and point[3] is not None and mean is not None and point[3] > mean else [])
        values = [value for value in values if value is not None]
        values += [value for value, _label in self.thresholds if value is not None]
        return (min(values), max(values)) if values else None

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


def _row_label(row):
    """The axis label of a plotted row as a number, or None where the row has none (or not one
    that reads as a number)."""
    match = ROW_LABEL.match(row)
    if match is None or not match.group(1).strip():
        return None
    try:
        return float(match.group(1).split()[-1])
    except ValueError:
        return None


def _number(value):
    return "%.2f" % value if abs(value) < 100 else "%.0f" % value
