"""The form behind `n` in the Downloads pane: what to fetch from the hub, and where on the host.

Submitting calls `download.start` in a worker; the agent resolves the file list and checks
free space first, so a refusal (no such repo, file or revision, a gated repo, no network,
no space) comes back at once as one line, shown under the form. On success the form
dismisses with `{"job": job, "params": params}`.

The host python and endpoint fields start with what is remembered for the host (tui/config.py;
for the endpoint, on this machine, else the console's own HF_ENDPOINT, which a job started
through the daemon would not see), and a line under the endpoint says when it starts with the
one remembered. Nothing is remembered unless asked: the "remember" box beside a field (off at
first) writes what is typed there for the host once the host accepted the download (an empty
endpoint with its box ticked forgets the one remembered). The hub token of the console's
environment goes with the request (never into the params the form hands back).
"""

import functools
import os

from rich.text import Text
from textual import on
from textual.binding import Binding
from textual.containers import Horizontal, Vertical
from textual.screen import ModalScreen
from textual.widgets import Button, Checkbox, Input, Label, Static

from .. import config, display
from ..requests import Requests

START_TIMEOUT_S = 180.0  # the agent may take up to 120 s to resolve the file list

FIELDS = (
    ("repo", "repo", "org/name, e.g. AQ-MedAI/Kimi-K2-Instruct-eagle3"),
    ("files", "files", "space-separated paths in the repo (empty: every file)"),
    ("include", "include patterns", "space-separated globs, e.g. *.json *.safetensors"),
    ("local_dir", "local dir", "directory on the host, e.g. ~/models/k2-eagle3"),
    ("revision", "revision", "branch, tag or commit (empty: main)"),
    ("endpoint", "endpoint", "a hub mirror URL (empty: the host's HF_ENDPOINT, else the hub)"),
    ("python", "host python", "interpreter with huggingface_hub, e.g. ~/venv/bin/python (empty: the agent's)"),
)


# The console's next step for a refusal of this type (the CLI names a flag where the form has a field).
FORM_STEPS = {"NetworkUnreachable": "put a hub mirror's URL in the endpoint field%s"}


def console_hint(error_type, message, in_form=False):
    """The agent's line with the console's next step for its type, if it has one."""
    step = FORM_STEPS.get(error_type)
    if not step or "endpoint field" in message:
        return message
    return "%s; %s" % (message.rstrip("."), step % (" above" if in_form else " of the form n opens"))


def default_endpoint(host):
    """The endpoint the form starts with: the one last used for the host, else on this machine
    the console's HF_ENDPOINT, else none (the host's own HF_ENDPOINT, else the hub)."""
    remembered = config.remembered(host, "hub_endpoint")
    if remembered:
        return remembered
    if config.host_key(host) == config.LOCAL:
        return (os.environ.get("HF_ENDPOINT") or "").strip()
    return ""


def form_params(values):
    """download.start parameters from the form's text fields."""
    return {
        "repo": values.get("repo", "").strip(),
        "repo_type": "model",
        "files": values.get("files", "").split(),
        "include": values.get("include", "").split(),
        "exclude": [],
        "local_dir": values.get("local_dir", "").strip(),
        "revision": values.get("revision", "").strip() or None,
        "endpoint": values.get("endpoint", "").strip() or None,
        "python": values.get("python", "").strip() or None,
    }


