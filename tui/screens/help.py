"""The key help: every key of the console, listed from the bindings themselves so it cannot drift."""

from rich.table import Table
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Label, Static


def _key_names(binding, app):
    if binding.key_display:
        return binding.key_display
    return ", ".join(app.get_key_display(Binding(key.strip(), "")) for key in binding.key.split(","))


class HelpScreen(ModalScreen[None]):
    """Lists keys by section; `sections` is a list of (title, [Binding, ...])."""

    BINDINGS = [Binding("escape,q,question_mark", "close", "close")]

    def __init__(self, sections, **kwargs):
        super().__init__(**kwargs)
        self.sections = sections

    def compose(self) -> ComposeResult:
        with VerticalScroll(classes="dialog", id="help-dialog"):
            yield Label("Keys", classes="dialog-title")
            for title, bindings in self.sections:
                table = Table.grid(padding=(0, 2))
                table.add_column(style="bold", min_width=12)
                table.add_column()
                seen = set()
                for binding in bindings:
                    if not isinstance(binding, Binding) or not binding.description or binding.system:
                        continue
                    if not binding.show and not binding.tooltip:
                        continue  # e.g. escape closing a search: obvious where it applies
                    if binding.group is not None:
                        if binding.group in seen:
                            continue  # a group (1, 2, 3) is one line, as in the footer
                        seen.add(binding.group)
                    keys = _key_names(binding, self.app)
                    if (keys, binding.description) in seen:
                        continue
                    seen.add((keys, binding.description))
                    table.add_row(keys, binding.tooltip or binding.description)
                if table.row_count:
                    yield Label(title, classes="help-section")
                    yield Static(table)
            yield Label("↑ ↓ to scroll, escape or ? to close", classes="dialog-hint")

    def action_close(self):
        self.dismiss(None)
