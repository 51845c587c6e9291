"""An App that hosts panes: it holds the shown host's model (tui/host/), whose job book comes
from one `jobs.events` subscription and whose alerts from one `notify.follow`, hands the book
to every pane and the link's state too, tells each pane whether its tab is shown, and opens a
checkpoint in the Tensors pane when a pane asks. The console (tui/app.py) is one; tests that compose a few panes
are another, so they run the same mechanism."""

from textual.app import App
from textual.widgets import TabbedContent, TabPane

from . import display
from .host.model import HostModel
from .host.records import Connection
from .messages import JobEvents, JobEventsEnded, OpenCheckpoint
from .notify.desktop import HostAlerts
from .pane import Pane

RESUBSCRIBE_S = 2.0


class PaneHost(App):
    def __init__(self, client=None, **kwargs):
        super().__init__(**kwargs)
        self.model = HostModel(self, client)

    def notify(self, message, *, title="", **kwargs):
        """Every toast, from every pane: a host's text in it (a job name, an error line, an
        alert's reason) shows its controls as escapes, never as what they would do. A list is
        the toast's lines: each is cleaned, and they show one under the other."""
        lines = [message] if isinstance(message, str) else message
        return super().notify("\n".join(map(display.safe_text, lines)), title=display.safe_text(title), **kwargs)

    @property
    def client(self):
        """The shown host's client (None until connected): the model's."""
        return self.model.client

    @client.setter
    def client(self, client):
        self.model.client = client

    @property
    def book(self):
        return self.model.book

    def show_connection(self, state, detail=None):
        """The link's state, in the model and in every pane (attributes down)."""
        self.model.connection = Connection(state, dict(detail or {}))
        for pane in self.query(Pane):
            pane.connection = self.model.connection

    def host_model(self, host):
        """The model of the host named `host` (as typed); a PaneHost has one host."""
        return self.model

    # -- job events and alerts

    def follow_job_events(self):
        self.model.follow_job_events()
        self.model.follow_alerts()

    def on_host_alerts(self, message: HostAlerts):
        self.host_model(message.host).alerts_came(message)
        if not message.recent:
            self.alerts_raised(message)

    def alerts_raised(self, message):
        """Alerts a host raised just now (the console puts them on the desktop)."""

    def tell_jobs(self, panes):
        """Panes made for a host whose jobs its model holds already (shown again): told at once."""
        book = self.model.book
        if book.loaded:
            for pane in panes:
                pane.jobs_told(book, set(book.jobs), [])

    def on_job_events_ended(self, message: JobEventsEnded):
        """The host ended the stream (an error while it read the jobs): a console that stopped
        hearing about jobs would look current while it is not, so ask again, from now (a new
        snapshot comes first)."""
        self.model.job_events_ended()
        if self.client is None or not self.is_running:
            return  # closing
        self.notify("job events stopped (%s): asking again" % (message.data.get("error") or "the stream ended"),
                    title="job events", severity="warning", markup=False)
        self.set_timer(RESUBSCRIBE_S, self.follow_job_events)

    def on_job_events(self, message: JobEvents):
        changed, records = self.model.apply_job_events(message.data)
        if not changed and not records and message.data.get("snapshot") is None:
            return
        for pane in self.query(Pane):
            pane.jobs_told(self.book, changed, records)

    # -- which pane is shown

    def on_tabbed_content_tab_activated(self, event: TabbedContent.TabActivated):
        # A tab clicked, or switched to by a key; a stale event must not take focus back.
        if event.tabbed_content.active == event.pane.id:
            self.activate(event.pane.id)

    def activate(self, active_id):
        """Set `active` on every pane (a pane outside any tab is always shown), and focus the
        first focusable widget of the shown tab, so its keys work at once."""
        for pane in self.query(Pane):
            tab = next((node for node in pane.ancestors if isinstance(node, TabPane)), None)
            pane.active = tab is None or tab.id == active_id
        for tab in self.query(TabPane):
            if tab.id == active_id:
                target = next((w for w in tab.query("*") if w.focusable), None)
                if target is not None:
                    target.focus()

    def show_tab(self, tab_id):
        self.query_one(TabbedContent).active = tab_id

    def on_open_checkpoint(self, message: OpenCheckpoint):
        for pane in self.query(Pane):
            if pane.pane_id() == "tensors":
                self.show_tab("tensors")
                pane.open_path(message.path)
                return
        self.notify("this console has no Tensors pane", severity="warning")
