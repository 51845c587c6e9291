"""The Speculation pane: one inference server at a time, its accept length over time against the
break-even line (and the K+1 ceiling), acceptance per draft position as bars, throughput and
requests; the window selectable; an alert when accept length stays under break-even.

It follows `serving.follow` (one record per server per second) and, when a server or window is
picked, backfills the window from the host's history store (`serving.history`), so a console that
connects after a night sees the night. Break-even comes from the last A/B benchmark of the same
target and drafter, or is set by hand (`b`: an accept length, or CYCLE_MS@BASELINE_TPS).
"""

import collections
import time

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical
from textual.widgets import Static

from remote.serving.breakeven import break_even

from ..screens.prompt import PromptScreen
from ..widgets.chart import TimeChart
from .base import Pane
from .gpus import freshness, stale_text

WINDOWS_S = (60, 300, 900, 3600, 6 * 3600)
KEPT_S = 6 * 3600
ALERT_AFTER_S = 60.0  # accept length under break-even this long (while drafting) raises the alert
BAR_WIDTH = 30


def window_name(seconds):
    return "%d %s" % ((seconds // 3600, "h") if seconds >= 3600 else (seconds // 60, "min"))


def bars(per_position):
    """One text bar per draft position: the share of drafts whose token there was accepted."""
    lines = []
    for position, rate in enumerate(per_position or []):
        filled = int(round(max(0.0, min(1.0, rate)) * BAR_WIDTH))
        lines.append("pos %d  %s%s %5.1f%%" % (position, "█" * filled, "·" * (BAR_WIDTH - filled), 100.0 * rate))
    return "\n".join(lines) or "no drafts in this window yet"


class SpeculationPane(Pane):
    """The servers' speculation, one server shown at a time."""

    PANE_TITLE = "Speculation"
    can_focus = True  # nothing in it takes focus, and its keys must work when its tab is shown
    BINDINGS = [
        Binding("right_square_bracket", "next_server", "next server", tooltip="show the next server"),
        Binding("left_square_bracket", "previous_server", "previous", show=False, tooltip="show the previous server"),
        Binding("w", "next_window", "window", tooltip="window: 1 min, 5 min, 15 min, 1 h, 6 h"),
        Binding("b", "set_break_even", "break-even", tooltip="set break-even: an accept length, or CYCLE_MS@BASELINE_TPS"),
    ]

    DEFAULT_CSS = """
    SpeculationPane #spec-summary { height: auto; }
    SpeculationPane #spec-charts { height: 1fr; }
    SpeculationPane #spec-bottom { height: auto; max-height: 12; }
    SpeculationPane #spec-bars { width: 1fr; height: auto; }
    SpeculationPane #spec-throughput-text { width: 1fr; height: auto; }
    """

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.servers = []  # ids, in the order shown
        self.server_info = {}  # id -> {name, k, target, drafter}
        self.selected = None
        self.window_s = WINDOWS_S[1]
        self.records = collections.defaultdict(collections.deque)  # id -> records, oldest first
        self.backfill = {}  # id -> {metric: points} from the history store
        self.break_even = {}  # id -> (accept length, where it came from)
        self.below_since = {}  # id -> when accept length went under break-even
        self.alerted = set()
        self.alert_after_s = ALERT_AFTER_S
        self.fresh = {}  # id -> (the last record, stale or not, when it came: monotonic)
        self._stream = None

    def compose(self) -> ComposeResult:
        yield Static(Text("no inference server on this host yet: start one with `specdeck serve`"), id="spec-summary")
        with Vertical(id="spec-charts"):
            yield TimeChart(title="accept length", id="spec-accept-chart")
            yield TimeChart(title="generated tokens/s", id="spec-throughput-chart")
        with Horizontal(id="spec-bottom"):
            yield Static(Text(""), id="spec-bars")
            yield Static(Text(""), id="spec-throughput-text")
        yield self.status_line()

    def on_mount(self):
        self._stream = self.follow("serving.follow", {}, self._on_records)
        self.set_interval(1.0, self._age_tick)

    def _age_tick(self):
        """Once a second: a stale figure's age grows on screen, and a quiet stream turns stale."""
        if self.selected is not None and self._freshness(self.selected)[0]:
            self.refresh_view()

    def _freshness(self, server_id):
        record, received_at = self.fresh.get(server_id, (None, None))
        return freshness(record, received_at, time.monotonic())

    # -- which servers

    def jobs_changed(self, book, changed, records):
        for job in book.of_kind("server"):
            meta = job.get("meta") or {}
            self.server_info[job["id"]] = {"name": job.get("name"), "k": meta.get("k"), "target": meta.get("target"),
                                           "drafter": meta.get("drafter"), "state": job["state"]}
            if job["id"] not in self.servers and job["process_state"] in ("running", "starting"):
                self.servers.append(job["id"])
        for job in book.of_kind("benchmark"):
            result = (job.get("progress") or {}).get("result") or {}
            meta = job.get("meta") or {}
            for server_id, info in self.server_info.items():
                if result.get("break_even_accept_length") and (info["target"], info["drafter"]) == (meta.get("target"), meta.get("drafter")):
                    if self.break_even.get(server_id, (None, "bench"))[1] == "bench":
                        self.break_even[server_id] = (result["break_even_accept_length"], "bench %s" % job["id"])
        if self.selected is None and self.servers:
            self.select(self.servers[-1])
        else:
            self.refresh_view()

    def select(self, server_id):
        self.selected = server_id
        self.refresh_view()
        self._load_history(server_id)

    def _load_history(self, server_id):
        for metric in ("accept_length", "generation_tps"):
            self.request("serving.history", {"id": server_id, "metric": metric, "since_s": self.window_s},
                         done=lambda reply, server_id=server_id, metric=metric: self._history_loaded(server_id, metric, reply),
                         failed=lambda message: None, title="speculation history")

    def _history_loaded(self, server_id, metric, reply):
        points = reply["series"][0]["points"] if reply.get("series") else []
        self.backfill.setdefault(server_id, {})[metric] = points
        if server_id == self.selected:
            self.refresh_view()

    # -- live records

    def _on_records(self, items):
        now = time.time()
        for data, _seq in items:
            latest = list((data.get("snapshot") or {}).values()) + list(data.get("records") or [])
            for record in latest:
                if not record:
                    continue
                server_id = record["server"]
                self.fresh[server_id] = (record, time.monotonic())
                if server_id not in self.servers:
                    self.servers.append(server_id)
                kept = self.records[server_id]
                if record.get("stale") or record.get("time") is None or (kept and kept[-1]["time"] >= record["time"]):
                    continue  # a stale figure is not a new second of the chart
                kept.append(record)
                while kept and kept[0]["time"] < now - KEPT_S:
                    kept.popleft()
                if server_id not in self.servers:
                    self.servers.append(server_id)
                self._check_alert(server_id, record)
        if self.selected is None and self.servers:
            self.select(self.servers[-1])
        else:
            self.refresh_view()

    def _check_alert(self, server_id, record):
        line = self.break_even.get(server_id, (None, None))[0]
        accept_length = record.get("accept_length")
        if line is None or accept_length is None:
            return  # no line, or no drafts this second (idle): neither under nor over
        if accept_length >= line:
            self.below_since.pop(server_id, None)
            self.alerted.discard(server_id)
            return
        since = self.below_since.setdefault(server_id, record["time"])
        if record["time"] - since >= self.alert_after_s and server_id not in self.alerted:
            self.alerted.add(server_id)
            self.notify("%s: accept length %.2f has been under break-even %.2f for %d s: speculation is slowing this server down"
                        % (server_id, accept_length, line, record["time"] - since), title="below break-even", severity="warning", timeout=30)

    # -- drawing

    def refresh_view(self):
        if self.selected is None:
            return
        server_id = self.selected
        info = self.server_info.get(server_id, {})
        records = [r for r in self.records.get(server_id, ()) if r["time"] >= time.time() - self.window_s]
        latest = records[-1] if records else {}
        line, line_source = self.break_even.get(server_id, (None, None))
        k = info.get("k")
        accept_points = self._points(server_id, "accept_length", records)
        drafted = [r for r in records if r.get("num_drafts")]
        window_accept = None
        if drafted:  # the window's accept length, weighted by drafts as vLLM counts it
            total_drafts = sum(r["num_drafts"] for r in drafted)
            window_accept = 1.0 + sum((r["accept_length"] - 1.0) * r["num_drafts"] for r in drafted) / total_drafts
        summary = Text()
        summary.append("%s  %s" % (server_id, info.get("name") or ""), style="bold")
        summary.append("   server %d of %d ([ and ] switch)   window %s (w)\n" % (self.servers.index(server_id) + 1, len(self.servers), window_name(self.window_s)))
        stale, age, why = self._freshness(server_id)
        summary.append("accept length now %s" % _number(latest.get("accept_length")))
        if stale:
            summary.append(" %s" % stale_text(age, why), style="bold red")
        summary.append("   over the window %s" % _number(window_accept))
        if line is not None:
            summary.append("   break-even %.2f (%s)" % (line, line_source))
            if server_id in self.alerted:
                summary.append("   UNDER BREAK-EVEN", style="bold red")
            elif window_accept is not None:
                summary.append("   %s" % ("above" if window_accept >= line else "below"), style="green" if window_accept >= line else "yellow")
        else:
            summary.append("   break-even: not known (b to set, or run `specdeck bench`)")
        if k:
            summary.append("   most with K=%d: %d" % (k, k + 1))
        summary.append("   source: %s" % (latest.get("source") or "-"))
        self.query_one("#spec-summary", Static).update(summary)
        chart = self.query_one("#spec-accept-chart", TimeChart)
        chart.thresholds = [(line, "break-even")] + ([(float(k + 1), "K+1")] if k else [])
        chart.show({"accept length": accept_points}, self.window_s)
        self.query_one("#spec-throughput-chart", TimeChart).show({"generated tok/s": self._points(server_id, "generation_tps", records)}, self.window_s)
        self.query_one("#spec-bars", Static).update(Text(bars(latest.get("per_position"))))
        self.query_one("#spec-throughput-text", Static).update(Text(
            ("%s\n" % stale_text(age, why) if stale else "") + "generated %s tok/s   accepted %s tok/s   drafted %s tok/s\nrunning %s   waiting %s   KV cache %s" % (
                _number(latest.get("generation_tps"), "%.1f"), _number(latest.get("accepted_tps"), "%.1f"),
                _number(latest.get("drafted_tps"), "%.1f"), _number(latest.get("running"), "%d"), _number(latest.get("waiting"), "%d"),
                _number(None if latest.get("kv_cache_usage") is None else 100.0 * latest["kv_cache_usage"], "%.0f%%"))))
        self.set_status("%d server(s); records follow once a second" % len(self.servers))

    def _points(self, server_id, metric, records):
        """[[time, min, mean, max]] from the history store, then the live records after it."""
        stored = [p for p in self.backfill.get(server_id, {}).get(metric, []) if p[0] >= time.time() - self.window_s]
        after = stored[-1][0] if stored else 0.0
        live = [[r["time"], r[metric], r[metric], r[metric]] for r in records if r.get(metric) is not None and r["time"] > after]
        return stored + live

    # -- keys

    def action_next_server(self):
        self._step_server(1)

    def action_previous_server(self):
        self._step_server(-1)

    def _step_server(self, step):
        if not self.servers:
            self.notify("no server to show", severity="warning")
            return
        index = self.servers.index(self.selected) if self.selected in self.servers else 0
        self.select(self.servers[(index + step) % len(self.servers)])

    def action_next_window(self):
        self.window_s = WINDOWS_S[(WINDOWS_S.index(self.window_s) + 1) % len(WINDOWS_S)]
        if self.selected is not None:
            self.select(self.selected)

    def action_set_break_even(self):
        if self.selected is None:
            self.notify("no server to set break-even for", severity="warning")
            return
        self.app.push_screen(PromptScreen("Break-even for %s: an accept length (2.46), or CYCLE_MS@BASELINE_TPS (30@82)" % self.selected),
                             self._break_even_entered)

    def _break_even_entered(self, answer):
        if not answer:
            return
        try:
            if "@" in answer:
                cycle_ms, baseline_tps = (float(part) for part in answer.split("@", 1))
                value = break_even(cycle_ms, baseline_tps)["break_even_accept_length"]
                source = "%g ms x %g tok/s" % (cycle_ms, baseline_tps)
            else:
                value, source = float(answer), "set by hand"
        except ValueError:
            self.notify("break-even is a number (2.46) or CYCLE_MS@BASELINE_TPS (30@82), not %r" % answer, severity="error")
            return
        self.break_even[self.selected] = (value, source)
        self.below_since.pop(self.selected, None)
        self.alerted.discard(self.selected)
        for record in self.records.get(self.selected, ()):  # judge the kept seconds against the new line
            self._check_alert(self.selected, record)
        self.refresh_view()


def _number(value, pattern="%.2f"):
    return "-" if value is None else pattern % value