class DownloadForm(Requests, ModalScreen):
    """Ask for a repo and a directory, start the download on the host."""

    DEFAULT_CSS = """
    DownloadForm { align: center middle; }
    DownloadForm > Vertical {
        width: 90; max-width: 95%; height: auto; border: thick $accent; background: $surface; padding: 0 1;
    }
    DownloadForm .form-row { height: 1; margin-top: 1; }
    DownloadForm .form-label { width: 18; }
    DownloadForm .form-row Input { width: 1fr; }
    DownloadForm .form-row Checkbox { width: auto; margin-left: 1; }
    DownloadForm #form-endpoint-note { height: auto; padding-left: 18; color: $text-muted; }
    DownloadForm #form-title { text-style: bold; }
    DownloadForm #form-buttons { height: auto; align-horizontal: right; margin-top: 1; }
    DownloadForm #form-error { height: auto; margin-top: 1; color: $error; }
    DownloadForm #form-error.busy { color: $text-muted; }
    """

    BINDINGS = [Binding("escape", "cancel", "cancel")]

    def __init__(self, values=None, host=None):
        super().__init__()
        self.initial = dict(values or {})
        self.host = host
        self.busy = False

    def compose(self):
        host = self._host()
        if not self.initial.get("python"):
            self.initial["python"] = config.remembered(host, "ml_python") or ""
        if not self.initial.get("endpoint"):
            self.initial["endpoint"] = default_endpoint(host)
        with Vertical():
            yield Label("Download from the hub onto the host", id="form-title")
            for key, label, placeholder in FIELDS:
                with Horizontal(classes="form-row"):
                    yield Label(label, classes="form-label")
                    # Compact (borderless) fields: the whole form fits a 24-line terminal.
                    yield Input(value=self.initial.get(key, ""), placeholder=placeholder, id="form-%s" % key.replace("_", "-"), compact=True)
                    if key == "python":
                        yield Checkbox("remember", id="form-remember", compact=True,
                                       tooltip="remember this interpreter for %s (specdeck config)" % config.host_key(host))
                    elif key == "endpoint":
                        yield Checkbox("remember", id="form-remember-endpoint", compact=True,
                                       tooltip="remember this endpoint for %s's later downloads (specdeck config); "
                                               "empty: forget the one remembered" % config.host_key(host))
                if key == "endpoint":
                    note = self._endpoint_note(host, self.initial.get("endpoint"))
                    note_line = Static(note, id="form-endpoint-note")
                    note_line.display = bool(note)
                    yield note_line
            yield Static(id="form-error")
            with Horizontal(id="form-buttons"):
                yield Button("Cancel", id="form-cancel", compact=True)
                yield Button("Download", id="form-submit", variant="primary", compact=True)

    def on_mount(self):
        self.query_one("#form-repo", Input).focus()

    def _host(self):
        return self.host or getattr(self.app, "host", None)

    @staticmethod
    def _endpoint_note(host, shown):
        """That the endpoint the field starts with is the one remembered for the host."""
        remembered = config.remembered(host, "hub_endpoint")
        if not remembered or shown != remembered:
            return Text("")
        # The URL is the field's value at first; a long one would wrap this line at 80 columns.
        return Text("remembered for %s (empty + remember forgets it)" % config.host_key(host))

    def values(self):
        return {key: self.query_one("#form-%s" % key.replace("_", "-"), Input).value for key, _, _ in FIELDS}

    # -- submitting

    @on(Input.Submitted)
    def _enter_in_a_field(self, event):
        event.stop()
        self.submit()

    @on(Button.Pressed, "#form-submit")
    def _submit_pressed(self, event):
        event.stop()
        self.submit()

    @on(Button.Pressed, "#form-cancel")
    def _cancel_pressed(self, event):
        event.stop()
        self.dismiss(None)

    def submit(self):
        if self.busy:
            return
        params = form_params(self.values())
        missing = [name for name, key in (("repo", "repo"), ("local dir", "local_dir")) if not params[key]]
        if missing:
            self._show_error(" and ".join(missing) + (" is" if len(missing) == 1 else " are") + " required")
            return
        self.busy = True
        self._show_error("asking the host to resolve %s ..." % params["repo"], busy=True)
        remember = {"ml_python": self.query_one("#form-remember", Checkbox).value and bool(params["python"]),
                    "hub_endpoint": self.query_one("#form-remember-endpoint", Checkbox).value}
        self._start(params, self._host(), remember)

    def _start(self, params, host, remember):
        # A refusal is said in the form (what was typed stays), so no notification besides.
        self.request("download.start", dict(params, token=config.hub_token()), timeout=START_TIMEOUT_S, group="download-form",
                     exclusive=True, notify=False, prepare=lambda job: self._remember(job, params, host, remember),
                     done=lambda job: self._started(job, params), failed=functools.partial(self._refused, host))

    def _remember(self, job, params, host, remember):
        """On the request's worker (the config is a file): what the user asked this download to
        leave behind, and nothing else."""
        remembered = {"ml_python": params["python"]} if remember["ml_python"] else {}
        if remember["hub_endpoint"] and params["endpoint"] != config.remembered(host, "hub_endpoint"):
            remembered["hub_endpoint"] = params["endpoint"]  # per host; None forgets it
        if remembered:
            try:
                config.remember(host, remembered)
            except (OSError, config.ConfigError) as exc:
                self.app.call_from_thread(self.app.notify, "could not remember %s: %s" % (" and ".join(remembered), exc),
                                          severity="warning", markup=False)
        return job

    def _started(self, job, params):
        self.busy = False
        self.dismiss({"job": job, "params": params})

    def _refused(self, host, failure):
        self.busy = False
        if failure.error_type == "InternalError":
            self._show_error("starting the download failed: %s" % failure)
        elif failure.error_type == "NotConnected":
            self._show_error(failure)
        else:
            message = config.name_host(display.console_next_step(failure, in_download_form=True), host)
            self._show_error(console_hint(failure.error_type, message, in_form=True))

    def _show_error(self, text, busy=False):
        error = self.query_one("#form-error", Static)
        error.update(Text(text))  # the agent's line is not markup
        error.set_class(busy, "busy")

    def action_cancel(self):
        self.dismiss(None)
