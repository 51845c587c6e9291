"""The Fleet pane (key 0, first with more than one host): one row per host, its link, GPUs,
jobs, servers against break-even, training runs and alerts not yet seen.

It reads the hosts (`links`, tui/fleet/hosts.py, which the app gives it with the one shown,
`current`) on its own clock, once a second, and
rewrites only the cells that changed: its cost is the number of hosts, never how often they
speak. The figures and their words are tui/fleet/model.py's, the same as `specdeck fleet`.
Enter on a host asks the app to make it the one the other panes show (ShowHost; r on the
shown host whose link failed, Reconnect). A host without figures has its reason
where the GPUs go, cut to the room the other columns leave; a host without GPUs has a word
there; the selected host's whole reasons are under the table. The main columns come first, so
that an 80-column terminal shows them whole (the host, its state, GPUs, jobs and alerts), then
its servers and training runs, then the GPU details and the round trip; when columns are past
the right edge, the key bar says so (`←/→ more columns`).
"""

import time
from dataclasses import dataclass

from rich.cells import cell_len
from rich.text import Text
from textual.binding import Binding
from textual.message import Message
from textual.widgets import DataTable, Static

from ..display import cut, safe_text
from ..pane import Pane
from . import model

REFRESH_S = 1.0
REASON_COLUMN = "GPUS BUSY"  # where a host without figures has its reason
# Cells a reason gets at least, even when that pushes columns past the edge: no more, so that the
# main columns after it stay on an 80-column screen (the whole reason is under the table).
REASON_MIN = 20
# The table's columns, model.COLUMNS in the order a narrow terminal needs: the main ones first.
MAIN_COLUMNS = ("HOST", "STATE", "GPUS BUSY", "JOBS", "ALERTS")
PANE_COLUMNS = MAIN_COLUMNS + ("SERVERS AL/BREAK-EVEN", "TRAINING STEP ETA AL", "RTT", "MEM GiB", "HOTTEST", "THROTTLING")


class FleetTable(DataTable):
    """The hosts' rows: enter shows the highlighted host; ←/→ scroll the columns one column at a
    time, the host's name kept in view, a key the bar lists only while some are past the edge."""

    BINDINGS = [
        Binding("enter", "select_cursor", "show host", tooltip="show this host in the other panes"),
        Binding("right", "scroll_columns(1)", "more columns", key_display="←/→", tooltip="scroll to the columns past the edge"),
        Binding("left", "scroll_columns(-1)", "previous columns", show=False),
    ]

    def on_mount(self):
        self._overflowing = False
        self.watch(self, "virtual_size", lambda _size: self.call_after_refresh(self.check_overflow), init=False)

    def on_resize(self, event):
        self.call_after_refresh(self.check_overflow)

    def overflowing(self):
        """Some columns are past the edge (at either side)."""
        return self.max_scroll_x > 0

    def check_overflow(self):
        if self.overflowing() != self._overflowing:
            self._overflowing = not self._overflowing
            self.refresh_bindings()

    def check_action(self, action, parameters):
        if action == "scroll_columns":
            return self.overflowing()  # False: off the bar, and nothing to scroll to
        return True

    def action_scroll_columns(self, step):
        """Bring the next column past the fixed ones (step 1), or the one before (step -1)."""
        starts, offset = [], 0
        for index, column in enumerate(self.columns.values()):
            if index >= self.fixed_columns:
                starts.append(offset)
            offset += column.get_render_width(self)
        fixed = starts[0] if starts else 0
        starts = [start - fixed for start in starts]
        if step > 0:
            target = next((start for start in starts if start > self.scroll_x), self.max_scroll_x)
        else:
            target = max((start for start in starts if start < self.scroll_x), default=0)
        self.scroll_to(x=min(target, self.max_scroll_x), animate=False)


