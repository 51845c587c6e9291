"""The Speculation pane: one inference server at a time, its accept length over time against the
break-even line (and the K+1 ceiling), acceptance per draft position as bars, throughput and
requests; the window selectable; the host's alert when accept length stays under break-even.

Every figure is the host's, computed from the engine's counters as `specdeck spec --json
--window W` computes it: "now" is the last 10 s (each `serving.follow` record carries them as
`recent`, once a second), the window's accept length and per-position bars come from
`serving.stats` over the chosen window. vLLM updates its counters in bursts, so a 1-second
division would swing between 0 and several times the rate; nothing here divides one.

The pane opens on a running server (the newest), lists dead ones too, marked dead with how
they ended and the engine's first error line. Break-even is the host's line, carried in every
record (`break_even: {accept_length, source, how}`): set by hand (`b`, `serving.set_break_even`)
for the target, it is kept on the host and holds for every server of that target, for every
console and while none is open; else the server's meta or the last A/B benchmark of the same
target and drafter. The host raises the alert when accept length stays under it
(remote/notify/evaluate.py); the pane follows the host's alerts and shows that one. Under them, a row per K' up
to the server's K and the newest K sweep's beyond it (k_rows.py), as `specdeck advise` says;
asked again as soon as a benchmark of the server's target and drafter ends.

The two charts come first: in a short terminal (80x24) the per-position bars become one line
and the K rows one line, so that both charts keep plotted rows.
"""

import collections
import time

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical
from textual.widgets import Static

from ..display import safe_text
from ..freshness import freshness, stale_text
from ..pane import Pane
from ..screens.prompt import PromptScreen
from ..widgets.chart import TimeChart
from ..widgets.position_heat import PositionHeat, series_of
from .advisor import line_text
from .baseline_text import against_text, under
from .k_rows import k_text
from .position_text import CONDITIONAL_NAME, rates
from .model import RECENT_S, engine_lines, figure, how_it_ended, is_dead, is_live, line_of, parse_break_even, per_k, target_key

WINDOWS_S = (60, 300, 900, 3600, 6 * 3600)
KEPT_S = 6 * 3600
WINDOW_REFRESH_S = 5.0  # the chosen window's figures are asked again this often
BAR_WIDTH = 20
COMPACT_BELOW_ROWS = 30  # a pane shorter than this shows its bars and K rows one line each


