"""The connection header: app name, host, connection state with rtt or retry countdown, with
several hosts which one the panes show and how many are down, clock.

It renders only what it is given plus the time: the app feeds it state changes and, once
a second, the last measured round trip, so painting never waits on the network.
"""

import time

from rich.table import Table
from rich.text import Text
from textual.reactive import reactive
from textual.widget import Widget

from ..display import safe_text

STATE_STYLES = {
    "connecting": "yellow",
    "connected": "green",
    "reconnecting": "yellow",
    "failed": "bold red",
    "closed": "dim",
}


def describe_state(state, detail, rtt_s=None, now=None):
    """One line for the connection state, e.g. `● connected  rtt 11 ms`."""
    detail = detail or {}
    if state == "connected":
        return "● connected" + ("  rtt %d ms" % round(rtt_s * 1000) if rtt_s is not None else "")
    if state == "reconnecting":
        reason = detail.get("error")
        wait_s = (detail.get("next_try_at") or 0) - (now if now is not None else time.time())
        when = "next try in %d s" % max(1, round(wait_s)) if wait_s > 0.5 else "trying again now"
        attempt = detail.get("attempt")
        text = "○ reconnecting, %s" % when
        if attempt and attempt > 1:
            text += ", attempt %d" % attempt
        return text + (" (%s)" % reason if reason else "")
    if state == "failed":
        return "✕ failed: %s" % (detail.get("error") or "the connection failed")
    if state == "closed":
        return "○ closed"
    return "○ connecting…"


class ConnectionHeader(Widget):
    """One line at the top: `specdeck  gpu01  root@gpu01  ● connected  rtt 11 ms     17:42`."""

    host_label: reactive[str] = reactive("")
    hostname: reactive[str] = reactive("")
    state: reactive[str] = reactive("connecting")
    detail: reactive[dict] = reactive(dict, always_update=True)
    rtt_s: reactive = reactive(None)
    fleet_text: reactive[str] = reactive("")  # with several hosts: which one this is, how many are down
    clock: reactive[str] = reactive("")

    def __init__(self, host_label, **kwargs):
        super().__init__(**kwargs)
        self.host_label = host_label
        self.clock = time.strftime("%H:%M")

    def on_mount(self):
        # The countdown and the clock move on their own; rtt is read by the app's timer.
        self.set_interval(1.0, self.tick)

    def tick(self):
        self.clock = time.strftime("%H:%M")
        if self.state == "reconnecting":
            self.refresh()

    @property
    def state_text(self):
        return describe_state(self.state, self.detail, self.rtt_s)

    def render(self):
        left = Text(no_wrap=True, overflow="ellipsis")
        left.append(" specdeck", style="bold")
        if self.hostname:  # the host's own word for itself, and the link's error below: its text
            left.append("  " + safe_text(self.hostname), style="bold")
        left.append("  " + safe_text(self.host_label))
        left.append("  ")
        left.append(safe_text(self.state_text), style=STATE_STYLES.get(self.state, ""))
        if self.fleet_text:
            left.append("  " + safe_text(self.fleet_text), style="dim")
        grid = Table.grid(expand=True)
        grid.add_column(ratio=1, no_wrap=True, overflow="ellipsis")
        grid.add_column(justify="right", no_wrap=True)
        grid.add_row(left, Text(self.clock + " "))
        return grid
