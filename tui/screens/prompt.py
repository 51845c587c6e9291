"""A one-line answer any pane may ask for."""

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.screen import ModalScreen
from textual.widgets import Input, Label


class PromptScreen(ModalScreen[str]):
    """Ask for one line of text (e.g. a file name); dismisses with None when cancelled."""

    AUTO_FOCUS = "#answer"
    BINDINGS = [Binding("escape", "cancel", "cancel")]

    def __init__(self, question, default="", **kwargs):
        super().__init__(**kwargs)
        self.question = question
        self.default = default

    def compose(self) -> ComposeResult:
        with Vertical(classes="dialog"):
            yield Label(self.question, classes="dialog-text", markup=False)
            yield Input(self.default, id="answer")
            yield Label("enter to confirm, escape to cancel", classes="dialog-hint")

    def on_input_submitted(self, event: Input.Submitted):
        event.stop()
        if event.value.strip():
            self.dismiss(event.value.strip())

    def action_cancel(self):
        self.dismiss(None)
