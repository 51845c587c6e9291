"""A yes/no question any pane may ask."""

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical
from textual.screen import ModalScreen
from textual.widgets import Button, Label


class ConfirmScreen(ModalScreen[bool]):
    """Ask a yes/no question; dismisses with True only for an explicit yes."""

    AUTO_FOCUS = "#no"  # enter alone must not stop a job
    BINDINGS = [
        Binding("y", "answer(True)", "yes"),
        Binding("n,escape", "answer(False)", "no"),
    ]

    def __init__(self, question, yes_label="Yes", no_label="Cancel", **kwargs):
        super().__init__(**kwargs)
        self.question = question
        self.yes_label = yes_label
        self.no_label = no_label  # not "Cancel" where yes is a cancel: "Cancel the download (y)" / "Keep it (n)"

    def compose(self) -> ComposeResult:
        with Vertical(classes="dialog"):
            yield Label(self.question, classes="dialog-text", markup=False)
            with Horizontal(classes="dialog-buttons"):
                yield Button("%s (y)" % self.yes_label, variant="error", id="yes")
                yield Button("%s (n)" % self.no_label, id="no")

    def on_button_pressed(self, event: Button.Pressed):
        event.stop()
        self.dismiss(event.button.id == "yes")

    def action_answer(self, answer):
        self.dismiss(answer)