def window_name(seconds):
    return "%d %s" % ((seconds // 3600, "h") if seconds >= 3600 else (seconds // 60, "min"))


def bars(per_position):
    """One text bar per draft position: the share of drafts whose token there was accepted
    (`pos 0  ███···  96.8%`: 34 columns, half of an 80-column pane)."""
    lines = []
    for position, rate in enumerate(per_position or []):
        filled = int(round(max(0.0, min(1.0, rate)) * BAR_WIDTH))
        lines.append("pos %d  %s%s %5.1f%%" % (position, "█" * filled, "·" * (BAR_WIDTH - filled), 100.0 * rate))
    return "\n".join(lines)


def bars_line(per_position):
    """The same shares on one line, for a short pane: `pos 0 96.8%   pos 1 81.0%`."""
    return "   ".join("pos %d %.1f%%" % (position, 100.0 * rate) for position, rate in enumerate(per_position or []))


class SpeculationPane(Pane):
    """The servers' speculation, one server shown at a time."""

    PANE_TITLE = "Speculation"
    can_focus = True  # nothing in it takes focus, and its keys must work when its tab is shown
    BINDINGS = [
        Binding("right_square_bracket", "next_server", "next server", tooltip="show the next server"),
        Binding("left_square_bracket", "previous_server", "previous", show=False, tooltip="show the previous server"),
        Binding("w", "next_window", "window", tooltip="window: 1 min, 5 min, 15 min, 1 h, 6 h"),
        Binding("p", "toggle_positions", "positions", tooltip="position-by-time view: conditional rate or unconditional share"),
        Binding("b", "set_break_even", "break-even", tooltip="set break-even for the server's target: an accept length, or CYCLE_MS@BASELINE_TPS"),
    ]

    DEFAULT_CSS = """
    SpeculationPane #spec-summary { height: auto; }
    SpeculationPane #spec-charts { height: 1fr; min-height: 12; }
    SpeculationPane #spec-charts TimeChart { min-height: 6; }
    SpeculationPane #spec-bottom { height: auto; max-height: 12; }
    SpeculationPane #spec-bars { width: auto; height: auto; margin-right: 4; }
    SpeculationPane #spec-throughput-text { width: 1fr; height: auto; }
    SpeculationPane #spec-k { height: auto; max-height: 12; display: none; }
    SpeculationPane.-compact #spec-bottom { layout: vertical; }
    SpeculationPane.-compact #spec-bars { width: 100%; margin-right: 0; }
    SpeculationPane.-compact #spec-k { max-height: 1; }
    SpeculationPane #spec-positions { max-height: 12; }
    SpeculationPane.-compact #spec-positions { display: none; }
    """

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.servers = []  # ids, in the order shown (oldest first)
        self.server_info = {}  # id -> {name, k, target, drafter, state, ended}
        self.selected = None
        self.picked = False  # the user chose a server: no longer moved to a running one
        self.window_s = WINDOWS_S[1]
        self.records = collections.defaultdict(collections.deque)  # id -> the host's `recent` figures, oldest first
        self.backfill = {}  # id -> {metric: points} from the history store
        self.window_figures = {}  # id -> serving.stats over the chosen window
        self.advice = {}  # id -> serving.advise over the chosen window (per-K rows, a sweep's)
        self.lines = {}  # id -> the host's break-even line {accept_length, source, how}, or None
        self.baselines = {}  # id -> the saved baseline of its (target, drafter) {accept_length, margin, ...}, or None
        self.alerted = {}  # id -> the host's below_break_even alert, until accept length is back over the line
        self.fresh = {}  # id -> (the last record, stale or not, when it came: monotonic)
        self.shown = {}  # what the summary shows now: {server, time, accept_length, generation_tps}
        self._asking = set()  # servers whose window figures or status are being asked

    def compose(self) -> ComposeResult:
        yield Static(Text("no inference server on this host yet: start one with `specdeck serve`"), id="spec-summary")
        with Vertical(id="spec-charts"):
            yield TimeChart(title="accept length (each point: the last %d s)" % RECENT_S, y_floor=1.0, id="spec-accept-chart")
            yield TimeChart(title="generated tokens/s (each point: the last %d s)" % RECENT_S, y_floor=0.0, id="spec-throughput-chart")
        with Horizontal(id="spec-bottom"):
            yield Static(Text(""), id="spec-bars")
            yield Static(Text(""), id="spec-throughput-text")
        yield Static(Text(""), id="spec-k")
        yield PositionHeat(id="spec-positions")
        yield self.status_line()

    def on_mount(self):
        self.follow("serving.follow", {}, self._on_records)
        self.follow("notify.follow", {}, self._on_alerts)
        self.set_interval(1.0, self._age_tick)
        self.set_interval(WINDOW_REFRESH_S, self._ask_window)
        if self.client is not None:
            self._ask_recent_alerts()

    def client_ready(self):
        self._ask_recent_alerts()

    def _ask_recent_alerts(self):
        """The host's newest alerts (notify.list), so one raised while no console was open is
        shown too; notify.follow brings those raised from now on."""
        def came(reply):
            recent = [a for a in reply.get("recent") or () if isinstance(a, dict) and isinstance(a.get("time"), (int, float))]
            self._on_alerts([({"records": sorted(recent, key=lambda a: a["time"])}, None)])

        self.request("notify.list", {}, done=came, failed=lambda message: None, notify=False, title="alerts")

    def pane_shown(self):
        self._ask_window()

    def on_resize(self, event):
        compact = event.size.height < COMPACT_BELOW_ROWS
        if compact != self.has_class("-compact"):
            self.set_class(compact, "-compact")
            self.refresh_view()

    @property
    def compact(self):
        return self.has_class("-compact")

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
            progress = job.get("progress") or {}
            info = self.server_info.setdefault(job["id"], {})
            info.update(name=job.get("name"), k=meta.get("k"), target=meta.get("target"), drafter=meta.get("drafter"),
                        state=job["process_state"], ended=progress.get("error") or info.get("ended"),
                        exit_code=job.get("exit_code"), signal=job.get("signal"))
            if job["id"] not in self.servers:
                self.servers.append(job["id"])
        ended = [job.get("meta") or {} for job in book.of_kind("benchmark") if job["id"] in changed and not is_live(job)]
        self._choose()
        for meta in ended:
            self._benchmark_ended(meta.get("target"), meta.get("drafter"))

    def _benchmark_ended(self, target, drafter):
        """A benchmark (a K sweep, say) of a server's target and drafter ended: the advice the
        pane holds for that server may name no sweep; ask again now, not when the pane is reopened."""
        same = target_key
        for server_id in self.servers:
            info = self.server_info.get(server_id) or {}
            if same(info.get("target")) and same(info.get("target")) == same(target) and same(info.get("drafter")) == same(drafter):
                self.advice.pop(server_id, None)
                if server_id == self.selected:
                    self._ask_advice(server_id)

    def _live(self, server_id):
        return is_live(self.server_info.get(server_id))  # an attached server (no job) counts as running

    def _choose(self):
        """Show the newest running server, unless the user picked one; else the newest."""
        running = [s for s in self.servers if self._live(s)]
        best = running[-1] if running else (self.servers[-1] if self.servers else None)
        if best is not None and (self.selected is None or (not self.picked and not self._live(self.selected) and running)):
            if best != self.selected:
                self.select(best)
                return
        self.refresh_view()

    def select(self, server_id):
        self.selected = server_id
        self.refresh_view()
        self._load_history(server_id)
        self._ask_window()

    def _load_history(self, server_id):
        # Buckets of at least RECENT_S: each point an average over seconds, never one second's burst.
        resolution_s = max(float(RECENT_S), self.window_s / 240.0)
        for metric in ("accept_length", "generation_tps"):
            self.request("serving.history", {"id": server_id, "metric": metric, "since_s": self.window_s, "resolution_s": resolution_s},
                         done=lambda reply, server_id=server_id, metric=metric: self._history_loaded(server_id, metric, reply),
                         failed=lambda message: None, title="speculation history")

    def _ask_positions(self, server_id):
        resolution_s = max(float(RECENT_S), self.window_s / 60.0)  # about one cell a bucket
        self.request("serving.history", {"id": server_id, "metric": "per_position", "since_s": self.window_s, "resolution_s": resolution_s},
                     done=lambda reply: server_id == self.selected and self.query_one(PositionHeat).show(series_of(reply), self.window_s),
                     failed=lambda message: None, title="per-position history")

    def action_toggle_positions(self):
        self.query_one(PositionHeat).toggle()

    def _history_loaded(self, server_id, metric, reply):
        points = reply["series"][0]["points"] if reply.get("series") else []
        self.backfill.setdefault(server_id, {})[metric] = points
        if server_id == self.selected:
            self.refresh_view()

    def _ask_window(self):
        """The chosen window's figures from the host (serving.stats), or how a dead server ended."""
        server_id = self.selected
        if server_id is None or server_id in self._asking or not self.active or self.client is None:
            return
        self._asking.add(server_id)
        if not self._live(server_id):
            if self.server_info[server_id].get("first_error") is not None:
                self._asking.discard(server_id)
                return
            self.request("serving.status", {"id": server_id}, done=lambda reply: self._status_came(server_id, reply),
                         failed=lambda message: self._asking.discard(server_id), title="server status")
            return
        if server_id not in self.fresh:  # not read by the host's feed yet (starting): nothing to ask
            self._asking.discard(server_id)
            return
        self.request("serving.stats", {"id": server_id, "window_s": float(self.window_s)},
                     done=lambda reply: self._window_came(server_id, reply), failed=lambda message: self._asking.discard(server_id),
                     title="speculation figures")

    def _window_came(self, server_id, reply):
        self._asking.discard(server_id)
        self.window_figures[server_id] = reply
        if "break_even" in reply:
            self.lines[server_id] = line_of(reply["break_even"])
        if server_id == self.selected:
            self.refresh_view()
        self._ask_positions(server_id)
        if reply.get("per_k"):  # the rows of K, from the same window (and the newest sweep's cycle times)
            self._ask_advice(server_id)

    def _ask_advice(self, server_id):
        if self.client is None or not self._live(server_id):
            return
        self.request("serving.advise", {"id": server_id, "window_s": float(self.window_s)}, title="K advice",
                     done=lambda advice: self._advice_came(server_id, advice), failed=lambda message: None)

    def _advice_came(self, server_id, advice):
        self.advice[server_id] = advice
        if server_id == self.selected:
            self.refresh_view()

    def _status_came(self, server_id, reply):
        self._asking.discard(server_id)
        info = self.server_info.setdefault(server_id, {})
        info["first_error"] = reply.get("reason") or ""
        if "break_even" in reply:
            self.lines[server_id] = line_of(reply["break_even"])
        if reply.get("ended"):
            info["ended"] = reply["ended"]
        if server_id == self.selected:
            self.refresh_view()

    # -- live records

    def _on_records(self, items):
        for data, _seq in items:
            latest = list((data.get("snapshot") or {}).values()) + list(data.get("records") or [])
            for record in latest:
                if record:
                    self._take(record)
        shown = self.window_figures.get(self.selected)
        recent = self.records.get(self.selected)
        if shown is not None and not shown.get("num_drafts") and recent and recent[-1].get("num_drafts"):
            self._ask_window()  # drafts have begun since the window was asked: ask now, not in 5 s
        self._choose()

    def _take(self, record):
        server_id = record["server"]
        self.fresh[server_id] = (record, time.monotonic())
        if "break_even" in record:
            self.lines[server_id] = line_of(record["break_even"])
        if "baseline" in record:
            self.baselines[server_id] = record["baseline"] if isinstance(record["baseline"], dict) else None
        if server_id not in self.servers:
            self.servers.append(server_id)
        # The host's figures over its last RECENT_S seconds; a log-read server's own line is already
        # an average over the engine's interval.
        figures = record.get("recent") or (record if record.get("source") == "log" else None)
        kept = self.records[server_id]
        if record.get("stale") or figures is None or figures.get("time") is None or (kept and kept[-1]["time"] >= figures["time"]):
            return  # a stale figure is not a new point of the chart
        kept.append(figures)
        while kept and kept[0]["time"] < figures["time"] - KEPT_S:
            kept.popleft()
        line = self.lines.get(server_id)
        if line and figures.get("accept_length") is not None and figures["accept_length"] >= line["accept_length"]:
            self.alerted.pop(server_id, None)  # back over the line: the host's alert is over

    def break_even_for(self, server_id):
        """The server's break-even line as the host gives it ({accept_length, source, how}), or None."""
        return self.lines.get(server_id)

    def _on_alerts(self, items):
        """The host's alerts: its below_break_even for a server is shown on that server."""
        for data, _seq in items:
            for alert in data.get("records") or ():
                if isinstance(alert, dict) and alert.get("kind") == "below_break_even" and isinstance(alert.get("server"), str):
                    self.alerted[alert["server"]] = alert
                    if alert["server"] == self.selected:
                        self.refresh_view()

    # -- drawing

    def refresh_view(self):
        if self.selected is None:
            return
        server_id = self.selected
        info = self.server_info.get(server_id, {})
        now_s = time.time()
        records = [r for r in self.records.get(server_id, ()) if r["time"] >= now_s - self.window_s]
        live = self._live(server_id)
        latest = (records[-1] if records else {}) if live else {}
        window = self.window_figures.get(server_id) or {}
        line = self.break_even_for(server_id)
        k = info.get("k")
        summary = Text()
        summary.append(safe_text("%s  %s" % (server_id, info.get("name") or "")), style="bold")
        compact = self.compact  # a short pane: the summary in two lines, the keys left to the key bar
        summary.append("   server %d of %d%s   window %s (w)\n" % (self.servers.index(server_id) + 1, len(self.servers),
                                                           "" if compact else " ([ and ] switch)", window_name(self.window_s)))
        if not live:
            dead = is_dead(info)
            summary.append("%s: the server %s\n" % ("DEAD" if dead else "ENDED", how_it_ended(info)), style="bold red" if dead else "bold")
        stale, age, why = self._freshness(server_id)
        summary.append("accept length now %s" % figure(latest, "accept_length"))
        summary.append(" (last %d s)" % RECENT_S, style="dim")
        if stale and live:
            summary.append(" %s" % stale_text(age, why), style="bold red")
        window_accept = window.get("accept_length")
        summary.append("   %s %s" % ("window" if compact else "over the window", figure(window, "accept_length")))
        if line:
            summary.append(safe_text("   break-even %s" % line_text(line)))
            alert = self.alerted.get(server_id) if live else None
            if alert is not None:
                summary.append(safe_text("   UNDER BREAK-EVEN since %s (the host's alert)" % (alert.get("time_text") or "?")), style="bold red")
            elif window_accept is not None:
                above = window_accept >= line["accept_length"]
                summary.append("   %s" % ("above" if above else "below"), style="green" if above else "yellow")
        else:
            summary.append("   break-even: not known (%s)" % ("b" if compact else "b to set, or run `specdeck bench`"))
        baseline = self.baselines.get(server_id)
        if baseline and baseline.get("accept_length"):
            summary.append("   " + against_text(window_accept, baseline), style="yellow" if under(window_accept, baseline) else "")
        if k:
            summary.append("   most with K=%d: %d" % (k, k + 1))
        source = latest.get("source") or window.get("source") or "-"
        if not compact or source == "log":  # a short pane says only the unusual source: the engine's log lines
            summary.append("   source: %s" % safe_text(source))
        for said in engine_lines(latest or window):  # an SGLang server: its settings, and whether its figures are a window
            summary.append("\n" + said)
        self.shown = {"server": server_id, "time": latest.get("time"), "accept_length": latest.get("accept_length"),
                      "generation_tps": latest.get("generation_tps")}
        self.query_one("#spec-summary", Static).update(summary)
        chart = self.query_one("#spec-accept-chart", TimeChart)
        chart.thresholds = [(line["accept_length"] if line else None, "break-even")] + ([(float(k + 1), "K+1")] if k else [])
        chart.show({"accept length": self._points(server_id, "accept_length", records)}, self.window_s)
        self.query_one("#spec-throughput-chart", TimeChart).show({"generated tok/s": self._points(server_id, "generation_tps", records)}, self.window_s)
        self.query_one("#spec-bars", Static).update(Text(self._bars_text(window, latest)))
        k_rows = self.query_one("#spec-k", Static)
        k_rows.display = True  # hidden until a server is shown: no empty line in the layout
        if self.compact:  # the charts first: the table and the advice need a taller terminal
            rows = per_k(window)
            k_rows.update(Text("accept length at each K: %s (taller: advice)" % rows if rows != "-"
                               else "accept length at each K: no drafts in the window yet"))
        else:
            k_rows.update(Text(k_text(self.advice.get(server_id), window, k, line)))
        # Lines short enough for the half of an 80-column pane the bars leave (all of it when compact).
        self.query_one("#spec-throughput-text", Static).update(Text(
            ("%s\n" % stale_text(age, why) if stale and live else "") + "last %d s: generated %s tok/s%saccepted %s tok/s   drafted %s tok/s\nrunning %s   waiting %s   KV cache %s" % (
                RECENT_S, figure(latest, "generation_tps"), "   " if self.compact else "\n", figure(latest, "accepted_tps"),
                figure(latest, "drafted_tps"), figure(latest, "running"), figure(latest, "waiting"), figure(latest, "kv_cache_usage"))))
        running = sum(1 for s in self.servers if self._live(s))
        self.set_status("%d server(s), %d running; figures are the host's, over its last %d s, each second" % (len(self.servers), running, RECENT_S))

    def _bars_text(self, window, latest):
        """The chosen window's per-position acceptance, else the last RECENT_S seconds' (a window
        asked before the first drafts)."""
        shown, gap = (bars_line, " ") if self.compact else (bars, "\n")
        if window.get("per_position_note"):
            return safe_text(window["per_position_note"])
        if window.get("per_position") and self.compact:  # one line of 80 columns: K=3 whole
            return "share (%s): %s  conditional %s" % (_span(window.get("window_s") or self.window_s), "  ".join(
                "pos %d %.1f%%" % (position, 100.0 * rate) for position, rate in enumerate(window["per_position"])),
                rates(window.get("per_position_conditional")))
        if window.get("per_position"):
            return "per position over the last %s (unconditional share):%s%s%s%s %s" % (
                _span(window.get("window_s") or self.window_s), gap, shown(window["per_position"]), gap, CONDITIONAL_NAME,
                rates(window.get("per_position_conditional")))
        if latest.get("per_position"):
            return "per position over the last %d s:%s%s" % (RECENT_S, gap, shown(latest["per_position"]))
        return "no drafts in the last %s" % window_name(self.window_s) if window else "per position: asking the host…"

    def _points(self, server_id, metric, records):
        """[[time, min, mean, max]] from the history store, then the live figures after it."""
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
        self.picked = True
        self.select(self.servers[(index + step) % len(self.servers)])

    def action_next_window(self):
        self.window_s = WINDOWS_S[(WINDOWS_S.index(self.window_s) + 1) % len(WINDOWS_S)]
        self.window_figures.clear()
        self.advice.clear()
        if self.selected is not None:
            self.select(self.selected)

    def action_set_break_even(self):
        if self.selected is None:
            self.notify("no server to set break-even for", severity="warning")
            return
        target = self.server_info.get(self.selected, {}).get("target")
        self.app.push_screen(PromptScreen("Break-even for %s (every server of it): an accept length (2.46), or CYCLE_MS@BASELINE_TPS (30@82)"
                                          % (target or self.selected)), self._break_even_entered)

    def _break_even_entered(self, answer):
        if not answer:
            return
        try:
            params = parse_break_even(answer)
        except ValueError:
            self.notify("break-even is a number (2.46) or CYCLE_MS@BASELINE_TPS (30@82), not %r" % answer, severity="error")
            return
        server_id = self.selected
        self.request("serving.set_break_even", dict(params, id=server_id), title="break-even",
                     done=lambda reply: self._break_even_set(server_id, reply))

    def _break_even_set(self, server_id, reply):
        """The host keeps the line: every server of the same target has it (their records say
        so from the next second); the time under it counts again from now, there as here."""
        target = reply.get("target")
        for other in self.servers:
            if other == server_id or (target and target_key(self.server_info.get(other, {}).get("target")) == target):
                self.lines[other] = line_of(reply.get("break_even"))
                self.alerted.pop(other, None)
        line = line_of(reply.get("break_even"))
        self.say("break-even %s kept on the host for %s" % (line_text(line), target or server_id) if line
                 else "break-even removed on the host for %s" % (target or server_id))
        self.refresh_view()


def _span(seconds):
    return "%d s" % round(seconds) if seconds < 120 else window_name(int(seconds))
