"""The console: a connection header, the panes a key away, a footer.

The app paints at once and connects in a thread worker; the client heals the link on its
own and reports its state, which the header shows. The list of panes, PANES, drives the
number keys, the tabs and the help screen. The app holds the one subscription to the host's
job events and hands every pane the job book (attributes down); panes post messages up
(OpenCheckpoint) and never call each other. Panes read `app.client` (None until connected)
and do their own requests in workers (tui/pane.py).
"""

import os
import threading

from textual import work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.screen import ModalScreen
from textual.widgets import TabbedContent, TabPane
from textual.worker import Worker, WorkerState

from remote.core.protocol import RemoteError

from .checkpoints.pane import TensorsPane
from .client import ConnectError
from .downloads.pane import DownloadsPane
from .jobs.pane import JobsPane
from .messages import AgentError, ClientReady, ConnectionChanged
from .notify.desktop import HostAlerts, alerts_notification, kind_for, sequence
from .notify.screen import NotificationsScreen
from .pane_host import PaneHost
from .screens.help import HelpScreen
from .screens.host_info import HostInfoScreen
from .screens.host_key import HostKeyScreen
from .serving.pane import SpeculationPane
from .telemetry.pane import GpusPane
from .training.pane import TrainingPane
from .widgets.header import ConnectionHeader
from .widgets.key_bar import KeyBar

PANES = (GpusPane, JobsPane, DownloadsPane, TensorsPane, SpeculationPane, TrainingPane)  # in key order: 1, 2, 3, ...
PANES_GROUP = Binding.Group("panes", compact=True)


def pane_id(pane_class):
    """The TabPane id: `jobs`, `downloads`, `tensors`."""
    return pane_class.PANE_TITLE.lower().replace(" ", "-")


def pane_bindings(panes):
    """Number keys 1..N, one per pane, shown as one `1-N panes` entry in the footer."""
    return [
        Binding(str(number), "show_pane(%d)" % (number - 1), "panes", key_display="1-%d" % len(panes), show=number == 1, group=PANES_GROUP)
        for number in range(1, len(panes) + 1)
    ]


