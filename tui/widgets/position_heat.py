"""Acceptance by draft position over time: one row per position, one cell per time bucket of the
window, shaded by the rate, the conditional one (accepted at i given i-1 was) or the unconditional
share (of all drafts, those reaching i); the legend says which. A drafter that holds position 0 but
loses position 2 when traffic changes shows it here as a row fading while the others stay.

Cells come from the host's per-position history (`serving.history` metric `per_position`: one
series per position, a bucket's mean of its seconds' shares); the conditional cell is the bucket's
share at i over its share at i-1, undefined (`?`) where that is 0."""

import time

from rich.text import Text
from textual.widgets import Static

from remote.serving.positions import conditional

SHADES = "·░▒▓█"  # 0 to 1 in fifths
STYLES = ("red", "red", "yellow", "green", "bold green")
LABEL_WIDTH = 7
MAX_CELLS = 60
CONDITIONAL, UNCONDITIONAL = "conditional", "unconditional"
LEGEND = {
    CONDITIONAL: "conditional rate (accepted at i given i-1 was)",
    UNCONDITIONAL: "unconditional share (of all drafts, those reaching i)",
}


def shade(rate):
    """The cell of one rate: ` ` no drafts in the bucket, `?` undefined, else a shade of 0..1."""
    if rate is None:
        return "?", "dim"
    level = min(len(SHADES) - 1, int(max(0.0, min(1.0, rate)) * (len(SHADES) - 1) + 0.5))
    return SHADES[level], STYLES[level]


def grid(series, window_s, now_s, cells, mode=CONDITIONAL):
    """Rows of cells, one per position: `series` is {position: [[time, min, mean, max], ...]};
    each cell the mean of the points in its slice of the window (False: no point there), made
    conditional across positions per cell when `mode` says so."""
    positions = sorted(series)
    span_s = float(window_s) / cells
    start_s = now_s - window_s
    means = {p: [[] for _ in range(cells)] for p in positions}
    for position in positions:
        for point in series[position]:
            index = int((point[0] - start_s) // span_s)
            if 0 <= index < cells and point[2] is not None:
                means[position][index].append(point[2])
    rows = [[sum(v) / len(v) if v else False for v in means[p]] for p in positions]
    if mode == CONDITIONAL:
        for index in range(cells):
            column = [row[index] for row in rows]
            if any(value is False for value in column):
                continue
            for position, rate in enumerate(conditional(column)):
                rows[position][index] = rate
    return positions, rows


class PositionHeat(Static):
    """`show(series, window_s, mode)`: the position-by-time view of one server over a window."""

    DEFAULT_CSS = """
    PositionHeat { height: auto; }
    """

    def __init__(self, **kwargs):
        super().__init__(Text(""), **kwargs)
        self.mode = CONDITIONAL
        self._series, self._window_s = {}, None

    def show(self, series, window_s, mode=None):
        self._series, self._window_s = dict(series), window_s
        if mode is not None:
            self.mode = mode
        self.update(self.render_text(time.time()))

    def toggle(self):
        """Conditional <-> unconditional."""
        self.mode = UNCONDITIONAL if self.mode == CONDITIONAL else CONDITIONAL
        self.show(self._series, self._window_s)

    def render_text(self, now_s, width=None):
        text = Text()
        if not self._series or not self._window_s:
            text.append("per position over time: no drafts recorded in the window yet", style="dim")
            return text
        width = width or (self.size.width if self.size.width else 80)
        cells = max(4, min(MAX_CELLS, width - LABEL_WIDTH - 1))
        positions, rows = grid(self._series, self._window_s, now_s, cells, self.mode)
        text.append("per position over time: %s  (p: %s)\n" % (
            LEGEND[self.mode], UNCONDITIONAL if self.mode == CONDITIONAL else CONDITIONAL), style="bold")
        for position, row in zip(positions, rows):
            text.append(("pos %d" % position).ljust(LABEL_WIDTH))
            for value in row:
                if value is False:
                    text.append(" ")
                else:
                    cell, style = shade(value)
                    text.append(cell, style=style)
            text.append("\n")
        text.append(" " * LABEL_WIDTH + "%s = 0 .25 .5 .75 1   blank: no drafts   ?: undefined (none reached it)   "
                    "oldest left, now right" % " ".join(SHADES), style="dim")
        return text


def series_of(reply):
    """{position: points} from a `serving.history` reply for metric per_position."""
    result = {}
    for entry in reply.get("series") or ():
        label = (entry.get("labels") or {}).get("position")
        if isinstance(label, str) and label.isdigit():
            result[int(label)] = entry.get("points") or []
    return result
