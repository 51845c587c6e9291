"""The Tensors pane: one checkpoint on the host, tensor by tensor, with each tensor's role.

The host reads only the safetensors headers (`checkpoint.inspect`), so a 2 GB drafter lists
in a moment. Problems come first, then the EAGLE-3 shape of the drafter, then the table;
`c` compares it with a second checkpoint (see tui/panes/compare.py).
"""

from rich.text import Text
from textual import on, work
from textual.binding import Binding
from textual.message import Message
from textual.reactive import reactive
from textual.widgets import DataTable, Input, Static

from remote.core.protocol import RemoteError

from ..client import ConnectError
from ..display import format_bytes
from ..screens.compare import CompareScreen
from ..screens.file_picker import FilePicker
from .base import Pane

INSPECT_TIMEOUT_S = 600.0
PROBLEMS_SHOWN = 6
SORT_KEYS = ("name", "size", "dtype")
EAGLE3_FIELDS = (
    ("hidden", "hidden_size"),
    ("target hidden", "target_hidden_size"),
    ("draft vocab", "draft_vocab_size"),
    ("target vocab", "target_vocab_size"),
    ("aux layers", "aux_layer_ids"),
)


def format_shape(shape):
    return "[%s]" % ", ".join(str(n) for n in shape or [])


def _value(value):
    if value is None:
        return "?"
    if isinstance(value, (list, tuple)):
        return format_shape(value)
    return str(value)


def eagle3_summary(report):
    """`format specforge  hidden 7168  target hidden 7168  draft vocab 32000 ...` as styled text."""
    text = Text()
    text.append("format ", style="dim")
    text.append(report.get("format") or "unknown", style="bold")
    eagle3 = report.get("eagle3")
    if not eagle3:
        text.append("  not an EAGLE-3 drafter", style="dim")
        return text
    for label, key in EAGLE3_FIELDS:
        text.append("  %s " % label, style="dim")
        if key == "aux_layer_ids" and eagle3.get(key) is None:
            text.append("not in config (vLLM default: 2, L/2, L-3 of the target)")
        else:
            text.append(_value(eagle3.get(key)))
    return text


def problems_text(problems, limit=PROBLEMS_SHOWN):
    """Errors (red) before warnings (yellow), one a line, at most `limit` lines and a count of the rest."""
    ordered = sorted(problems or [], key=lambda p: p.get("level") != "error")
    text = Text()
    for problem in ordered[:limit]:
        error = problem.get("level") == "error"
        if text:
            text.append("\n")
        text.append("error: " if error else "warning: ", style="bold red" if error else "bold yellow")
        text.append(problem.get("message", ""), style="red" if error else "yellow")
    if len(ordered) > limit:
        text.append("\nand %d more (specdeck inspect lists them all)" % (len(ordered) - limit), style="dim")
    return text


def sort_tensors(tensors, sort_key):
    if sort_key == "size":
        return sorted(tensors, key=lambda t: (-(t.get("bytes") or 0), t["name"]))
    if sort_key == "dtype":
        return sorted(tensors, key=lambda t: (t.get("dtype") or "", t["name"]))
    return sorted(tensors, key=lambda t: t["name"])


def filter_tensors(tensors, text):
    needle = text.strip().lower()
    if not needle:
        return list(tensors)
    return [t for t in tensors if needle in t["name"].lower() or needle in (t.get("role") or "").lower()]


