"""Start a job: a command line (split like a shell would, without running one), a name, a
directory, environment additions, an interpreter and a kind, as `specdeck run` takes them.

Bad input (an unfinished quote, an env entry without `=`) is refused in one line inside the
form; the form then submits `jobs.submit` itself, so a refusal by the host is shown there too
and what was typed stays. What was typed also outlives a cancel: opening the form again in
the same console shows it (until a job is started from it). The kind does not: a kind picked
for one command and left in a cancelled form made the next `echo hello` a training job; each
form starts on `command`, and what is submitted is what the form shows.
"""

import shlex
import weakref

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical
from textual.screen import ModalScreen
from textual.widgets import Checkbox, Input, Label, Select, Static

from ..cli.common import env_entries
from ..requests import Requests

KINDS = ("command", "server", "training", "benchmark")  # as `specdeck run --kind`
SUBMIT_TIMEOUT_S = 60.0

FIELDS = (
    ("command", "command", "python train.py --epochs 3  (no pipes or $VARS: bash -c '...')"),
    ("name", "name", "the command line"),
    ("cwd", "directory", "~ (a directory on the host)"),
    ("env", "env", "KEY=VALUE ...  e.g. CUDA_VISIBLE_DEVICES=0 HF_HOME=~/hf"),
    ("interpreter", "interpreter", "run the command under this, e.g. ~/venv/bin/python"),
)

# What was typed, per console (app): kept across cancels and refusals, dropped once a job starts.
_drafts = weakref.WeakKeyDictionary()
DEFAULT_KIND = "command"


def parse_command_line(text):
    """argv from a command line, or ValueError with a human reason."""
    try:
        argv = shlex.split(text)
    except ValueError as exc:  # "No closing quotation"
        raise ValueError("cannot split the command line: %s" % str(exc).lower())
    if not argv:
        raise ValueError("type a command to run, e.g. python train.py --epochs 3")
    return argv


def parse_env(text):
    """{name: value} from `KEY=VALUE` entries split like a shell would, or ValueError saying which
    entry is wrong and how it should read."""
    try:
        entries = shlex.split(text)
    except ValueError as exc:
        raise ValueError("cannot split the env entries: %s" % str(exc).lower())
    return env_entries(entries)


def submit_params(values):
    """jobs.submit parameters from the form's fields, or ValueError with the one line to show."""
    params = {"argv": parse_command_line(values.get("command", "")), "kind": values.get("kind") or "command"}
    env = parse_env(values.get("env", ""))
    if env:
        params["env"] = env
    for key, param in (("name", "name"), ("cwd", "cwd"), ("interpreter", "python")):
        value = values.get(key, "").strip()
        if value:
            params[param] = value
    if values.get("notify"):
        params["notify"] = True  # the host's notification channels say when it ends
    return params


class NewJobScreen(Requests, ModalScreen[dict]):
    """Asks for a command line and the rest of `specdeck run`'s options, starts the job on the
    host; dismisses with the job the host started, or None when cancelled."""

    AUTO_FOCUS = "#command"
    BINDINGS = [Binding("escape", "cancel", "cancel")]

    DEFAULT_CSS = """
    NewJobScreen > Vertical { padding: 0 1; }
    NewJobScreen .form-row { height: 1; margin-top: 1; }
    NewJobScreen .form-label { width: 13; }
    NewJobScreen .form-row Input { width: 1fr; }
    NewJobScreen .form-row Select { width: 24; }
    NewJobScreen .form-row Checkbox { margin-left: 2; }
    NewJobScreen #new-job-error { height: auto; margin-top: 1; }
    NewJobScreen #new-job-error.busy { color: $text-muted; }
    NewJobScreen .dialog-title { margin-bottom: 0; }
    """

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.busy = False

    def compose(self) -> ComposeResult:
        draft = _drafts.get(self.app, {})
        with Vertical(classes="dialog", id="new-job-dialog"):
            yield Label("New job on the host", classes="dialog-title")
            for key, label, placeholder in FIELDS:
                with Horizontal(classes="form-row"):
                    yield Label(label, classes="form-label")
                    # Compact (borderless) fields: the whole form fits a 24-line terminal.
                    yield Input(value=draft.get(key, ""), placeholder=placeholder, id=key, compact=True)
            with Horizontal(classes="form-row"):
                yield Label("kind", classes="form-label")
                yield Select([(kind, kind) for kind in KINDS], value=DEFAULT_KIND, allow_blank=False,
                             id="kind", compact=True)
                yield Checkbox("tell me when it ends", value=bool(draft.get("notify")), id="notify", compact=True)
            yield Static("", id="new-job-error", classes="dialog-error")
            yield Label("enter starts it, tab moves on, escape cancels (what you typed is kept)", classes="dialog-hint")

    def values(self):
        values = {key: self.query_one("#" + key, Input).value for key, _, _ in FIELDS}
        values["kind"] = self.query_one("#kind", Select).value
        values["notify"] = self.query_one("#notify", Checkbox).value
        return values

    def _keep_draft(self):
        draft = self.values()
        del draft["kind"]  # typed text is kept; the kind is chosen again for each job
        _drafts[self.app] = draft

    # -- submitting

    def on_input_submitted(self, event: Input.Submitted):
        event.stop()
        if self.busy:
            return
        values = self.values()
        try:
            params = submit_params(values)
        except ValueError as exc:
            self._show_error(str(exc))
            field = "env" if "env entr" in str(exc) else "command"
            self.query_one("#" + field, Input).focus()
            return
        self._keep_draft()  # a refusal, or a console closed while waiting, keeps it too
        self.busy = True
        self._show_error("starting %s on the host ..." % shlex.join(params["argv"]), busy=True)
        self._submit(params)

    def _submit(self, params):
        # The form shows a refusal itself (what was typed stays), so no notification besides.
        self.request("jobs.submit", params, done=self._started, failed=self._refused, timeout=SUBMIT_TIMEOUT_S,
                     group="new-job", exclusive=True, notify=False)

    def _started(self, job):
        self.busy = False
        _drafts.pop(self.app, None)  # the job is on its way: the next form starts empty
        self.dismiss(job)

    def _refused(self, failure):
        self.busy = False
        if failure.error_type == "InternalError":
            failure = "starting the job failed: %s" % failure
        self._show_error(failure)

    def _show_error(self, text, busy=False):
        error = self.query_one("#new-job-error", Static)
        # One line: the host's message may be long, the form must keep its size at 80x24.
        error.update(Text(" ".join(text.split()), no_wrap=False))
        error.set_class(busy, "busy")

    def action_cancel(self):
        self._keep_draft()
        self.dismiss(None)
