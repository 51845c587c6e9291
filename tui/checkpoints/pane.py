"""The Tensors pane: one checkpoint on the host, tensor by tensor, with each tensor's role.

The host reads only the safetensors headers (`checkpoint.inspect`), so a 2 GB drafter lists
in a moment. Problems come first, then the EAGLE-3 shape of the drafter, then the table
(problems.py, eagle3_summary.py and tensor_table.py beside this module); a checkpoint too large to
send whole is paged from the host as the cursor nears the last row loaded. `c` compares it
with a second checkpoint on the host, where both lie (`checkpoint.compare`: only the result
crosses the wire; see tui/checkpoints/compare.py).
"""

import functools

from rich.text import Text
from textual import on
from textual.binding import Binding
from textual.reactive import reactive
from textual.widgets import DataTable, Input, Static

from ..display import format_bytes, safe_text
from ..pane import Pane
from ..screens.file_picker import FilePicker
from .compare import CompareScreen
from .eagle3_summary import Eagle3Summary
from .problems import CheckpointProblems
from .tensor_table import SORT_KEYS, TensorTable, filter_tensors, sort_tensors

INSPECT_TIMEOUT_S = 600.0
# Tensors a page asks the host for, when a checkpoint is too large to send whole.
PAGE_TENSORS = 500
# Ask for the next page when the cursor comes this close to the last row loaded.
PAGE_AHEAD_ROWS = 50


