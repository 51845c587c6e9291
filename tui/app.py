"""The console: a connection header, the panes a key away, a footer.

The app paints at once and connects every host on threads of their own (tui/fleet/hosts.py,
tui/connecting.py); each client heals its link on its own and reports its state. With several
hosts the Fleet pane (key 0) shows them all, and one of them is the host the other panes show (`current`,
named in the header; Enter on a host, or `[`/`]`, changes it: the host's panes are made anew
for it). `[`/`]` are the host keys in every pane but the Speculation and Training panes, which
step their servers and runs with them, and a log's search, which steps its matches: the help
says so, and the Fleet pane (0) switches hosts from anywhere. The list of panes, PANES, drives
the number keys, the tabs and the help screen. Each host has its model (tui/host/), kept while the console runs: the shown
host's holds the one subscription to its job events, every stream the panes follow, the link's
state and the host's records (a host shown again shows them at once); every host's follows its
alerts (tui/notify/console_alerts.py puts them on the desktop); the app hands every pane the job
book and that state (attributes down), the Fleet pane its hosts; panes post messages up
(OpenCheckpoint, the Fleet pane's ShowHost and Reconnect) and never call each other. Alerts of every host reach the desktop with the
host's name, and with several hosts one that stays unreachable for UNREACHABLE_AFTER_S is a
desktop alert of the console's own (its daemon cannot say it is gone), and its return another.
"""

import gc
import os
import threading

from textual.app import ComposeResult
from textual.binding import Binding
from textual.css.query import NoMatches
from textual.screen import ModalScreen
from textual.widgets import TabbedContent, TabPane
from textual.worker import Worker, WorkerState

from .connecting import HostConnections
from .checkpoints.pane import TensorsPane
from .downloads.pane import DownloadsPane
from .fleet.hosts import HostLink
from .fleet.pane import FleetPane
from .host.model import Answered, HostModel
from .jobs.pane import JobsPane
from .messages import AgentError, ClientReady
from .notify.console_alerts import DesktopAlerts
from .notify.screen import NotificationsScreen
from .pane import Pane
from .pane_host import PaneHost
from .report import screen as report_screen
from .screens.help import HelpScreen
from .screens.host_info import HostInfoScreen
from .serving.pane import SpeculationPane
from .telemetry.pane import GpusPane
from .training.pane import TrainingPane
from .widgets.header import ConnectionHeader
from .widgets import pane_tabs
from .widgets.key_bar import KeyBar

PANES = (GpusPane, JobsPane, DownloadsPane, TensorsPane, SpeculationPane, TrainingPane)  # in key order: 1, 2, 3, ...
PANES_GROUP = Binding.Group("panes", compact=True)
UNREACHABLE_AFTER_S = 120.0  # a host of a fleet away this long is a desktop alert
# Where `[`/`]` switch hosts: the panes that step their own list with them keep them.
HOST_KEYS_WHERE = ("show the %s host in the other panes (in Jobs, GPUs, Downloads, Tensors and the Fleet pane; "
                   "in Speculation and Training [ ] step servers and runs, in a log's search its matches)")


def pane_id(pane_class):
    """The TabPane id: `jobs`, `downloads`, `tensors`."""
    return pane_class.PANE_TITLE.lower().replace(" ", "-")


def pane_bindings(panes):
    """Number keys 1..N, one per pane, shown as one `1-N panes` entry in the footer."""
    return [
        Binding(str(number), "show_pane(%d)" % (number - 1), "panes", key_display="1-%d" % len(panes), show=number == 1, group=PANES_GROUP)
        for number in range(1, len(panes) + 1)
    ]


