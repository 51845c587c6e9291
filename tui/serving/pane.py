"""The Speculation pane: one inference server at a time, its accept length over time against the
break-even line (and the K+1 ceiling), acceptance per draft position as bars, throughput and
requests; the window selectable; the host's alert when accept length stays under break-even.

Every figure is the host's, computed from the engine's counters as `specdeck spec --json
--window W` computes it: "now" is the last 10 s (each `serving.follow` record carries them as
`recent`, once a second), the window's accept length, per-position bars and rows of K come
from one `serving.advise` over the chosen window (its `window`: what `serving.stats` gives). vLLM updates its counters in bursts, so a 1-second
division would swing between 0 and several times the rate; nothing here divides one.

The pane opens on a running server (the newest), lists dead ones too, marked dead with how
they ended and the engine's first error line. Break-even is the host's line, carried in every
record (`break_even: {accept_length, source, how}`): set by hand (`b`, `serving.set_break_even`)
for the target, it is kept on the host and holds for every server of that target, for every
console and while none is open; else the server's meta or the last A/B benchmark of the same
target and drafter. The host raises the alert when accept length stays under it
(remote/notify/evaluate.py); the host's model follows its alerts and the pane shows that one. Under them, a row per K' up
to the server's K and the newest K sweep's beyond it (k_rows.py), as `specdeck advise` says;
asked again as soon as a benchmark of the server's target and drafter ends.

The two charts come first: in a short terminal (80x24) the per-position bars become one line
and the K rows one line, so that both charts keep plotted rows.

The host's servers are its model's records (tui/host/serving.py): the pane keeps which server
and window it shows, asks the model for what that needs, and redraws on its `ServingChanged`.
"""

import time

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical
from textual.widgets import Static

from ..display import safe_text
from ..freshness import freshness, stale_text
from ..host.serving import ServingChanged
from ..pane import Pane
from ..screens.prompt import PromptScreen
from ..widgets.chart import TimeChart
from ..widgets.position_heat import PositionHeat, series_of
from .advisor import line_text
from .baseline_text import against_text, under
from .k_rows import k_text
from .position_text import CONDITIONAL_NAME, rates
from .model import (RECENT_S, engine_lines, figure, how_it_ended, identity_line, is_dead, parse_break_even, per_k, predicted_of,
                    predicted_shares, predicted_summary)

WINDOWS_S = (60, 300, 900, 3600, 6 * 3600)
WINDOW_REFRESH_S = 5.0  # the chosen window's figures are asked again this often
BAR_WIDTH = 20
COMPACT_BELOW_ROWS = 30  # a pane shorter than this shows its bars and K rows one line each
# Narrower than the bars' block (~60 columns with its title), its margin and the throughput
# lines (~40) side by side: the blocks go one under another, none squeezed into a sliver.
STACKED_BELOW_COLUMNS = 104


