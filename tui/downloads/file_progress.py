"""One file of a download: its path, state, bytes and a bar."""

from rich.text import Text
from textual.containers import Horizontal
from textual.css.query import NoMatches
from textual.widgets import Label, ProgressBar

from remote.core.words import STOPPED

from ..display import STATE_STYLES, format_bytes, safe_text


class FileProgress(Horizontal):
    """One file of a download: its path, bytes and a bar."""

    DEFAULT_CSS = """
    FileProgress { height: 1; }
    FileProgress > ProgressBar { width: 40; }
    FileProgress > Label { width: 1fr; }
    """

    def __init__(self, entry):
        super().__init__()
        self.path = entry.get("path") or "?"
        self.entry = entry

    def compose(self):
        # The bar first: it keeps its place, and a long path is cut at its end, not the bar.
        yield ProgressBar(total=self.entry.get("bytes_total"), show_eta=False)
        yield Label(self._label())

    def on_mount(self):
        self.call_after_refresh(self.show, self.entry)

    def _label(self):
        entry = self.entry
        label = Text(safe_text(self.path))  # a hub's file name: its controls as escapes
        if entry.get("state"):
            label.append("  " + safe_text(entry["state"]), style=STATE_STYLES.get(entry["state"], ""))
        # A stopped download's file: what stays on disk for the next run, not bytes on their way.
        kept = "kept " if entry.get("state") == STOPPED and entry.get("bytes_done") else ""
        label.append("  %s%s of %s" % (kept, format_bytes(entry.get("bytes_done") or 0), format_bytes(entry.get("bytes_total"))), style="dim")
        return label

    def show(self, entry):
        self.entry = entry
        try:
            label, bar = self.query_one(Label), self.query_one(ProgressBar)
        except NoMatches:
            return  # not composed yet: on_mount shows the latest entry
        label.update(self._label())
        bar.update(total=entry.get("bytes_total"), progress=entry.get("bytes_done") or 0)