class TensorsPane(Pane):
    """A checkpoint's tensors, problems and EAGLE-3 summary; `open_path` loads one."""

    PANE_TITLE = "Tensors"

    DEFAULT_CSS = """
    TensorsPane { height: 1fr; }
    TensorsPane #tensors-path { height: auto; text-style: bold; }
    TensorsPane #tensors-problems { height: auto; }
    TensorsPane #tensors-summary { height: auto; }
    TensorsPane #tensors-filter { display: none; }
    TensorsPane #tensors-filter.shown { display: block; }
    TensorsPane #tensors-table { height: 1fr; }
    TensorsPane #tensors-role { height: auto; color: $text-muted; }
    TensorsPane #tensors-totals { height: auto; }
    TensorsPane #tensors-status { height: auto; color: $text-muted; }
    TensorsPane #tensors-status.error { color: $error; }
    """

    BINDINGS = [
        Binding("o", "open", "open"),
        Binding("slash", "filter", "filter"),
        Binding("s", "cycle_sort", "sort"),
        Binding("c", "compare", "compare"),
        Binding("escape", "clear_filter", "clear filter", show=False),
    ]

    path: reactive[str] = reactive("", init=False)
    filter_text: reactive[str] = reactive("", init=False)
    sort_key: reactive[str] = reactive("name", init=False)

    class Inspected(Message):
        """A checkpoint report arrived from the host."""

        def __init__(self, path, report):
            super().__init__()
            self.path = path
            self.report = report

    class Compared(Message):
        """Both checkpoints were read and compared."""

        def __init__(self, result, report_a, report_b):
            super().__init__()
            self.result = result
            self.report_a = report_a
            self.report_b = report_b

    class Failed(Message):
        """Reading a checkpoint failed: one line for the user."""

        def __init__(self, path, message):
            super().__init__()
            self.path = path
            self.message = message

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.report = None
        self.shown_tensors = []

    def compose(self):
        yield Static("No checkpoint open: o picks one on the host", id="tensors-path")
        yield Static(id="tensors-problems")
        yield Static(id="tensors-summary")
        table = DataTable(id="tensors-table", cursor_type="row", zebra_stripes=True)
        # The role is a sentence: last, so that shape, dtype and bytes stay on an 80-column screen.
        table.add_column("name", key="name")
        table.add_column("shape", key="shape")
        table.add_column("dtype", key="dtype")
        table.add_column(Text("bytes", justify="right"), key="bytes")
        table.add_column("role", key="role")
        yield table
        # Below the table, as a search line is; and after it in the DOM, so that the table,
        # not a hidden Input, is the pane's first focusable widget.
        yield Input(placeholder="filter: part of a name or a role (Enter keeps it, Esc clears)", id="tensors-filter")
        yield Static(id="tensors-role")  # the highlighted tensor's role in full: the column is cut at 80 columns
        yield Static(id="tensors-totals")
        yield Static("o open  / filter  s sort  c compare", id="tensors-status")

    # -- public

    def open_path(self, path):
        """Inspect the checkpoint at `path` on the host (a directory or a .safetensors file)."""
        self.path = path
        self.query_one("#tensors-path", Static).update(Text(path))
        self._set_status("reading %s on the host ..." % path)
        self._inspect(path)

    # -- workers

    def _client(self):
        return getattr(self.app, "client", None)

    @work(thread=True, exclusive=True, exit_on_error=False, group="tensors-inspect")
    def _inspect(self, path):
        client = self._client()
        if client is None:
            self.post_message(self.Failed(path, "not connected to a host"))
            return
        try:
            report = client.call("checkpoint.inspect", {"path": path, "sha256": False}, timeout=INSPECT_TIMEOUT_S)
        except (RemoteError, ConnectError) as exc:
            self.post_message(self.Failed(path, getattr(exc, "message", None) or str(exc)))
            return
        self.post_message(self.Inspected(path, report))

    @work(thread=True, exclusive=True, exit_on_error=False, group="tensors-compare")
    def _compare(self, report_a, path_b):
        from remote.checkpoints import report as checkpoint  # the same comparison the CLI's `compare` prints

        client = self._client()
        if client is None:
            self.post_message(self.Failed(path_b, "not connected to a host"))
            return
        try:
            report_b = client.call("checkpoint.inspect", {"path": path_b, "sha256": False}, timeout=INSPECT_TIMEOUT_S)
        except (RemoteError, ConnectError) as exc:
            self.post_message(self.Failed(path_b, getattr(exc, "message", None) or str(exc)))
            return
        self.post_message(self.Compared(checkpoint.compare(report_a, report_b), report_a, report_b))

    def on_worker_state_changed(self, event):
        if event.worker.group in ("tensors-inspect", "tensors-compare") and event.worker.error is not None:
            self._set_status("reading the checkpoint failed: %s" % event.worker.error, error=True)

    # -- results

    def on_tensors_pane_inspected(self, message):
        if message.path != self.path:
            return  # an answer for a path the user has since left
        self.report = message.report
        report = message.report
        self.query_one("#tensors-path", Static).update(Text.assemble((report.get("path") or message.path, "bold")))
        problems = self.query_one("#tensors-problems", Static)
        problems.update(problems_text(report.get("problems")))
        problems.display = bool(report.get("problems"))
        self.query_one("#tensors-summary", Static).update(eagle3_summary(report))
        self._fill_table()
        self._set_status("o open  / filter  s sort (%s)  c compare" % self.sort_key)

    def on_tensors_pane_compared(self, message):
        self._set_status("o open  / filter  s sort (%s)  c compare" % self.sort_key)
        self.app.push_screen(CompareScreen(message.result, message.report_a, message.report_b))

    def on_tensors_pane_failed(self, message):
        if message.path == self.path and self.report is not None:
            # Keep showing the checkpoint that is open, under its own name.
            self.path = self.report.get("path") or self.path
            self.query_one("#tensors-path", Static).update(Text(self.path, style="bold"))
        self._set_status("%s: %s" % (message.path, message.message), error=True)

    # -- the table

    def _fill_table(self):
        table = self.query_one("#tensors-table", DataTable)
        table.clear()
        tensors = (self.report or {}).get("tensors") or []
        self.shown_tensors = sort_tensors(filter_tensors(tensors, self.filter_text), self.sort_key)
        for tensor in self.shown_tensors:
            table.add_row(
                Text(tensor["name"]),  # Text, not str: a str cell would be read as markup
                Text(format_shape(tensor.get("shape"))),
                Text(tensor.get("dtype") or ""),
                Text("{:,}".format(tensor.get("bytes") or 0), justify="right"),
                Text(tensor.get("role") or "", style="dim" if not tensor.get("role") else ""),
                key=tensor["name"],
            )
        self._show_totals(tensors)

    def _show_totals(self, tensors):
        totals = self.query_one("#tensors-totals", Static)
        if self.report is None:
            totals.update("")
            return
        tensor_bytes = sum(t.get("bytes") or 0 for t in tensors)
        text = Text()
        text.append("%d tensors  " % len(tensors), style="bold")
        text.append(format_bytes(tensor_bytes, exact=True))
        if self.filter_text.strip():
            shown_bytes = sum(t.get("bytes") or 0 for t in self.shown_tensors)
            text.append('\nshown %d matching "%s"  ' % (len(self.shown_tensors), self.filter_text.strip()), style="dim")
            text.append(format_bytes(shown_bytes, exact=True), style="dim")
        files = self.report.get("files") or []
        if files:
            text.append("\n%d file%s on disk  " % (len(files), "" if len(files) == 1 else "s"), style="dim")
            text.append(format_bytes(self.report.get("total_bytes"), exact=True), style="dim")
        totals.update(text)

    def watch_filter_text(self, value):
        self._fill_table()

    def watch_sort_key(self, value):
        self._fill_table()
        if self.report is not None:
            self._set_status("o open  / filter  s sort (%s)  c compare" % value)

    @on(DataTable.RowHighlighted, "#tensors-table")
    def _row_highlighted(self, event):
        event.stop()
        tensor = next((t for t in self.shown_tensors if t["name"] == event.row_key.value), None)
        role = self.query_one("#tensors-role", Static)
        if tensor is None:
            role.update("")
            return
        role.update(Text.assemble((tensor["name"], "bold"), ": ", tensor.get("role") or "role unknown"))

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

    def action_cycle_sort(self):
        self.sort_key = SORT_KEYS[(SORT_KEYS.index(self.sort_key) + 1) % len(SORT_KEYS)]

    def action_compare(self):
        if self.report is None:
            self._set_status("open a checkpoint first (o), then c compares it with another", error=True)
            return
        self.app.push_screen(FilePicker(self._picker_start(), "Compare %s with ..." % self.path), self._compare_picked)

    def _compare_picked(self, path):
        if path and self.report is not None:
            self._set_status("reading %s on the host to compare ..." % path)
            self._compare(self.report, path)

    def _picker_start(self):
        # Start next to the open checkpoint: its siblings are the likely next pick.
        if not self.path:
            return "~"
        return self.path.rstrip("/").rsplit("/", 1)[0] or "/"

    def _set_status(self, text, error=False):
        status = self.query_one("#tensors-status", Static)
        status.update(Text(text))  # host paths and messages are not markup
        status.set_class(error, "error")