class SpecdeckApp(HostConnections, DesktopAlerts, PaneHost):
    """specdeck's console for one host or several."""

    TITLE = "specdeck"
    CSS_PATH = "app.tcss"
    ENABLE_COMMAND_PALETTE = False
    BINDINGS = [Binding("q", "quit", "quit")] + pane_bindings(PANES) + [
        Binding("0", "show_fleet", "fleet", show=False, tooltip="every host on one screen (with more than one host)"),
        Binding("left_square_bracket", "step_host(-1)", "host", show=False, key_display="[",
                tooltip=HOST_KEYS_WHERE % "previous"),
        Binding("right_square_bracket", "step_host(1)", "host", show=False, key_display="]",
                tooltip=HOST_KEYS_WHERE % "next"),
        Binding("question_mark", "help", "help", tooltip="this list of keys"),
        Binding("i", "host_info", "host", show=False, tooltip="the host: agent, what it can use, the daemon's services and how each is doing"),
        Binding("r", "reconnect", "reconnect", show=False, tooltip="connect again after a failure"),
        Binding("a", "away", "report", show=False, tooltip="the night on this host: jobs, training, servers, alerts, disks (the last 12 h)"),
    ]

    def __init__(self, host="local", python="python3", accept_new=False, hosts=None, connect=None,
                 unreachable_after_s=UNREACHABLE_AFTER_S, **kwargs):
        """`hosts`: the hosts as typed (default: `host` alone); `python`: the agent's interpreter,
        or a function of the host giving it; `connect(host, on_state, ask_host_key)`: how a
        host's started client is made (default: over SSH, or the local agent);
        `unreachable_after_s`: how long a host of several stays unreachable before the desktop is told."""
        super().__init__(**kwargs)
        self.unreachable_after_s = unreachable_after_s
        if "TEXTUAL_ANIMATIONS" not in os.environ:
            # A tab's sliding underline redrew the screen ~35 times per pane switch, which the
            # next key waited behind; a console watched over SSH has no use for it.
            self.animation_level = "none"
        names = list(dict.fromkeys(hosts or [host or "local"]))
        self.python = python
        self.accept_new = accept_new
        self._make_client = connect or self._open_client
        # With several hosts one that is away when the console opens is tried again until it is back.
        self.links = [HostLink(name, self._connector(name), self.post_message, retry=len(names) > 1, poll=len(names) > 1)
                      for name in names]
        self.current = self.links[0]
        # One model per host: what a host held is there at once when it is shown again.
        self.models = {link.name: HostModel(self, host=link.name) for link in self.links}
        self.model = self.models[self.current.name]
        self.host = self.current.name
        self.connection_state = "connecting"
        self.pane_classes = PANES
        self.fleet = len(self.links) > 1  # the Fleet pane, first, with more than one host
        self._quitting = threading.Event()
        self._remakes = 0  # host switches made: a newer one ends an older one's pane making
        self.header = ConnectionHeader(self.host, id="header")

    # ------------------------------------------------------------------ layout

    def compose(self) -> ComposeResult:
        yield self.header
        yield self._pane_tabs()
        yield KeyBar()

    def _pane_tabs(self, initial="", only=None):
        """The tabs, each with its pane; with `only` (a tab id), the other tabs empty for now."""
        content = TabbedContent(id="panes", initial=initial)
        numbered = self.numbered_panes()
        for (_, pane_class), title in zip(numbered, pane_tabs.titles(numbered, self.size.width)):
            tab_id = pane_id(pane_class)
            children = [self._make_pane(pane_class)] if only in (None, tab_id) else []
            # As `with TabbedContent():` would in compose.
            content.compose_add_child(TabPane(title, *children, id=tab_id))
        return content

    def numbered_panes(self):
        """[(its number key, pane class)] in tab order: the Fleet pane 0 (with several hosts), then 1, 2, ..."""
        return list(enumerate(((FleetPane,) if self.fleet else ()) + tuple(self.pane_classes), 0 if self.fleet else 1))

    def on_resize(self, event):
        pane_tabs.retitle(self, self.numbered_panes(), event.size.width)  # short titles on a narrow terminal

    def _make_pane(self, pane_class):
        """A pane of the shown host; the Fleet pane is given every host (attributes down)."""
        if pane_class is FleetPane:
            return FleetPane(links=self.links, current=self.current)
        return pane_class()

    def on_mount(self):
        self.set_interval(1.0, self._show_rtt)
        self.activate(pane_id(FleetPane if self.fleet else self.pane_classes[0]))
        self._connect()
        # What the first screen made (widgets, styles, the panes: ~80,000 objects) lives as long
        # as the console: kept out of the collector's full passes, each of which otherwise
        # walked them all (40-170 ms on a 2-core machine, a key waiting behind each) while a
        # log streamed.
        self.call_after_refresh(gc.freeze)

    def action_show_pane(self, index):
        if index >= len(self.pane_classes):
            self.notify("no pane %d yet" % (index + 1), severity="warning")
            return
        # Focus follows in on_tabbed_content_tab_activated, once: each focus change restyles.
        self.show_tab(pane_id(self.pane_classes[index]))

    def action_show_fleet(self):
        if not self.fleet:
            said = "one host: no Fleet pane (0); it is for several: specdeck HOST1 HOST2 ..."
            shown = [pane for pane in self.query(Pane) if pane.active]
            for pane in shown:
                pane.say(said)
            if not shown:  # no pane's status line to say it in (a dialog's screen, say)
                self.notify(said, severity="warning")
            return
        self.show_tab(pane_id(FleetPane))

    def check_action(self, action, parameters):
        # Pane keys belong to the screen below a dialog, not to the dialog.
        if action in ("show_pane", "show_fleet", "step_host", "reconnect", "host_info") and isinstance(self.screen, ModalScreen):
            return False
        if action == "reconnect":
            return self.connection_state == "failed"
        if action == "step_host":
            return self.fleet
        return True

    # ------------------------------------------------------------------ hosts

    def first_host_tab(self):
        return pane_id(self.pane_classes[0])

    def link_of(self, name):
        return next((link for link in self.links if link.name == name), None)

    def action_step_host(self, step):
        index = self.links.index(self.current)
        self.show_host(self.links[(index + step) % len(self.links)])

    def show_host(self, link, tab=None):
        """Make `link` the host the panes show: its panes are made anew, on `tab` (default: the
        tab shown now; from the Fleet pane, the first of the host's panes)."""
        tabs = self.query_one(TabbedContent)
        tab = tab or tabs.active
        if link is not self.current:
            self.model.close()  # the old host's job events: not for these panes
            self.model = self.models[link.name]
            self.model.client = link.client
            self.current, self.host = link, link.name
            self.connection_state = link.state
            self._show_header(link)
            self.call_later(self._remake_panes, tab)
        elif tab != tabs.active:
            self.show_tab(tab)
        link.unseen_alerts = 0
        self.refresh_bindings()

    async def _remake_panes(self, tab):
        """The panes of the host now shown: the tab on screen first, so it is there at once, then
        the others one per turn of the event loop (a key pressed meanwhile is answered between
        them); the host's job events once every pane is there to hear them. A newer switch
        ends an older one's making."""
        self._remakes += 1
        remake = self._remakes
        try:
            await self.query_one(TabbedContent).remove()
        except NoMatches:
            return  # the console is closing
        await self.mount(self._pane_tabs(initial=tab, only=tab), after=self.header)
        self.activate(tab)
        self.tell_jobs(self.query(Pane))
        self._client_ready_to(self.query(Pane))
        self.call_later(self._mount_next_pane, remake)

    async def _mount_next_pane(self, remake):
        if remake != self._remakes or not self.is_running:
            return
        classes = {pane_id(c): c for c in ((FleetPane,) if self.fleet else ()) + tuple(self.pane_classes)}
        empty = next((tab for tab in self.query(TabPane) if tab.id in classes and not tab.query(Pane)), None)
        if empty is not None:
            pane = self._make_pane(classes[empty.id])
            await empty.mount(pane)
            if self.query_one(TabbedContent).active == empty.id:  # its tab was chosen before it was there
                self.activate(empty.id)
            self.tell_jobs([pane])
            self._client_ready_to([pane])
            self.call_later(self._mount_next_pane, remake)
            return
        if self.client is not None:
            self.follow_job_events()

    def _client_ready_to(self, panes):
        if self.client is not None:
            hello = self.current.hello
            for pane in panes:
                pane.post_message(ClientReady(hello.get("hostname", ""), hello.get("user", ""), host=self.current.name))

    def _show_header(self, link):
        header = self.header
        header.host_label = link.name
        header.hostname = ""
        hello = link.hello if link.client is not None else {}
        if hello.get("user"):
            self._label_host(hello.get("hostname", ""), hello.get("user"))
        self._show_connection(self.connection_state, link.detail)
        header.rtt_s = link.rtt_s

    def host_model(self, host):
        return self.models.get(host, self.model)

    def on_fleet_pane_show_host(self, message: FleetPane.ShowHost):
        link = self.link_of(message.name)
        if link is not None:
            self.show_host(link, tab=self.first_host_tab())

    def on_fleet_pane_reconnect(self, message: FleetPane.Reconnect):
        if self.link_of(message.name) is self.current:
            self.action_reconnect()
        for pane in self.query(FleetPane):
            pane.refresh_rows()

    def action_host_info(self):
        if isinstance(self.screen, HostInfoScreen):
            return
        if self.client is None:
            self.notify("not connected to the host yet", severity="warning")
            return
        self.model.ask(self, "daemon.info", done=lambda info: self.push_screen(HostInfoScreen(info)), title="host info",
                       timeout=15, group="host-info", exclusive=True)

    def on_answered(self, message: Answered):
        message.stop()
        message.callback(message.result)

    def action_notifications(self):
        """The host's notification channels: `n` on the host screen asks for them."""
        self.push_screen(NotificationsScreen())

    def action_away(self):
        """The morning report of the shown host (tui/report/screen.py)."""
        if self.client is None:
            self.notify("not connected to the host yet", severity="warning")
        elif not isinstance(self.screen, report_screen.AwayScreen):
            report_screen.show(self, self.client, getattr(self.current, "away_since", None))  # set on connecting

    def action_help(self):
        if isinstance(self.screen, HelpScreen):
            return
        fleet_keys = ("show_fleet", "step_host")
        anywhere = [b for b in self.BINDINGS if self.fleet or not b.action.startswith(fleet_keys)]
        sections = [("Anywhere", anywhere)]
        for pane_class in ((FleetPane,) if self.fleet else ()) + tuple(self.pane_classes):
            bindings = list(getattr(pane_class, "HELP_BINDINGS", ())) + list(getattr(pane_class, "BINDINGS", []))
            sections.append((pane_class.PANE_TITLE, bindings))
        # The keys do not change while the app runs: build the screen once, show it again after.
        if not self.is_screen_installed("help"):
            self.install_screen(HelpScreen(sections), name="help")
        self.push_screen("help")

    def refresh_bindings(self):
        if self.screen_stack:  # none while the app closes: a host's late news changes no keys then
            super().refresh_bindings()

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
        self.client = None
        for link in self.links:
            # close() may wait up to 2 s for a local agent: not on the event loop.
            threading.Thread(target=link.close, name="specdeck-close", daemon=True).start()
