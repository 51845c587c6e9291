"""Pilot helpers: what the screen shows, the Jobs table's rows, the notifications, the header,
going to a pane and waiting for the connection; and the small apps that hold one pane (or two,
as the console composes them) on the tests' client."""

import html
import re

from textual.app import App
from textual.widgets import Input, TabbedContent, TabPane

from tests.helpers.waits import wait_until
from tui.checkpoints.pane import TensorsPane
from tui.downloads.form import DownloadForm
from tui.downloads.pane import DownloadsPane
from tui.jobs.new_job import NewJobScreen
from tui.jobs.pane import JobsTable
from tui.messages import ClientReady
from tui.pane_host import PaneHost
from tui.telemetry.pane import GpusPane
from tui.widgets.header import ConnectionHeader

SIZE = (110, 32)


# --------------------------------------------------------------------------- what the screen shows


def screen_text(app):
    """What the terminal shows, as plain text (from the SVG screenshot)."""
    svg = app.export_screenshot()
    text = re.sub(r"<[^>]+>", "", svg)
    return html.unescape(text).replace("\xa0", " ")


def screen_lines(app):
    """What the terminal shows, line by line."""
    return [strip.text for strip in app.screen._compositor.render_strips()]


def text_of(widget):
    """What a widget (a Static, a bar, a row) renders, as text."""
    return str(widget.render())


def notifications(app):
    """The toasts the app raised, as (title, message, severity)."""
    return [(n.title, n.message, n.severity) for n in app._notifications]


def notified(app):
    """The toasts' messages alone."""
    return [n.message for n in app._notifications]


def header_text(app):
    return app.query_one(ConnectionHeader).state_text


def job_rows(app):
    """{job id: {column: text}} as the Jobs table shows them."""
    table = app.query_one(JobsTable)
    rows = {}
    for row_key in table.rows:
        cells = table.get_row(row_key)
        rows[row_key.value] = {str(column.key.value): str(cell) for column, cell in zip(table.columns.values(), cells)}
    return rows


# --------------------------------------------------------------------------- keys


def pane_key(app, title):
    """The number key of the pane titled `title`."""
    return str([pane.PANE_TITLE for pane in app.pane_classes].index(title) + 1)


async def to_pane(pilot, title):
    """Press the pane's number key and wait until its tab is the one shown."""
    await pilot.press(pane_key(pilot.app, title))
    tab = title.lower().replace(" ", "-")  # tui/app.py's pane_id
    await wait_until(pilot, lambda: pilot.app.query_one("#panes", TabbedContent).active == tab, message="the %s pane" % title)


async def connected(pilot):
    """Wait for the connection, then open the Jobs pane (the console opens on the GPUs pane)."""
    await wait_until(pilot, lambda: pilot.app.client is not None, message="the connection")
    await wait_until(pilot, lambda: "connected" in header_text(pilot.app), message="the header to say connected")
    await pilot.press(pane_key(pilot.app, "Jobs"))
    await wait_until(pilot, lambda: pilot.app.focused is pilot.app.query_one(JobsTable), message="the Jobs pane")


async def type_text(pilot, text):
    await pilot.press(*text)


async def start_job_from_dialog(pilot, command, name=None):
    """n, the command (and a name after tab), enter; wait for the dialog to close."""
    await pilot.press("n")
    await wait_until(pilot, lambda: isinstance(pilot.app.screen, NewJobScreen), message="the new-job dialog")
    await type_text(pilot, command)
    if name:
        await pilot.press("tab")
        await type_text(pilot, name)
    await pilot.press("enter")
    await wait_until(pilot, lambda: not isinstance(pilot.app.screen, NewJobScreen), message="the dialog to close")


async def fill_form(pilot, values, tick=()):
    """The download form: type the repo as a user would; long paths and URLs are pasted (typing
    them costs seconds); tick the checkboxes named in `tick` (their ids) by clicking them; enter."""
    form = pilot.app.screen
    assert isinstance(form, DownloadForm)
    for box in tick:
        await pilot.click("#" + box)
        assert form.query_one("#" + box).value, box
    for key, value in values.items():
        field = form.query_one("#form-%s" % key.replace("_", "-"), Input)
        field.focus()
        field.value = ""
        if key == "repo":
            await pilot.press(*value)
        else:
            field.value = value
    await pilot.press("enter")


# --------------------------------------------------------------------------- apps of one pane


class OnePane(PaneHost):
    """One pane alone in an app, on the tests' client, following the host's job events as the
    console does: what a pane's own tests drive with Pilot."""

    def __init__(self, pane, **kwargs):
        super().__init__(**kwargs)
        self.pane = pane

    def compose(self):
        yield self.pane

    def on_mount(self):
        self.activate(None)
        self.follow_job_events()


class TensorsHost(App):
    """The Tensors pane alone, on the tests' client, its table focused."""

    def __init__(self, client):
        super().__init__()
        self.client = client

    def compose(self):
        yield TensorsPane()

    def on_mount(self):
        self.query_one("#tensors-table").focus()


class GpusApp(PaneHost):
    """The GPUs pane alone, on a client of its own."""

    def compose(self):
        yield GpusPane()

    def on_mount(self):
        self.activate(None)
        self.query_one(GpusPane).post_message(ClientReady("gpuhost", "me"))


class DownloadsHost(PaneHost):
    """Downloads and Tensors in tabs, the way the console composes them, with its job events."""

    def compose(self):
        with TabbedContent(initial="downloads"):
            with TabPane("Downloads", id="downloads"):
                yield DownloadsPane()
            with TabPane("Tensors", id="tensors"):
                yield TensorsPane()

    def on_mount(self):
        self.activate("downloads")
        self.follow_job_events()


# --------------------------------------------------------------------------- what reached the host


def questions_asked(client):
    """[(method, params)] of every question `client` (a real one) sends to the host from now on,
    in the order sent: what a view cost the host, counted where it leaves the laptop."""
    asked = []
    send = client.call

    def call(method, params=None, timeout=60.0):
        asked.append((method, dict(params or {})))
        return send(method, params, timeout=timeout)

    client.call = call
    return asked
