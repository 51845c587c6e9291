"""The host's notification channels (reached from the host screen, `i`, then `n`): each channel
with its format, its URL masked, the alerts it takes, its quiet hours and how it is doing (a
channel that keeps failing says so, with its last error), the newest alerts the host raised, and
keys to add a channel, send a test, retry what waits and remove one. `specdeck notify` in a
window: the host keeps the channels and sends from its daemon, this screen only asks."""

import shlex

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical
from textual.screen import ModalScreen
from textual.widgets import DataTable, Input, Label, Static

from ..display import safe_text
from ..requests import Requests
from .model import STATE_STYLES, channel_figures, status_text

ADD_HINT = "ntfy topic URL, Slack/Mattermost/Discord/JSON webhook, or: command mail -s specdeck me@example.org"


def parse_add(text, on_text=""):
    """notify.add's params from the add field: a URL (`URL [ntfy|slack|discord|json]`) or
    `command ARGV...`; ValueError with the line to show."""
    try:
        words = shlex.split(text)
    except ValueError as exc:
        raise ValueError("cannot split it: %s" % str(exc).lower())
    if not words:
        raise ValueError("type a URL, or command and the command line")
    params = {"on": on_text.strip() or "all"}
    if words[0] == "command":
        if len(words) < 2:
            raise ValueError("command needs the command line after it, e.g. command mail -s specdeck me@example.org")
        params["argv"] = words[1:]
        return params
    params["url"] = words[0]
    if len(words) > 1:
        params["format"] = words[1]
    return params


class NotificationsScreen(Requests, ModalScreen[None]):
    """Asks the host (notify.list) for its channels when shown and after each change; its recent
    alerts are the host model's records."""

    AUTO_FOCUS = "#channels"
    BINDINGS = [
        Binding("escape,q", "close", "close"),
        Binding("a", "add", "add", tooltip="add a channel: its URL (or command ...) in the field below"),
        Binding("t", "test", "test", tooltip="send a test alert to the selected channel now"),
        Binding("r", "retry", "retry", tooltip="try what waits for the selected channel now"),
        Binding("d", "remove", "remove", tooltip="remove the selected channel"),
    ]

    DEFAULT_CSS = """
    NotificationsScreen #notify-dialog { width: 90%; height: 90%; }
    NotificationsScreen #channels { height: auto; max-height: 50%; }
    NotificationsScreen #recent { height: 1fr; }
    NotificationsScreen .form-row { height: 1; margin-top: 1; }
    NotificationsScreen .form-label { width: 8; }
    NotificationsScreen .form-row Input { width: 1fr; }
    NotificationsScreen #notify-on { width: 28; margin-left: 1; }
    NotificationsScreen #notify-said { height: auto; margin-top: 1; }
    NotificationsScreen #notify-said.busy { color: $text-muted; }
    """

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.channels = []

    def compose(self) -> ComposeResult:
        with Vertical(classes="dialog", id="notify-dialog"):
            yield Label("Notifications: where the host sends alerts while no console is open", classes="dialog-title")
            yield DataTable(id="channels", cursor_type="row", zebra_stripes=True)
            with Horizontal(classes="form-row"):
                yield Label("add", classes="form-label")
                yield Input(placeholder=ADD_HINT, id="notify-add", compact=True)
                yield Input(placeholder="on: all, or failed,gpu,...", id="notify-on", compact=True)
            yield Static("", id="notify-said", classes="dialog-error")
            yield Label("Recent alerts", classes="help-section")
            yield Static("", id="recent")
            yield Label("a add  t test  r retry  d remove  escape close", classes="dialog-hint")

    def on_mount(self):
        table = self.query_one("#channels", DataTable)
        table.add_columns("id", "format", "where", "on", "quiet", "state", "how")
        self._shown_version = None
        self._show_recent()
        self.set_interval(1.0, self._show_recent)  # an alert the host raises meanwhile shows at once
        self.reload()

    # -- asking the host (threads; answers come back as messages)

    def not_connected(self, failed):
        self._say("not connected to the host", error=True)

    def _refused(self, failure):
        self._say(failure, error=True)

    def reload(self):
        self.request("notify.list", done=self._loaded, failed=self._refused, notify=False, timeout=30,
                     group="notify-list", exclusive=True)

    def _do(self, method, params, done_text):
        def done(reply):
            if method == "notify.test":
                if reply["delivered"]:
                    self._say("%s: test delivered" % reply["id"])
                else:
                    self._say("%s: test not delivered: %s" % (reply["id"], reply["error"]), error=True)
            else:
                self._say(done_text(reply))
            self.reload()

        self.request(method, params, done=done, failed=self._refused, notify=False, timeout=60, group="notify-do")

    # -- what came back

    def _loaded(self, reply):
        self.channels = reply.get("channels") or []
        table = self.query_one("#channels", DataTable)
        table.clear()
        for channel in self.channels:
            status = channel.get("status") or {}
            state = status.get("state") or "?"
            shown = channel_figures(channel)
            # Text, not str: a str cell would be read as markup.
            table.add_row(*(Text(shown[key]) for key in ("id", "format", "where", "on", "quiet")),
                          Text(safe_text(state), style=STATE_STYLES.get(state, "")), Text(status_text(status)), key=channel["id"])
        if not self.channels:
            self._say("no channels yet: alerts reach an open console only. Type a URL below and press enter.")
        self.model.alerts.take(reply.get("recent") or [], self.model.host)
        self._show_recent()

    def _show_recent(self):
        """The host's newest alerts, from the host model's records (notify.list's and those
        notify.follow brought since), redrawn when they moved."""
        alerts = self.model.alerts
        if alerts.version == self._shown_version:
            return
        self._shown_version = alerts.version
        lines = [safe_text("%s  %s" % (record.alert.get("time_text", "?"), record.alert.get("message", "")))
                 for record in alerts.newest(12)]
        self.query_one("#recent", Static).update(Text("\n".join(lines) or "none yet"))

    def _say(self, text, error=False):
        said = self.query_one("#notify-said", Static)
        said.update(Text(safe_text(" ".join(text.split()))))
        said.set_class(not error, "busy")

    # -- keys

    def _selected(self):
        table = self.query_one("#channels", DataTable)
        if not self.channels or table.cursor_row is None or table.cursor_row >= len(self.channels):
            self._say("no channel selected", error=True)
            return None
        return self.channels[table.cursor_row]["id"]

    def action_add(self):
        self.query_one("#notify-add", Input).focus()

    def on_input_submitted(self, event: Input.Submitted):
        event.stop()
        try:
            params = parse_add(self.query_one("#notify-add", Input).value, self.query_one("#notify-on", Input).value)
        except ValueError as exc:
            self._say(str(exc), error=True)
            return
        self.query_one("#notify-add", Input).value = ""
        self._say("adding ...")
        self._do("notify.add", params, lambda reply: "added %s (test it with t)" % reply["channel"]["id"])

    def action_test(self):
        channel_id = self._selected()
        if channel_id:
            self._say("sending a test to %s ..." % channel_id)
            self._do("notify.test", {"id": channel_id}, None)

    def action_retry(self):
        channel_id = self._selected()
        if channel_id:
            self._do("notify.retry", {"id": channel_id}, lambda reply: "%s: trying now" % channel_id)

    def action_remove(self):
        channel_id = self._selected()
        if channel_id:
            self._do("notify.remove", {"id": channel_id}, lambda reply: "removed %s" % reply["removed"])

    def action_close(self):
        self.dismiss(None)