class FleetPane(Pane):
    PANE_TITLE = "Fleet"
    HELP_BINDINGS = FleetTable.BINDINGS  # enter (the table's: it selects the row, on_data_table_row_selected acts)
    BINDINGS = [
        Binding("r", "reconnect_host", "reconnect", tooltip="connect again to this host after a failure"),
    ]

    DEFAULT_CSS = """
    FleetPane { layout: vertical; }
    FleetPane > DataTable { height: 1fr; }
    FleetPane > #fleet-detail { height: auto; max-height: 4; padding: 0 1; border-top: solid $primary; }
    """

    @dataclass
    class ShowHost(Message):
        """Show `name` in the other panes, on their first tab."""

        name: str

    @dataclass
    class Reconnect(Message):
        """Connect the shown host, `name`, again after a failure."""

        name: str

    def __init__(self, links=(), current=None, **kwargs):
        super().__init__(**kwargs)
        self.links = list(links)  # every host, as named (tui/fleet/hosts.py HostLink)
        self.current = current  # the one the other panes show

    def compose(self):
        yield self.status_line()
        table = FleetTable(id="fleet-table", cursor_type="row", zebra_stripes=True, fixed_columns=2)  # ▶ and HOST stay
        table.add_column(" ", key="shown", width=1)
        for label in PANE_COLUMNS:
            table.add_column(label, key=label)
        yield table
        yield Static("", id="fleet-detail", markup=False)

    def on_mount(self):
        super().on_mount()
        self._cells = {}  # host -> {column: text}, what the table holds
        self.refresh_rows()
        self.set_interval(REFRESH_S, self.refresh_rows)

    def on_resize(self, event):
        # A reason takes the room the other columns leave: cut it again at the new width.
        self.call_after_refresh(self.refresh_rows)

    def pane_shown(self):
        self.refresh_rows()

    def rows(self):
        """[(link, its JSON row)] in the order the hosts were named."""
        now = time.monotonic()
        return [(link, host_row(link, now)) for link in self.links]

    def refresh_rows(self):
        if not self.active and self._cells:
            return  # hidden: nothing to draw; shown again, it reads the hosts at once
        table = self.query_one(DataTable)
        current = self.current
        rows = self.rows()
        texts = {link.name: row_cells(link, row) for link, row in rows}
        width = reason_width(table, list(texts.values()))
        for link, row in rows:
            shown = dict(texts[link.name])
            if row["state"] != model.UP:
                shown[REASON_COLUMN] = cut(shown[REASON_COLUMN], width)
            # Text, not str: a str cell would be read as markup (a host's reason may hold [brackets]).
            cells = {key: Text(text) for key, text in shown.items()}
            cells["shown"] = "▶" if link is current else ""
            known = self._cells.get(link.name)
            if known is None:
                table.add_row(*[cells["shown"]] + [cells[label] for label in PANE_COLUMNS], key=link.name)
            else:
                for key, text in cells.items():
                    if known.get(key) != text:
                        table.update_cell(link.name, key, text, update_width=True)
            self._cells[link.name] = cells
        states = [link.state for link, _ in rows]
        counts = ", ".join("%d %s" % (states.count(state), state) for state in ("connected", "reconnecting", "connecting", "failed")
                           if states.count(state))
        self.set_status("%d hosts: %s.  [ ]: previous/next host" % (len(rows), counts))
        self._show_detail(rows)

    def _show_detail(self, rows):
        """The selected host's whole reason and alerts, which a cell can only begin."""
        table = self.query_one(DataTable)
        if not rows or table.cursor_row is None or table.cursor_row >= len(rows):
            return
        link, row = rows[table.cursor_row]
        self.query_one("#fleet-detail", Static).update(Text(detail_text(link, row), no_wrap=False))

    def on_data_table_row_highlighted(self, event):
        self._show_detail(self.rows())

    def selected(self):
        table = self.query_one(DataTable)
        if table.row_count == 0:
            return None
        name = table.coordinate_to_cell_key((table.cursor_row, 0)).row_key.value
        return next((link for link in self.links if link.name == name), None)

    def on_data_table_row_selected(self, event):
        self.show_selected_host()

    def show_selected_host(self):
        link = self.selected()
        if link is not None:
            self.post_message(self.ShowHost(link.name))

    def action_reconnect_host(self):
        link = self.selected()
        if link is None:
            return
        if link.state != "failed":
            self.notify("%s is %s: r is for a host whose connection failed" % (link.name, link.state), severity="warning")
            return
        if link is self.current:
            self.post_message(self.Reconnect(link.name))  # the app's: its panes wait for the new client
            return
        link.reconnect()
        self.refresh_rows()


def host_row(link, now):
    """The model's row for a host of the console: `up` with its summary once one came; else its
    link's state, with the reason (the client's error, the next try)."""
    detail = link.detail or {}
    if link.state == "connected" and link.summary is not None:
        return model.row(link.name, model.UP, rtt_s=link.rtt_s, summary=link.summary, since_s=now - link.summary_at)
    if link.state == "connected":
        reason = link.summary_error or "connected, waiting for its first summary"
        return model.row(link.name, "connected", reason, rtt_s=link.rtt_s)
    if link.state == "reconnecting":
        wait_s = (detail.get("next_try_at") or 0) - time.time()
        when = "next try in %d s" % max(1, round(wait_s)) if wait_s > 0.5 else "trying again now"
        reason = "%s (%s)" % (when, detail["error"]) if detail.get("error") else when
        return model.row(link.name, "reconnecting", reason)
    if link.state == "failed":
        return model.row(link.name, "failed", detail.get("error") or "the connection failed")
    return model.row(link.name, model.CONNECTING)


def row_cells(link, row):
    """{column: text} of a host's row: a host without figures has its whole reason where the
    GPUs go (the pane cuts it to `reason_width`), one without GPUs a word (`no NVML`); alerts
    that came while another host was shown are `new`."""
    texts = model.cells(row)
    texts += [""] * (len(model.COLUMNS) - len(texts))
    cells = dict(zip(model.COLUMNS, texts))
    if link.unseen_alerts:
        cells["ALERTS"] = ("%s, %d new" % (cells["ALERTS"], link.unseen_alerts)).lstrip(", ")
    return cells


def reason_width(table, rows):
    """Cells a reason may take in REASON_COLUMN: the room the table's width leaves after the
    other columns, at least what the column's own figures and label take, and REASON_MIN.
    `rows`: each row's {column: text}, a reason whole."""
    padding = 2 * table.cell_padding

    def widest(column, texts):
        return max([cell_len(column)] + [cell_len(text) for text in texts])

    figures = [cells[REASON_COLUMN] for cells in rows if cells["STATE"] == model.UP]
    others = sum(widest(column, [cells[column] for cells in rows]) + padding for column in model.COLUMNS if column != REASON_COLUMN)
    room = table.size.width - table.styles.scrollbar_size_vertical - (1 + padding) - others - padding  # `1`: the ▶ column
    return max(widest(REASON_COLUMN, figures), REASON_MIN, room)


def detail_text(link, row):
    """Under the table, the selected host in full: its reason, why it shows no GPU, its newest alerts."""
    lines = ["%s: %s" % (link.name, row.get("reason") or row["state"])]
    if model.no_gpus_reason(row):
        lines[0] += "; " + model.no_gpus_reason(row)
    for alert in (row.get("alerts") or [])[:2]:
        lines.append("  %s%s" % ("! " if alert.get("urgent") else "", alert.get("title") or alert.get("message") or ""))
    return "\n".join(safe_text(line) for line in lines)
