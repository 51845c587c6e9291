"""One pane alone in an app, on the tests' client, following the host's job events as the
console does: what a pane's own tests drive with Pilot."""

from tui.pane_host import PaneHost


class OnePane(PaneHost):
    def __init__(self, pane, **kwargs):
        super().__init__(**kwargs)
        self.pane = pane

    def compose(self):
        yield self.pane

    def on_mount(self):
        self.activate(None)
        self.follow_job_events()