class TensorsPane(Pane):
    """A checkpoint's tensors, problems and EAGLE-3 summary; `open_path` loads one."""

    PANE_TITLE = "Tensors"
    SHORT_TITLE = "Tens"  # its tab on a narrow terminal (tui/widgets/pane_tabs.py)

    DEFAULT_CSS = """
    TensorsPane { height: 1fr; }
    TensorsPane #tensors-path { height: auto; text-style: bold; }
    TensorsPane #tensors-problems { height: auto; max-height: 4; text-wrap: nowrap; text-overflow: ellipsis; }
    TensorsPane #tensors-summary { height: auto; }
    TensorsPane #tensors-filter { display: none; }
    TensorsPane #tensors-filter.shown { display: block; }
    TensorsPane #tensors-table { height: 1fr; }
    TensorsPane #tensors-role { height: auto; color: $text-muted; }
    TensorsPane #tensors-totals { height: auto; }
    """

    BINDINGS = [
        Binding("o", "open", "open"),
        Binding("slash", "filter", "filter"),
        Binding("s", "cycle_sort", "sort"),
        Binding("c", "compare", "compare"),
        Binding("g", "toggle_groups", "patterns", tooltip="a huge checkpoint's tensors grouped by name pattern, or one by one"),
        Binding("escape", "clear_filter", "clear filter", show=False),
    ]

    path: reactive[str] = reactive("", init=False)
    filter_text: reactive[str] = reactive("", init=False)
    sort_key: reactive[str] = reactive("name", init=False)

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.report = None
        self.shown_tensors = []
        # A checkpoint too large to send whole is paged: the host filters and sorts, and
        # `page_total` tensors match of which `shown_tensors` are loaded so far.
        self.paged = False
        self.page_total = 0
        self.page_loading = False
        self.showing_groups = False

    def compose(self):
        yield Static("No checkpoint open: o picks one on the host", id="tensors-path")
        yield CheckpointProblems(id="tensors-problems")
        yield Eagle3Summary(id="tensors-summary")
        yield TensorTable(id="tensors-table", cursor_type="row", zebra_stripes=True)  # columns: _fill_table
        # Below the table, as a search line is; and after it in the DOM, so that the table,
        # not a hidden Input, is the pane's first focusable widget.
        yield Input(placeholder="filter: part of a name or a role (Enter keeps it, Esc clears)", id="tensors-filter")
        yield Static(id="tensors-role")  # the highlighted tensor's role in full: the column is cut at 80 columns
        yield Static(id="tensors-totals")
        # The keys are on the console's key bar; this line says what they cannot (the order, errors).
        yield self.status_line(id="tensors-status")

    # -- public

    def open_path(self, path):
        """Inspect the checkpoint at `path` on the host (a directory or a .safetensors file)."""
        self.path = path
        self.query_one("#tensors-path", Static).update(Text(safe_text(path)))
        self.set_status("reading %s on the host ..." % path)
        self._inspect(path)

    # -- requests (the pane base runs them; a failure is said in the status line, not a toast)

    def _inspect(self, path):
        self.request("checkpoint.inspect", {"path": path, "sha256": False}, done=functools.partial(self._inspected, path),
                     failed=functools.partial(self._failed, path), timeout=INSPECT_TIMEOUT_S, group="tensors-inspect",
                     exclusive=True, notify=False)

    def _fetch_page(self, handle, path, offset, filter_text, sort_key, append):
        params = {"handle": handle, "path": path, "offset": offset, "limit": PAGE_TENSORS, "filter": filter_text, "sort": sort_key}
        self.request("checkpoint.tensors", params, done=functools.partial(self._paged, handle, append),
                     failed=functools.partial(self._failed, path), timeout=INSPECT_TIMEOUT_S, group="tensors-page",
                     exclusive=True, notify=False)

    def _compare(self, path_a, path_b):
        # The comparison the CLI's `compare` prints, made on the host: neither listing crosses the wire.
        self.request("checkpoint.compare", {"a": path_a, "b": path_b}, done=self._compared, failed=functools.partial(self._failed, path_b),
                     timeout=INSPECT_TIMEOUT_S, group="tensors-compare", exclusive=True, notify=False)

    # -- results

    def _inspected(self, path, report):
        if path != self.path:
            return  # an answer for a path the user has since left
        self.report = report
        self.paged = not report.get("complete", True)
        self.page_total = report.get("tensor_count", len(report.get("tensors") or []))
        self.page_loading = False
        self.showing_groups = False
        self.shown_tensors = list(report.get("tensors") or []) if self.paged else []
        self.query_one("#tensors-path", Static).update(Text.assemble((safe_text(report.get("path") or path), "bold")))
        self.query_one("#tensors-problems", CheckpointProblems).show(report.get("problems"))
        self.query_one("#tensors-summary", Eagle3Summary).show(report, self.page_total if self.paged else None)
        if report.get("eagle3"):  # a drafter: the coverage of the last text measured on the host
            self.request("checkpoint.coverage_last", {"drafter": report.get("path") or path}, failed=lambda message: None,
                         done=functools.partial(self._coverage_came, path, report), notify=False)
        self._fill_table()
        self.set_status(self._sorted_line())

    def _coverage_came(self, path, report, reply):
        if path == self.path and report is self.report:
            self.query_one("#tensors-summary", Eagle3Summary).show(report, self.page_total if self.paged else None, reply.get("result"))

    def _paged(self, handle, append, page):
        self.page_loading = False
        if self.report is None or handle != self.report.get("handle"):
            return  # a page of a checkpoint since closed
        if page.get("filter", "") != self.filter_text.strip() or page.get("sort") != self.sort_key:
            return  # asked for before the filter or the sort changed; the newer request follows
        self.page_total = page["total"]
        if append:
            self.shown_tensors = self.shown_tensors + page["tensors"]
            self.query_one("#tensors-table", TensorTable).add_tensors(page["tensors"])
            self._show_totals()
        else:
            self.shown_tensors = page["tensors"]
            self._fill_table()

    def _compared(self, result):
        self.set_status(self._sorted_line())
        self.app.push_screen(CompareScreen(result, result.get("a"), result.get("b")))

    def _failed(self, path, message):
        self.page_loading = False
        if path == self.path and self.report is not None:
            # Keep showing the checkpoint that is open, under its own name.
            self.path = self.report.get("path") or self.path
            self.query_one("#tensors-path", Static).update(Text(safe_text(self.path), style="bold"))
        self.set_status("%s: %s" % (path, message), error=True)

    def _sorted_line(self):
        """What the status line says of an open checkpoint: the order `s` changes."""
        return "sorted by %s" % self.sort_key

    # -- the table

    def _fill_table(self):
        table = self.query_one("#tensors-table", TensorTable)
        if self.showing_groups:
            table.show_groups((self.report or {}).get("groups") or [])
            self._show_totals()
            return
        if not self.paged:
            tensors = (self.report or {}).get("tensors") or []
            self.shown_tensors = sort_tensors(filter_tensors(tensors, self.filter_text), self.sort_key)
        table.show_tensors(self.shown_tensors)
        if not self.shown_tensors:
            # No row is highlighted, so none says its role: the last checkpoint's must not stay.
            self.query_one("#tensors-role", Static).update("")
        self._show_totals()

    def _show_totals(self):
        totals = self.query_one("#tensors-totals", Static)
        if self.report is None:
            totals.update("")
            return
        if self.paged:
            count, tensor_bytes = self.report.get("tensor_count", 0), self.report.get("tensor_bytes")
        else:
            tensors = self.report.get("tensors") or []
            count, tensor_bytes = len(tensors), sum(t.get("bytes") or 0 for t in tensors)
        text = Text()
        text.append("{:,} tensors  ".format(count), style="bold")
        text.append(format_bytes(tensor_bytes, exact=True))
        if self.filter_text.strip():
            text.append('\nshown {:,} matching "{}"'.format(self.page_total if self.paged else len(self.shown_tensors),
                                                          self.filter_text.strip()), style="dim")
            if not self.paged:
                text.append("  " + format_bytes(sum(t.get("bytes") or 0 for t in self.shown_tensors), exact=True), style="dim")
        if self.paged and len(self.shown_tensors) < self.page_total and not self.showing_groups:
            text.append("\nloaded {:,} of {:,}: more load as you scroll".format(len(self.shown_tensors), self.page_total), style="dim")
        files = self.report.get("files") or []
        if files:
            text.append("\n%d file%s on disk  " % (len(files), "" if len(files) == 1 else "s"), style="dim")
            text.append(format_bytes(self.report.get("total_bytes"), exact=True), style="dim")
        totals.update(text)

    def _reload_pages(self):
        """A new filter or sort of a paged checkpoint: its first page again, from the host."""
        self.page_loading = True
        self._fetch_page(self.report.get("handle"), self.report.get("path") or self.path, 0,
                         self.filter_text.strip(), self.sort_key, False)

    def watch_filter_text(self, value):
        if self.paged and self.report is not None:
            self._reload_pages()
        else:
            self._fill_table()

    def watch_sort_key(self, value):
        if self.paged and self.report is not None:
            self._reload_pages()
        else:
            self._fill_table()
        if self.report is not None:
            self.set_status(self._sorted_line())

    @on(DataTable.RowHighlighted, "#tensors-table")
    def _row_highlighted(self, event):
        event.stop()
        if self.showing_groups:
            return
        if (self.paged and not self.page_loading and len(self.shown_tensors) < self.page_total
                and event.cursor_row >= len(self.shown_tensors) - PAGE_AHEAD_ROWS):
            self.page_loading = True
            self._fetch_page(self.report.get("handle"), self.report.get("path") or self.path, len(self.shown_tensors),
                             self.filter_text.strip(), self.sort_key, True)
        tensor = next((t for t in self.shown_tensors if t["name"] == event.row_key.value), None)
        role = self.query_one("#tensors-role", Static)
        if tensor is None:
            role.update("")
            return
        role.update(Text.assemble((safe_text(tensor["name"]), "bold"), ": ", safe_text(tensor.get("role") or "role unknown")))

    @on(Input.Changed, "#tensors-filter")
    def _filter_changed(self, event):
        event.stop()
        self.filter_text = event.value

    @on(Input.Submitted, "#tensors-filter")
    def _filter_submitted(self, event):
        event.stop()
        self.query_one("#tensors-table", DataTable).focus()

    # -- keys

    def action_open(self):
        self.app.push_screen(FilePicker(self._picker_start(), "Open a checkpoint on the host"), self._picked)

    def _picked(self, path):
        if path:
            self.open_path(path)

    def action_filter(self):
        field = self.query_one("#tensors-filter", Input)
        field.add_class("shown")
        field.focus()

    def action_clear_filter(self):
        field = self.query_one("#tensors-filter", Input)
        field.value = ""
        field.remove_class("shown")
        self.query_one("#tensors-table", DataTable).focus()

    def action_toggle_groups(self):
        if self.report is None:
            return
        self.showing_groups = not self.showing_groups
        self._fill_table()

    def action_cycle_sort(self):
        self.sort_key = SORT_KEYS[(SORT_KEYS.index(self.sort_key) + 1) % len(SORT_KEYS)]

    def action_compare(self):
        if self.report is None:
            self.set_status("open a checkpoint first (o), then c compares it with another", error=True)
            return
        self.app.push_screen(FilePicker(self._picker_start(), "Compare %s with ..." % self.path), self._compare_picked)

    def _compare_picked(self, path):
        if path and self.report is not None:
            self.set_status("reading %s on the host to compare ..." % path)
            self._compare(self.report.get("path") or self.path, path)

    def _picker_start(self):
        # Start next to the open checkpoint: its siblings are the likely next pick.
        if not self.path:
            return "~"
        return self.path.rstrip("/").rsplit("/", 1)[0] or "/"
