"""The Fleet pane (key 0, first with more than one host): one row per host, its link, GPUs,
jobs, servers against break-even, training runs and alerts not yet seen.

It reads the hosts (app.links, tui/fleet/hosts.py) on its own clock, once a second, and
rewrites only the cells that changed: its cost is the number of hosts, never how often they
speak. The figures and their words are tui/fleet/model.py's, the same as `specdeck fleet`.
Enter on a host makes it the one the other panes show.
"""

import time

from rich.text import Text
from textual.binding import Binding
from textual.widgets import DataTable, Static

from ..display import safe_text
from ..pane import Pane
from . import model

REFRESH_S = 1.0


class FleetPane(Pane):
    PANE_TITLE = "Fleet"
    BINDINGS = [
        Binding("enter", "show_host", "show host", tooltip="show this host in the other panes"),
        Binding("r", "reconnect_host", "reconnect", tooltip="connect again to this host after a failure"),
    ]

    DEFAULT_CSS = """
    FleetPane { layout: vertical; }
    FleetPane > DataTable { height: 1fr; }
    FleetPane > #fleet-detail { height: auto; max-height: 4; padding: 0 1; border-top: solid $primary; }
    """

    def compose(self):
        yield self.status_line()
        table = DataTable(id="fleet-table", cursor_type="row", zebra_stripes=True)
        table.add_column(" ", key="shown", width=1)
        for label in model.COLUMNS:
            table.add_column(label, key=label)
        yield table
        yield Static("", id="fleet-detail", markup=False)

    def on_mount(self):
        super().on_mount()
        self._cells = {}  # host -> {column: text}, what the table holds
        self.refresh_rows()
        self.set_interval(REFRESH_S, self.refresh_rows)

    def pane_shown(self):
        self.refresh_rows()

    def rows(self):
        """[(link, its JSON row)] in the order the hosts were named."""
        now = time.monotonic()
        return [(link, host_row(link, now)) for link in self.app.links]

    def refresh_rows(self):
        if not self.active and self._cells:
            return  # hidden: nothing to draw; shown again, it reads the hosts at once
        table = self.query_one(DataTable)
        current = self.app.current
        rows = self.rows()
        for link, row in rows:
            # Text, not str: a str cell would be read as markup (a host's reason may hold [brackets]).
            cells = {key: Text(text) for key, text in row_cells(link, row).items()}
            cells["shown"] = "▶" if link is current else ""
            known = self._cells.get(link.name)
            if known is None:
                table.add_row(*[cells["shown"]] + [cells[label] for label in model.COLUMNS], key=link.name)
            else:
                for key, text in cells.items():
                    if known.get(key) != text:
                        table.update_cell(link.name, key, text, update_width=True)
            self._cells[link.name] = cells
        states = [link.state for link, _ in rows]
        counts = ", ".join("%d %s" % (states.count(state), state) for state in ("connected", "reconnecting", "connecting", "failed")
                           if states.count(state))
        self.set_status("%d hosts: %s.  enter: show the host in the other panes   [ ]: previous/next host" % (len(rows), counts))
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
        return self.app.link_of(name)

    def on_data_table_row_selected(self, event):
        self.action_show_host()

    def action_show_host(self):
        link = self.selected()
        if link is not None:
            self.app.show_host(link, tab=self.app.first_host_tab())

    def action_reconnect_host(self):
        link = self.selected()
        if link is None:
            return
        if link.state != "failed":
            self.notify("%s is %s: r is for a host whose connection failed" % (link.name, link.state), severity="warning")
            return
        if link is self.app.current:
            self.app.action_reconnect()
        else:
            link.reconnect()
        self.refresh_rows()


REASON_CELL = 48  # characters of a reason in its cell; the whole line is under the table


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
    """{column: text} of a host's row: a host without figures has its reason (cut to
    REASON_CELL) where the GPUs go; alerts that came while another host was shown are `new`."""
    texts = model.cells(row)
    if len(texts) < len(model.COLUMNS):
        reason = texts[3]
        texts = texts[:3] + [reason if len(reason) <= REASON_CELL else reason[:REASON_CELL - 1] + "…"]
        texts += [""] * (len(model.COLUMNS) - len(texts))
    cells = dict(zip(model.COLUMNS, texts))
    if link.unseen_alerts:
        cells["ALERTS"] = ("%s, %d new" % (cells["ALERTS"], link.unseen_alerts)).lstrip(", ")
    return cells


def detail_text(link, row):
    """Under the table, the selected host in full: its reason, or its newest alerts."""
    lines = ["%s: %s" % (link.name, row.get("reason") or row["state"])]
    for alert in (row.get("alerts") or [])[:2]:
        lines.append("  %s%s" % ("! " if alert.get("urgent") else "", alert.get("title") or alert.get("message") or ""))
    return "\n".join(safe_text(line) for line in lines)
