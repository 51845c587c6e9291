"""Two checkpoints side by side: can B initialise A's drafter (or the other way round)?

The verdict and its reasons come first, then every tensor with what each side holds,
differences highlighted, then the config fields that differ. The comparison is the host's
`checkpoint.compare`, the same one `specdeck compare` prints.
"""

import json

from rich.text import Text
from textual.binding import Binding
from textual.containers import Vertical
from textual.screen import ModalScreen
from textual.widgets import DataTable, Footer, Static

from remote.checkpoints.compatibility import MATCHING, SAME, SAME_SHAPE, VALUES_DIFFER
from remote.checkpoints.problems import count_text
from remote.checkpoints.tensor_values import SLICE_BYTES

from ..display import safe_text
from .view import compare_status


# Statuses as the rows show them: short, so that the column fits beside the shapes at 80 columns
# (what "values" and "alike" mean is said above the rows when one is shown).
STATUS_WORDS = {"shape differs": "shape", "dtype differs": "dtype", "only in A": "A only", "only in B": "B only",
                VALUES_DIFFER: "values", SAME_SHAPE: "alike"}
STATUS_LEGEND = {VALUES_DIFFER: "values: same shape and dtype, other values",
                 SAME_SHAPE: "alike: same shape and dtype, values not compared"}
STATUS_WIDTH = 6
SIDE_WIDTH_MOST = 20


def describe_side(side):
    """What one checkpoint holds for a tensor row: `[7168,21504] BF16`, or `-` when absent."""
    if side is None:
        return "-"
    if isinstance(side, dict):
        parts = []
        if side.get("shape") is not None:
            parts.append("[%s]" % ",".join(str(n) for n in side["shape"]))
        if side.get("dtype"):
            parts.append(str(side["dtype"]))
        return " ".join(parts) or ", ".join("%s=%s" % item for item in sorted(side.items()))
    if isinstance(side, (list, tuple)):
        return "[%s]" % ",".join(str(n) for n in side)
    return str(side)


