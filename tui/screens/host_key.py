"""The first-contact question: accept a host key we have never seen, after reading its fingerprint."""

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical
from textual.screen import ModalScreen
from textual.widgets import Button, Label, Static


class HostKeyScreen(ModalScreen[bool]):
    """Shows an unknown host key's type and fingerprint; dismisses with True to accept and remember it."""

    AUTO_FOCUS = "#refuse"  # enter alone must not accept a key
    BINDINGS = [
        Binding("y", "answer(True)", "accept"),
        Binding("n,escape", "answer(False)", "refuse"),
    ]

    def __init__(self, host_key, **kwargs):
        super().__init__(**kwargs)
        self.host_key = host_key

    def compose(self) -> ComposeResult:
        key = self.host_key
        with Vertical(classes="dialog", id="host-key-dialog"):
            yield Label("Unknown host key for %s" % key.name, classes="dialog-title", markup=False)
            yield Static(
                "This console has never connected to this host. Compare the fingerprint with\n"
                "the one the host's administrator gives you (ssh-keygen -lf on the host's key)\n"
                "before accepting: it is then remembered in ~/.ssh/known_hosts.",
                classes="dialog-text",
            )
            yield Label("%s  %s" % (key.key_type, key.fingerprint), id="fingerprint", markup=False)
            with Horizontal(classes="dialog-buttons"):
                yield Button("Accept (y)", variant="warning", id="accept")
                yield Button("Refuse (n)", id="refuse")

    def on_button_pressed(self, event: Button.Pressed):
        event.stop()
        self.dismiss(event.button.id == "accept")

    def action_answer(self, answer):
        self.dismiss(answer)