def window_name(seconds):
    return "%d %s" % ((seconds // 3600, "h") if seconds >= 3600 else (seconds // 60, "min"))


def window_figure(window, latest):
    """`1.00 (705 drafts)`: the window's accept length with the drafts it counts (a window of
    rejected drafts is 1.00, not "-"); `asking the host…` while the window's figures have not
    come but the server drafts; `-` when it drafted nothing in the window."""
    if window.get("accept_length") is not None:
        drafts = window.get("num_drafts")
        return figure(window, "accept_length") + (" (%d drafts)" % drafts if drafts else "")
    if not window and latest.get("num_drafts"):
        return "asking the host…"
    return "-"


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
    SHORT_TITLE = "Spec"  # its tab on a narrow terminal (tui/widgets/pane_tabs.py)
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
    SpeculationPane.-compact #spec-bottom, SpeculationPane.-stacked #spec-bottom { layout: vertical; }
    SpeculationPane.-compact #spec-bars, SpeculationPane.-stacked #spec-bars { width: 100%; margin-right: 0; }
    SpeculationPane.-stacked #spec-throughput-text { width: 100%; }
    SpeculationPane.-compact #spec-k { max-height: 1; }
    SpeculationPane #spec-positions { max-height: 12; }
    SpeculationPane.-compact #spec-positions { display: none; }
    """

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        # The host's servers are its model's (tui/host/serving.py); the pane keeps what it shows.
        self.selected = None
        self.picked = False  # the user chose a server: no longer moved to a running one
        self.window_s = WINDOWS_S[1]
        self.shown = {}  # what the summary shows now: {server, time, accept_length, generation_tps}

    @property
    def serving(self):
        return self.model.serving

    @property
    def servers(self):
        """The host's servers' ids, in the order shown (oldest first)."""
        return self.serving.ids

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
        self.serving.follow(self)
        self.set_interval(1.0, self._age_tick)
        self.set_interval(WINDOW_REFRESH_S, self._ask_window)
        if self.servers:  # the host's model has them already (the host shown again): at once
            self._choose()

    def pane_shown(self):
        self._ask_window()

    def on_resize(self, event):
        compact = event.size.height < COMPACT_BELOW_ROWS
        stacked = event.size.width < STACKED_BELOW_COLUMNS
        if compact != self.has_class("-compact") or stacked != self.has_class("-stacked"):
            self.set_class(compact, "-compact")
            self.set_class(stacked, "-stacked")
            self.refresh_view()

    @property
    def compact(self):
        return self.has_class("-compact")

    def _age_tick(self):
        """Once a second: a stale figure's age grows on screen, and a quiet stream turns stale."""
        if self.selected is not None and self._freshness(self.selected)[0]:
            self.refresh_view()

    def _freshness(self, server_id):
        record = self.serving.records.get(server_id)
        latest = record.latest if record is not None else None
        return freshness(latest.value if latest else None, latest.received_s if latest else None, time.monotonic())

    # -- which servers

    def jobs_changed(self, book, changed, records):
        stale = self.serving.take_jobs(book, changed)
        self._choose()
        if self.selected in stale:  # a K sweep of its target and drafter ended: its rows of K, now
            self._ask_window()

    def _live(self, server_id):
        return self.serving.live(server_id)  # an attached server (no job) counts as running

    def _choose(self):
        """Show the newest running server, unless the user picked one; else the newest."""
        servers = self.servers
        running = [s for s in servers if self._live(s)]
        best = running[-1] if running else (servers[-1] if servers else None)
        if best is not None and (self.selected is None or (not self.picked and not self._live(self.selected) and running)):
            if best != self.selected:
                self.select(best)
                return
        self.refresh_view()

    def select(self, server_id):
        self.selected = server_id
        self.refresh_view()
        self.serving.ask_history(self, server_id, self.window_s)
        self._ask_window()

    def action_toggle_positions(self):
        self.query_one(PositionHeat).toggle()

    def _ask_window(self):
        """The chosen window's figures and advice from the host (one serving.advise), or how a
        dead server ended."""
        if self.selected is not None and self.active:
            self.serving.ask_window(self, self.selected, self.window_s)

    def on_serving_changed(self, message: ServingChanged):
        message.stop()
        if "records" in message.what:
            record = self.serving.records.get(self.selected)
            window = record.window(self.window_s) if record is not None else None
            latest = record.points[-1] if record is not None and record.points else None
            if record is not None and record.advice_over(self.window_s) is not None and not window.get("num_drafts") and latest and latest.get("num_drafts"):
                self._ask_window()  # drafts have begun since the window was asked: ask now, not in 5 s
            self._choose()
            return
        if self.selected not in message.servers:
            return
        if "positions" in message.what:
            history = self.serving.records[self.selected].history.get("per_position")
            if history is not None and history.key == self.window_s:
                self.query_one(PositionHeat).show(series_of(history.value), self.window_s)
            return
        self.refresh_view()

    def break_even_for(self, server_id):
        """The server's break-even line as the host gives it ({accept_length, source, how}), or None."""
        record = self.serving.records.get(server_id)
        return record.line if record is not None else None

    # -- drawing

    def refresh_view(self):
        if self.selected is None:
            return
        server_id = self.selected
        record = self.serving.record(server_id)
        info = record.job or {}
        now_s = time.time()
        records = [r for r in record.points if r["time"] >= now_s - self.window_s]
        live = self._live(server_id)
        latest = (records[-1] if records else {}) if live else {}
        window = record.window(self.window_s)
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
        summary.append("   %s %s" % ("window" if compact else "over the window", window_figure(window, latest)))
        if line:
            summary.append(safe_text("   break-even %s" % line_text(line)))
            alert = self.serving.alerts.get(server_id) if live else None
            if alert is not None:
                summary.append(safe_text("   UNDER BREAK-EVEN since %s (the host's alert)" % (alert.get("time_text") or "?")), style="bold red")
            elif window_accept is not None:
                above = window_accept >= line["accept_length"]
                summary.append("   %s" % ("above" if above else "below"), style="green" if above else "yellow")
        else:
            summary.append("   break-even: not known (%s)" % ("b" if compact else "b to set, or run `specdeck bench`"))
        baseline = record.baseline
        if baseline and baseline.get("accept_length"):
            summary.append("   " + against_text(window_accept, baseline), style="yellow" if under(window_accept, baseline) else "")
        if k:
            summary.append("   most with K=%d: %d" % (k, k + 1))
        source = latest.get("source") or window.get("source") or "-"
        if not compact or source == "log":  # a short pane says only the unusual source: the engine's log lines
            summary.append("   source: %s" % safe_text(source))
        for said in engine_lines(latest or window):  # an SGLang server: its settings, and whether its figures are a window
            summary.append("\n" + said)
        predicted = predicted_of(latest) or predicted_of(window)  # the served drafter's profile, as the host read it
        if predicted is not None:
            summary.append("\n" + predicted_summary(predicted, latest.get("accept_length")))
        disagree = identity_line(latest) or identity_line(window)  # shown as the engine gave it, never averaged away
        if disagree:
            summary.append("\n" + disagree, style="bold red")
        self.shown = {"server": server_id, "time": latest.get("time"), "accept_length": latest.get("accept_length"),
                      "generation_tps": latest.get("generation_tps")}
        self.query_one("#spec-summary", Static).update(summary)
        chart = self.query_one("#spec-accept-chart", TimeChart)
        chart.thresholds = [(line["accept_length"] if line else None, "break-even")] + ([(float(k + 1), "K+1")] if k else [])
        chart.show({"accept length": self._points(server_id, "accept_length", records)}, self.window_s)
        self.query_one("#spec-throughput-chart", TimeChart).show({"generated tok/s": self._points(server_id, "generation_tps", records)}, self.window_s)
        shares = predicted_shares(predicted)
        self.query_one("#spec-bars", Static).update(Text(self._bars_text(window, latest) + (
            "%sthe profile's share (predicted): %s" % (" " if self.compact else "\n", shares) if shares else "")))
        k_rows = self.query_one("#spec-k", Static)
        k_rows.display = True  # hidden until a server is shown: no empty line in the layout
        if self.compact:  # the charts first: the table and the advice need a taller terminal
            rows = per_k(window)
            k_rows.update(Text("accept length at each K: %s (taller: advice)" % rows if rows != "-"
                               else "accept length at each K: %s" % ("asking the host…" if not window and latest.get("num_drafts")
                                                                     else "no drafts in the window yet")))
        else:
            k_rows.update(Text(k_text(record.advice_over(self.window_s), window, k, line)))
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
        history = self.serving.record(server_id).history.get(metric)
        series = (history.value.get("series") or []) if history is not None else []
        stored = [p for p in (series[0]["points"] if series else []) if p[0] >= time.time() - self.window_s]
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
        if self.selected is not None:
            self.select(self.selected)

    def action_set_break_even(self):
        if self.selected is None:
            self.notify("no server to set break-even for", severity="warning")
            return
        target = (self.serving.record(self.selected).job or {}).get("target")
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
        line = self.serving.line_set(server_id, reply)
        self.say("break-even %s kept on the host for %s" % (line_text(line), target or server_id) if line
                 else "break-even removed on the host for %s" % (target or server_id))
        self.refresh_view()


def _span(seconds):
    return "%d s" % round(seconds) if seconds < 120 else window_name(int(seconds))