def describe_values(values):
    """What was compared of the values, in one line that fits at 80 columns."""
    if not isinstance(values, dict):
        return ""
    if not values.get("compared"):
        return str(values.get("message") or "contents not compared")
    counts = ["%s same" % count_text(values.get("same") or 0), "%s differ" % count_text(values.get("differ") or 0)]
    if values.get("not_compared"):
        counts.append("%s not compared" % count_text(values["not_compared"]))
    return "values (first, middle, last %d KiB): %s" % (SLICE_BYTES // 1024, ", ".join(counts))


def status_style(status):
    if status in MATCHING:
        return ""
    if status and ("only" in status or "missing" in status or status == VALUES_DIFFER):
        return "bold yellow"
    return "bold red"


def config_value(entry, side):
    """One side of a config field that differs: its JSON, or `(not set)` where that side lacks it."""
    present = entry.get("in", "both")
    if present not in ("both", side.upper()):
        return Text("(not set)", style="dim")
    return Text(safe_text(json.dumps(entry.get(side), sort_keys=True)), style="yellow")


class CompareScreen(ModalScreen):
    """The result of comparing checkpoint A (the open one) with B; Escape goes back.

    Modal although it fills the screen: the console's pane keys stay off while it is shown.
    """

    DEFAULT_CSS = """
    CompareScreen { layout: vertical; background: $background; }
    CompareScreen #compare-verdict { height: auto; padding: 0 1; text-style: bold; }
    CompareScreen #compare-verdict.compatible { background: $success 30%; color: $text; }
    CompareScreen #compare-verdict.incompatible { background: $error 30%; color: $text; }
    CompareScreen #compare-reasons { height: auto; max-height: 10; padding: 0 1; }
    CompareScreen #compare-rows { height: 2fr; }
    CompareScreen #compare-config-title { height: auto; padding: 0 1; text-style: bold; }
    CompareScreen #compare-config { height: 1fr; }
    """

    BINDINGS = [
        Binding("escape", "back", "back"),
        Binding("q", "back", "back", show=False),
        Binding("d", "toggle_differences", "differences only"),
    ]

    def __init__(self, result, report_a, report_b):
        super().__init__()
        self.result = result
        self.report_a = report_a or {}
        self.report_b = report_b or {}
        self.differences_only = False

    def compose(self):
        with Vertical():
            yield Static(id="compare-verdict")
            yield Static(id="compare-reasons")
            yield DataTable(id="compare-rows", cursor_type="row", zebra_stripes=True)  # columns: on_mount
            yield Static(id="compare-config-title")
            config = DataTable(id="compare-config", cursor_type="row")
            config.add_column("config field", key="field")
            config.add_column("A", key="a")
            config.add_column("B", key="b")
            yield config
        yield Footer()

    def on_mount(self):
        compatible = compare_status(self.result) == "compatible"
        verdict = self.query_one("#compare-verdict", Static)
        verdict.set_class(compatible, "compatible")
        verdict.set_class(not compatible, "incompatible")
        text = Text()
        text.append("COMPATIBLE" if compatible else "INCOMPATIBLE", style="bold green" if compatible else "bold red")
        text.append(safe_text("\nA  %s (%s)" % (self.report_a.get("path", "?"), self.report_a.get("format", "?")), keep="\n"))
        text.append(safe_text("\nB  %s (%s)" % (self.report_b.get("path", "?"), self.report_b.get("format", "?")), keep="\n"))
        shown, total = len(self.result.get("rows") or []), self.result.get("rows_total", 0)
        if total > shown:
            text.append("\n%d of %d tensor rows shown, the differing ones first" % (shown, total), style="dim")
        values_line = describe_values(self.result.get("values"))
        if values_line:
            text.append("\n" + values_line, style="dim")
        statuses = {row.get("status") for row in self.result.get("rows") or []}
        legend = [words for status, words in STATUS_LEGEND.items() if status in statuses]
        if legend:
            text.append("\n" + "; ".join(legend), style="dim")
        verdict.update(text)
        reasons = Text()
        for reason in self.result.get("reasons") or []:
            if reasons:
                reasons.append("\n")
            reasons.append("- " + safe_text(reason), style="" if compatible else "red")
        self.query_one("#compare-reasons", Static).update(reasons)
        self._fill_rows()
        config_diff = self.result.get("config_diff") or []
        title = "config fields that differ: %d" % len(config_diff) if config_diff else "config fields: no differences"
        self.query_one("#compare-config-title", Static).update(title)
        config = self.query_one("#compare-config", DataTable)
        for entry in config_diff:
            field = str(entry.get("field", "?"))
            config.add_row(Text(safe_text(field)), config_value(entry, "a"), config_value(entry, "b"), key=field)
        self.query_one("#compare-rows", DataTable).focus()

    def _add_columns(self, table):
        """Status first, then the tensor, then A and B: every column inside the screen's width.

        The shapes take what their longest cell needs (at most SIDE_WIDTH_MOST) and the tensor
        name the rest; a longer name is cut (the highlighted row is whole in the CLI's compare).
        """
        if self.result.get("target"):
            table.add_column("result", key="status", width=STATUS_WIDTH)
            table.add_column("check", key="name")
            table.add_column("why", key="a")
            return
        sides = [describe_side(row.get(key)) for row in self.result.get("rows") or [] for key in ("a", "b")]
        side_width = min(SIDE_WIDTH_MOST, max([len(text) for text in sides] + [1]))
        # Each column is padded by one cell on either side; keep two cells for the scrollbar.
        name_width = max(12, self.app.size.width - STATUS_WIDTH - 2 * side_width - 4 * 2 - 2)
        table.add_column("status", key="status", width=STATUS_WIDTH)
        table.add_column("tensor", key="name", width=name_width)
        table.add_column("A", key="a", width=side_width)
        table.add_column("B", key="b", width=side_width)

    def _fill_rows(self):
        table = self.query_one("#compare-rows", DataTable)
        table.clear(columns=True)
        self._add_columns(table)
        if self.result.get("target"):
            for check in self.result.get("checks") or []:
                if self.differences_only and check.get("ok"):
                    continue
                style = "" if check.get("ok") else "bold red"
                table.add_row(Text("ok" if check.get("ok") else "FAILS", style=style), Text(safe_text(check.get("check", "?")), style=style),
                              Text(safe_text(check.get("message", "")), style=style), key=check.get("check"))
            return
        for row in self.result.get("rows") or []:
            status = row.get("status") or SAME
            if self.differences_only and status in MATCHING:
                continue
            style = status_style(status)
            table.add_row(
                Text(STATUS_WORDS.get(status, status), style=style),
                Text(safe_text(row.get("name", "?")), style=style),
                Text(safe_text(describe_side(row.get("a"))), style=style),
                Text(safe_text(describe_side(row.get("b"))), style=style),
                key=row.get("name"),
            )

    def differing_rows(self):
        """Names of the rows shown highlighted (status other than same, or same shape and dtype)."""
        return [row.get("name") for row in self.result.get("rows") or [] if (row.get("status") or SAME) not in MATCHING]

    def action_toggle_differences(self):
        self.differences_only = not self.differences_only
        self._fill_rows()

    def action_back(self):
        self.dismiss(None)
