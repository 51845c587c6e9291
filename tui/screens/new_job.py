"""Start a job: a command line (split like a shell would, without running one), a name, a directory."""

import shlex

from textual.app import ComposeResult
from textual.binding import Binding
from textual.markup import escape
from textual.containers import Vertical
from textual.screen import ModalScreen
from textual.widgets import Input, Label


def parse_command_line(text):
    """argv from a command line, or ValueError with a human reason."""
    try:
        argv = shlex.split(text)
    except ValueError as exc:  # "No closing quotation"
        raise ValueError("cannot split the command line: %s" % str(exc).lower())
    if not argv:
        raise ValueError("type a command to run, e.g. python train.py --epochs 3")
    return argv


class NewJobScreen(ModalScreen[dict]):
    """Asks for a command line, an optional name and working directory; dismisses with the
    jobs.submit parameters, or None when cancelled."""

    AUTO_FOCUS = "#command"
    BINDINGS = [Binding("escape", "cancel", "cancel")]

    def compose(self) -> ComposeResult:
        with Vertical(classes="dialog", id="new-job-dialog"):
            yield Label("New job on the host", classes="dialog-title")
            yield Label("Command line (no pipes or $VARS; for those: bash -c '...')")
            yield Input(placeholder="python train.py --epochs 3", id="command")
            yield Label("Name (optional)")
            yield Input(placeholder="the command line", id="name")
            yield Label("Working directory on the host (optional)")
            yield Input(placeholder="~", id="cwd")
            yield Label("", id="new-job-error", classes="dialog-error")
            yield Label("enter to start, tab for the next field, escape to cancel", classes="dialog-hint")

    def on_input_submitted(self, event: Input.Submitted):
        event.stop()
        try:
            argv = parse_command_line(self.query_one("#command", Input).value)
        except ValueError as exc:
            self.query_one("#new-job-error", Label).update(escape(str(exc)))
            self.query_one("#command", Input).focus()
            return
        params = {"argv": argv}
        name = self.query_one("#name", Input).value.strip()
        cwd = self.query_one("#cwd", Input).value.strip()
        if name:
            params["name"] = name
        if cwd:
            params["cwd"] = cwd
        self.dismiss(params)

    def action_cancel(self):
        self.dismiss(None)
