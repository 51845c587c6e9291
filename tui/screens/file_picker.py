"""A modal that walks the host's filesystem through `fs.list` and returns the path picked.

Enter opens a directory or picks a file, `o` picks the highlighted entry itself, directory or
file (a checkpoint is usually a directory), Backspace goes up, and the path Input takes a typed
path (typing "/" or "~" in the list starts one): Enter there picks it, or opens it when it
ends with "/".
"""

import functools
import posixpath

from rich.text import Text
from textual import on
from textual.binding import Binding
from textual.containers import Vertical
from textual.screen import ModalScreen
from textual.widgets import Input, Label, OptionList, Static
from textual.widgets.option_list import Option

from ..display import format_bytes, format_time, safe_text
from ..requests import Requests

LIST_TIMEOUT_S = 30.0
# Two short lines (the dialog is 68 cells wide inside at 80 columns), saying what each key does.
HINT = "Enter open dir/pick file   o pick highlighted   Backspace up\n/ or ~ type a path   Esc cancel"
PARENT = ".."


class FilePicker(Requests, ModalScreen):
    """Pick a file or directory on the host; dismisses with its path, or None on Escape."""

    DEFAULT_CSS = """
    FilePicker { align: center middle; }
    FilePicker > Vertical {
        width: 90%; height: 85%; border: thick $accent; background: $surface; padding: 0 1;
    }
    FilePicker #picker-title { text-style: bold; width: 1fr; }
    FilePicker #picker-entries { height: 1fr; }
    FilePicker #picker-status { height: auto; color: $text-muted; }
    FilePicker #picker-status.error { color: $error; }
    """

    BINDINGS = [
        Binding("escape", "cancel", "cancel"),
        Binding("backspace", "up", "up"),
        Binding("o", "pick_highlighted", "pick highlighted"),
        # As in GTK's file chooser: starting to type a path goes to the path field.
        Binding("slash", "type_path('/')", "type a path", show=False),
        Binding("tilde", "type_path('~')", "type a path", show=False),
    ]

    def __init__(self, start_path="~", title="Pick a checkpoint on the host"):
        super().__init__()
        self.start_path = start_path or "~"
        self.title_text = title
        self.directory = None  # the absolute path now listed, as the host names it
        self.parent_directory = None
        self.entries = []  # option index -> entry dict (None for the ".." row)

    def compose(self):
        with Vertical():
            yield Label(Text(safe_text(self.title_text)), id="picker-title")
            # No select-on-focus: "/" typed in the list must stay the first character of the path.
            yield Input(placeholder="a path on the host (Enter picks it, a trailing / opens it)", id="picker-path", select_on_focus=False)
            yield OptionList(id="picker-entries")
            yield Static(HINT, id="picker-status")

    def on_mount(self):
        self.query_one("#picker-path", Input).value = self.start_path
        self.query_one(OptionList).focus()
        self.list_directory(self.start_path)

    # -- talking to the host

    def list_directory(self, path):
        self._set_status("listing %s ..." % path)
        self._fetch(path)

    def _fetch(self, path):
        # A refusal (no such directory) is said in the picker's status line, not as a notification.
        self.request("fs.list", {"path": path}, done=self._listed, failed=functools.partial(self._list_failed, path),
                     timeout=LIST_TIMEOUT_S, group="picker-list", exclusive=True, notify=False)

    def _listed(self, listing):
        self.directory = listing["path"]
        self.parent_directory = listing.get("parent")
        self.query_one("#picker-path", Input).value = self.directory
        options, self.entries = [], []
        if self.parent_directory and self.parent_directory != self.directory:
            options.append(Option(Text("../", style="bold")))
            self.entries.append(None)
        for entry in listing["entries"]:
            options.append(Option(self._entry_label(entry)))
            self.entries.append(entry)
        entries = self.query_one(OptionList)
        entries.clear_options()
        entries.add_options(options)
        if options:
            entries.highlighted = 1 if self.entries[0] is None and len(options) > 1 else 0
        count = len(listing["entries"])
        note = " (only the first %d shown)" % count if listing.get("truncated") else ""
        self._set_status("%d entr%s%s\n%s" % (count, "y" if count == 1 else "ies", note, HINT))

    def _list_failed(self, path, message):
        self._set_status("%s: %s" % (path, message), error=True)

    @staticmethod
    def _entry_label(entry):
        if entry["dir"]:
            return Text(safe_text(entry["name"]) + "/", style="bold")  # a host's file name: controls as escapes
        size = format_bytes(entry["bytes"])
        return Text.assemble(safe_text(entry["name"]), ("  %s  %s" % (size, format_time(entry.get("mtime"))), "dim"))

    def _set_status(self, text, error=False):
        status = self.query_one("#picker-status", Static)
        status.update(Text(safe_text(text, keep="\n")))  # host paths and messages: not markup, no controls
        status.set_class(error, "error")

    # -- keys

    def _path_of(self, entry):
        return posixpath.join(self.directory, entry["name"])

    def _highlighted_entry(self):
        index = self.query_one(OptionList).highlighted
        if index is None or index >= len(self.entries):
            return None, False
        return self.entries[index], True

    @on(OptionList.OptionSelected, "#picker-entries")
    def _entry_selected(self, event):
        event.stop()
        if event.option_index >= len(self.entries):
            return
        entry = self.entries[event.option_index]
        if entry is None:
            self.action_up()
        elif entry["dir"]:
            self.list_directory(self._path_of(entry))
        else:
            self.dismiss(self._path_of(entry))

    @on(Input.Submitted, "#picker-path")
    def _path_typed(self, event):
        event.stop()
        path = event.value.strip()
        if not path:
            return
        if path.endswith("/") and len(path) > 1:
            self.list_directory(path.rstrip("/"))
            self.query_one(OptionList).focus()
        else:
            self.dismiss(path)

    def action_up(self):
        if self.parent_directory and self.parent_directory != self.directory:
            self.list_directory(self.parent_directory)

    def action_pick_highlighted(self):
        entry, found = self._highlighted_entry()
        if not found:
            if self.directory:
                self.dismiss(self.directory)
            return
        if entry is None:
            self.dismiss(self.parent_directory)
        else:
            self.dismiss(self._path_of(entry))

    def action_type_path(self, start):
        field = self.query_one("#picker-path", Input)
        field.value = start
        field.cursor_position = len(start)
        field.focus()

    def action_cancel(self):
        self.dismiss(None)
