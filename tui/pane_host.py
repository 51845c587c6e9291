"""An App that hosts panes: it keeps the host's job book from one `jobs.events` subscription and
hands it to every pane, tells each pane whether its tab is shown, and opens a checkpoint in the
Tensors pane when a pane asks. The console (tui/app.py) is one; tests that compose a few panes
are another, so they run the same mechanism."""

from textual import work
from textual.app import App
from textual.css.query import NoMatches
from textual.widgets import TabbedContent, TabPane

from remote.core.protocol import RemoteError

from .transport.client import ConnectError
from .jobs.book import JobBook
from .messages import AgentError, JobEvents, JobEventsEnded, OpenCheckpoint
from .pane import Pane

RESUBSCRIBE_S = 2.0


class PaneHost(App):
    def __init__(self, client=None, **kwargs):
        super().__init__(**kwargs)
        self.client = client
        self.book = JobBook()
        self._events = None  # the jobs.events subscription, of self.client

    # -- job events

    def follow_job_events(self):
        """Subscribe once per client; the client resumes the stream itself after a cut link."""
        if self.client is not None and (self._events is None or self._events.client is not self.client):
            self._subscribe_job_events(self.client)

    @work(thread=True, exclusive=True, group="job-events", exit_on_error=False)
    def _subscribe_job_events(self, client):
        try:
            self._events = client.subscribe("jobs.events", {}, lambda data, seq: self.post_message(JobEvents(data)),
                                            lambda data: self.post_message(JobEventsEnded(data)))
        except RemoteError as exc:
            self.post_message(AgentError(exc.message, "job events"))
        except ConnectError:
            pass  # the next connection tries again

    def on_job_events_ended(self, message: JobEventsEnded):
        """The host ended the stream (an error while it read the jobs): a console that stopped
        hearing about jobs would look current while it is not, so ask again, from now (a new
        snapshot comes first)."""
        self._events = None
        if self.client is None or not self.is_running:
            return  # closing
        self.notify("job events stopped (%s): asking again" % (message.data.get("error") or "the stream ended"),
                    title="job events", severity="warning", markup=False)
        self.set_timer(RESUBSCRIBE_S, self.follow_job_events)

    def on_job_events(self, message: JobEvents):
        changed, records = self.book.apply(message.data)
        if not changed and not records and message.data.get("snapshot") is None:
            return
        for pane in self.query(Pane):
            if pane.is_attached and not pane._closing:
                try:
                    pane.jobs_changed(self.book, changed, records)
                except NoMatches:
                    # Its widgets are being removed (the app is closing; events still come from the
                    # client's thread meanwhile): nothing to draw, and the book has the jobs.
                    pass

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
