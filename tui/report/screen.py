"""The "while you were away" screen: the morning report (remote/report/) of the shown host, over
the time nobody watched it. On connecting, the alerts the host raised since a console last
followed it are told at once, however short the absence (a count, the first lines, `a` for the
report); the whole screen opens by itself after over AWAY_AFTER_S nobody watched, and on the
`a` key at any time after (the last 12 hours, or the whole absence when it was longer)."""

import time

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical, VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Label, Static

from remote.report.text import heading, render

from ..display import format_time, safe_text

AWAY_AFTER_S = 3600.0
DEFAULT_WINDOW_S = 12 * 3600.0
MAX_WINDOW_S = 7 * 86400.0
WATCH_STREAM = "report.watch"


def away_since(last_watched_at, daemon_started_at, now):
    """When nobody watched from, or None when someone did within AWAY_AFTER_S (a daemon never
    watched counts from its start: a host left alone since it started)."""
    since = last_watched_at if last_watched_at is not None else daemon_started_at
    if since is None or now - since <= AWAY_AFTER_S:
        return None
    return max(since, now - MAX_WINDOW_S)


def absence_start(last_watched_at, daemon_started_at, now):
    """Since when no console followed the host (however short), or None when not known."""
    since = last_watched_at if last_watched_at is not None else daemon_started_at
    return None if since is None else max(since, now - MAX_WINDOW_S)


def missed_alerts(report, since):
    """The alerts the report holds that the host raised at or after `since`, oldest first."""
    return sorted((a for a in report.get("alerts") or [] if a.get("kind") != "test" and (a.get("time") or 0) >= since),
                  key=lambda a: a["time"])


def missed_text(alerts, host, shown=3):
    """(title, body) of the toast that tells what fired while the console was closed:
    `3 alerts while you were away from gpu01`, the first lines, and the key to the report."""
    title = "%d alert%s while you were away from %s" % (len(alerts), "" if len(alerts) == 1 else "s", host)
    lines = []
    for alert in alerts[:shown]:
        line = "%s %s" % (format_time(alert["time"]), alert.get("title") or alert.get("kind") or "?")
        if alert.get("message") and alert["message"] not in line:
            line += ": %s" % alert["message"]
        lines.append(safe_text(line)[:200])
    if len(alerts) > shown:
        lines.append("and %d more" % (len(alerts) - shown))
    lines.append("a: the report")
    return title, "\n".join(lines)


def title_for(report, away):
    """The screen's one line naming the span (the report's text below leaves its own out)."""
    host = report.get("host") or ""
    return ("While you were away from %s: %s" if away else "Report of %s: the last %s") % (host, heading(report))


class AwayScreen(ModalScreen[None]):
    """`report` is report.get's reply; `away`: it covers the time nobody watched."""

    BINDINGS = [Binding("escape,q,a", "close", "close")]

    def __init__(self, report, away=False, **kwargs):
        super().__init__(**kwargs)
        self.report = report
        self.away = away

    def compose(self) -> ComposeResult:
        with Vertical(classes="dialog", id="away"):
            yield Label(safe_text(title_for(self.report, self.away)), classes="dialog-title", markup=False)
            with VerticalScroll(id="away-scroll"):
                yield Static(Text(safe_text(render(self.report, titled=False), keep="\n")), id="away-report")
            # Below the scroll, so it shows however long the night was.
            yield Label("escape (or a, q) closes it; up/down, page up/down scroll", classes="dialog-hint", id="away-hint")

    def action_close(self):
        self.dismiss(None)


def watch(app, link):
    """Tell the host a console watches it (report.watch), and show the night when nobody did."""
    client = link.client

    def run():
        try:
            hello = link.hello or {}
            report = client.call("report.get", {"since_s": DEFAULT_WINDOW_S}, timeout=60)
            last_watched_at = report.get("last_watched_at")
            since = away_since(last_watched_at, hello.get("daemon_started_at"), report["until"])
            client.subscribe(WATCH_STREAM, {}, lambda data, seq: None)
            absent_from = absence_start(last_watched_at, hello.get("daemon_started_at"), report["until"])
            if absent_from is not None and since is None:  # a short absence: what fired in it, if anything
                if absent_from < report["since"]:
                    report = client.call("report.get", {"start": absent_from, "end": report["until"]}, timeout=60)
                missed = missed_alerts(report, absent_from)
                if missed:
                    link.away_since = absent_from
                    title, body = missed_text(missed, report.get("host") or link.name)
                    app.call_from_thread(app.notify, body, title=title, severity="error" if any(a.get("urgent") for a in missed)
                                         else "warning", timeout=30, markup=False)
            if since is not None:
                if since != report["since"]:
                    report = client.call("report.get", {"start": since, "end": report["until"]}, timeout=60)
                link.away_since = since
                app.call_from_thread(app.push_screen, AwayScreen(report, away=True))
        except Exception:
            return  # an older agent without the report, or the link dropped: nothing to show

    app.run_worker(run, thread=True, exit_on_error=False, group="report-watch")


def show(app, client, away_since=None):
    """The `a` key: the last 12 hours of the shown host, or the whole absence told on connecting
    (`away_since`) when it began before them."""

    def run():
        try:
            if away_since is not None and away_since < time.time() - DEFAULT_WINDOW_S:
                report = client.call("report.get", {"start": away_since}, timeout=60)
            else:
                report = client.call("report.get", {"since_s": DEFAULT_WINDOW_S}, timeout=60)
        except Exception as exc:
            app.call_from_thread(app.notify, getattr(exc, "message", None) or str(exc), title="no report", severity="error",
                                 markup=False)
            return
        app.call_from_thread(app.push_screen, AwayScreen(report))

    app.run_worker(run, thread=True, exclusive=True, exit_on_error=False, group="report")