class SpecdeckApp(PaneHost):
    """specdeck's console for one host."""

    TITLE = "specdeck"
    CSS_PATH = "app.tcss"
    ENABLE_COMMAND_PALETTE = False
    BINDINGS = [Binding("q", "quit", "quit")] + pane_bindings(PANES) + [
        Binding("question_mark", "help", "help", tooltip="this list of keys"),
        Binding("i", "host_info", "host", show=False, tooltip="the host: agent, what it can use, the daemon's services and how each is doing"),
        Binding("r", "reconnect", "reconnect", show=False, tooltip="connect again after a failure"),
    ]

    def __init__(self, host="local", python="python3", accept_new=False, **kwargs):
        super().__init__(**kwargs)
        if "TEXTUAL_ANIMATIONS" not in os.environ:
            # A tab's sliding underline redrew the screen ~35 times per pane switch, which the
            # next key waited behind; a console watched over SSH has no use for it.
            self.animation_level = "none"
        self.host = host or "local"
        self.python = python
        self.accept_new = accept_new
        self.connection_state = "connecting"
        self.pane_classes = PANES
        self._quitting = threading.Event()
        self.header = ConnectionHeader(self.host, id="header")

    # ------------------------------------------------------------------ layout

    def compose(self) -> ComposeResult:
        yield self.header
        with TabbedContent(id="panes"):
            for number, pane_class in enumerate(self.pane_classes, 1):
                with TabPane("%d %s" % (number, pane_class.PANE_TITLE), id=pane_id(pane_class)):
                    yield pane_class()
        yield KeyBar()

    def on_mount(self):
        self.set_interval(1.0, self._show_rtt)
        self.activate(pane_id(self.pane_classes[0]))
        self._connect()

    def action_show_pane(self, index):
        if index >= len(self.pane_classes):
            self.notify("no pane %d yet" % (index + 1), severity="warning")
            return
        # Focus follows in on_tabbed_content_tab_activated, once: each focus change restyles.
        self.show_tab(pane_id(self.pane_classes[index]))

    def check_action(self, action, parameters):
        # Pane keys belong to the screen below a dialog, not to the dialog.
        if action in ("show_pane", "reconnect", "host_info") and isinstance(self.screen, ModalScreen):
            return False
        if action == "reconnect":
            return self.connection_state == "failed"
        return True

    def action_host_info(self):
        if isinstance(self.screen, HostInfoScreen):
            return
        if self.client is None:
            self.notify("not connected to the host yet", severity="warning")
            return
        self._show_host_info(self.client)

    @work(thread=True, exclusive=True, group="host-info", exit_on_error=False)
    def _show_host_info(self, client):
        try:
            info = client.call("daemon.info", timeout=15)
        except (RemoteError, ConnectError) as exc:
            self.post_message(AgentError(getattr(exc, "message", None) or str(exc), "host info"))
            return
        self.call_from_thread(self.push_screen, HostInfoScreen(info))

    def action_notifications(self):
        """The host's notification channels: `n` on the host screen asks for them."""
        self.push_screen(NotificationsScreen())

    def action_help(self):
        if isinstance(self.screen, HelpScreen):
            return
        sections = [("Anywhere", self.BINDINGS)]
        for pane_class in self.pane_classes:
            bindings = list(getattr(pane_class, "HELP_BINDINGS", ())) + list(getattr(pane_class, "BINDINGS", []))
            sections.append((pane_class.PANE_TITLE, bindings))
        # The keys do not change while the app runs: build the screen once, show it again after.
        if not self.is_screen_installed("help"):
            self.install_screen(HelpScreen(sections), name="help")
        self.push_screen("help")

    # ------------------------------------------------------------------ connection

    @work(thread=True, exclusive=True, group="connect", exit_on_error=False)
    def _connect(self):
        from .connection import open_client

        try:
            client = open_client(self.host, python=self.python, accept_new=self._ask_host_key, reconnect=True, on_state=self._on_state)
        except ConnectError as exc:
            # A message written for the CLI (a flag to pass) may have the console's own words.
            self.post_message(ConnectionChanged("failed", {"error": getattr(exc, "console_message", None) or str(exc)}))
            return
        if self._quitting.is_set():
            client.close()
            return
        self.client = client
        hello = client.hello or {}
        self.post_message(ClientReady(hello.get("hostname", ""), hello.get("user", "")))

    def _on_state(self, state, detail):
        """The client's state callback; runs on one of its threads."""
        if state != "closed":
            self.post_message(ConnectionChanged(state, dict(detail)))

    def _ask_host_key(self, host_key):
        """Runs on the connecting thread: ask in a dialog and wait for the answer."""
        if self.accept_new:
            return True
        answered = threading.Event()
        answer = {"accept": False}

        def on_answer(accept):
            answer["accept"] = bool(accept)
            answered.set()

        self.call_from_thread(self.push_screen, HostKeyScreen(host_key), on_answer)
        while not answered.wait(0.2):
            if self._quitting.is_set():
                return False
        return answer["accept"]

    def on_connection_changed(self, message: ConnectionChanged):
        if message.state == "connected" and self.client is None:
            return  # the first link, before open_client() returned: ClientReady says it, with the client in place
        self.connection_state = message.state
        header = self.header
        header.state = message.state
        header.detail = message.detail
        self._show_rtt()
        if message.state == "failed":
            reason = message.detail.get("error") or "the connection failed"
            next_step = "" if "press r" in reason else "\npress r to try again"
            self.notify(reason + next_step, title="cannot connect to %s" % self.host, severity="error", timeout=15, markup=False)
        self.refresh_bindings()

    def on_client_ready(self, message: ClientReady):
        self.connection_state = "connected"
        header = self.header
        header.state, header.detail = "connected", {}
        header.hostname = message.hostname
        if message.user:
            host = message.hostname if self.host == "local" else self.host.split("@")[-1]
            header.host_label = "%s@%s" % (message.user, host)
        for pane_class in self.pane_classes:
            for pane in self.query(pane_class):
                pane.post_message(ClientReady(message.hostname, message.user))
        self.follow_job_events()
        self._follow_host_alerts(self.client)

    # ------------------------------------------------------------------ alerts on the desktop

    @work(thread=True, exclusive=True, group="host-alerts", exit_on_error=False)
    def _follow_host_alerts(self, client):
        """Every alert the host raises, while the console is open (the client resumes the stream)."""
        try:
            client.subscribe("notify.follow", {}, lambda data, seq: self.post_message(HostAlerts(data.get("records") or [])))
        except (RemoteError, ConnectError):
            pass  # an older agent without notifications, or the link dropped: the GPU pane still rings

    def on_host_alerts(self, message: HostAlerts):
        alerts = [a for a in message.alerts if a.get("kind") != "test"]
        if not alerts:
            return
        title, body = alerts_notification(alerts, self.header.hostname or self.host)
        text = sequence(title, body, kind_for())
        if text and self._driver is not None:
            self._driver.write(text)  # between frames, through the driver's own writer
        if any("gpu" not in (a.get("categories") or ()) for a in alerts):  # GPU alerts: the GPU pane says them
            self.notify(body, title=title, severity="error" if any(a.get("urgent") for a in alerts) else "information",
                        timeout=20, markup=False)

    def _show_rtt(self):
        client = self.client
        if client is not None:
            self.header.rtt_s = client.rtt_s

    def action_reconnect(self):
        failed, self.client = self.client, None
        if failed is not None:  # a client that gave up (a changed host key): its threads end here
            threading.Thread(target=failed.close, name="specdeck-close", daemon=True).start()
        self.connection_state = "connecting"
        header = self.header
        header.state, header.detail = "connecting", {}
        self.refresh_bindings()
        self._connect()

    # ------------------------------------------------------------------ errors

    def on_agent_error(self, message: AgentError):
        self.notify(message.message, title=message.title or "the host refused", severity="error", timeout=10, markup=False)

    def on_worker_state_changed(self, event: Worker.StateChanged):
        # The one place a worker's unexpected exception ends up: a notification, not a traceback.
        if event.state == WorkerState.ERROR:
            error = event.worker.error
            self.notify("%s: %s" % (type(error).__name__, error), title="internal error in %s" % event.worker.name, severity="error", timeout=15, markup=False)

    def on_unmount(self):
        self._quitting.set()
        client, self.client = self.client, None
        if client is not None:
            # close() may wait up to 2 s for a local agent: not on the event loop.
            threading.Thread(target=client.close, name="specdeck-close", daemon=True).start()
