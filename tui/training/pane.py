"""The Training pane: one training (or data-generation) run at a time: its loss or per-position
accuracy curve against steps, the accept length the accuracies predict (per step and per
validation epoch) and the one measured per checkpoint, against the break-even line; step and
epoch progress, step rate, ETA, tokens/s; the checkpoint list with validation metrics, predicted,
scored (`checkpoints --score`, `train --score-data`) and measured accept length and verdict, the
best by scored accept length (^) beside the trainer's best (*); the run's alerts (a NaN loss, a
loss that stopped falling, a non-zero exit).

It opens on the newest live training run (else the newest run) and follows the newest live one
until a run is picked with [ or ]. A run has one predicted accept length, its newest
validation's when it has validation records, else its newest training step's (the rule and
the formula are remote/training/curves.py's, which `specdeck curves` prints too): the headline
says which it is, the chart draws that one, and the verdict against break-even judges it (or
the newest measured checkpoint, said so).

It loads a run's curves from the host (`training.curves`: every step, or buckets of steps with
their loss min and max for a long run) and follows `training.follow` for the records after them, so a console that connects after
a night sees the night. Drawing is at most twice a second: a run logging 10 steps a second must
not redraw the charts ten times.
"""

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal
from textual.widgets import DataTable, Static

from remote.training import curves as run_curves

from ..display import format_duration, safe_text
from ..pane import Pane
from ..screens.prompt import PromptScreen
from ..widgets.chart import TimeChart
from ..jobs.model import is_live
from .model import best_line, loss_text, number
from .series import CHECKPOINT_COLUMNS, LEGEND, accept_series, checkpoint_row, metric_series, run_prediction

METRICS = ("loss", "full acc", "cond acc", "loss per position", "step ms", "tokens/s")
QUIET_S = 60.0  # a live run that has sent nothing for this long says how long it has been
RELOAD_S = 30.0  # a running run's curves and alerts are asked again this often while shown
DRAW_EVERY_S = 0.5


class TrainingPane(Pane):
    """The host's training and data-generation runs, one shown at a time."""

    PANE_TITLE = "Training"
    SHORT_TITLE = "Train"  # its tab on a narrow terminal (tui/widgets/pane_tabs.py)
    can_focus = True
    BINDINGS = [
        Binding("right_square_bracket", "next_run", "next run", tooltip="show the next training run"),
        Binding("left_square_bracket", "previous_run", "previous", show=False, tooltip="show the previous training run"),
        Binding("c", "next_metric", "curve", tooltip="curve: loss, full acc, cond acc, loss per position, step ms, tokens/s"),
        Binding("m", "measure", "measure", tooltip="measure the highlighted checkpoint's accept length (the A/B benchmark)"),
    ]

    DEFAULT_CSS = """
    TrainingPane #training-summary { height: auto; }
    TrainingPane #training-alerts { height: auto; color: $error; text-style: bold; }
    TrainingPane #training-charts { height: 1fr; }
    TrainingPane #training-charts TimeChart { width: 1fr; }
    TrainingPane #training-checkpoints { height: auto; max-height: 8; }
    TrainingPane #training-legend { height: 1; color: $text-muted; }
    """

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.selected = None
        self.picked = False  # a run picked with [ or ]: no longer follow the newest live one
        self.metric = METRICS[0]
        self._dirty = False
        self._loading = set()

    @property
    def held(self):
        """The host model's runs (tui/host/training.py): this pane is a view of them."""
        return self.model.training

    @property
    def runs(self):
        return [job_id for job_id in self.held.ids if self.held.records[job_id].job]

    def compose(self) -> ComposeResult:
        yield Static(Text("no training run on this host yet: start one with `specdeck train`"), id="training-summary")
        yield Static(Text(""), id="training-alerts")
        with Horizontal(id="training-charts"):
            yield TimeChart(title="loss", time_axis=False, id="training-metric-chart")
            yield TimeChart(title="accept length", time_axis=False, id="training-accept-chart")
        yield DataTable(id="training-checkpoints", cursor_type="row", zebra_stripes=True)
        yield Static(Text(LEGEND), id="training-legend")
        yield self.status_line()

    def on_mount(self):
        table = self.query_one("#training-checkpoints", DataTable)
        table.add_columns(*CHECKPOINT_COLUMNS)
        self.follow("training.follow", {}, self._on_records)
        self.set_interval(DRAW_EVERY_S, self._draw_if_dirty)
        self.set_interval(RELOAD_S, self._reload_running)
        if self.held.preferred() is not None:  # a pane made again (the host shown again): the model's run at once
            self.select(self.held.preferred())

    # -- which runs

    def jobs_changed(self, book, changed, records):
        for job_id in self.held.jobs_changed(book):
            self._tell_alerts(job_id)  # a non-zero exit, announced once, whichever run is shown
            if job_id == self.selected:
                self._load(job_id)  # the end's alerts and the last checkpoints
        preferred = self.held.preferred()
        if preferred is not None and preferred != self.selected and not self.picked:
            self.select(preferred)
        else:
            self._dirty = True
            self._draw_if_dirty()

    def select(self, job_id):
        self.selected = job_id
        self.refresh_view()
        self._load(job_id)

    def _load(self, job_id):
        job = self.held.run(job_id).job
        if not job or job["kind"] != "training" or job_id in self._loading or self.client is None:
            return  # not connected yet: client_ready() loads it
        self._loading.add(job_id)
        self.request("training.curves", {"id": job_id, "points": 2000},
                     done=lambda reply: self._loaded(job_id, reply), failed=lambda message: self._loading.discard(job_id),
                     title="training curves")

    def _loaded(self, job_id, reply):
        self._loading.discard(job_id)
        told = bool(self.held.run(job_id).alerted)
        self.held.loaded(job_id, reply)
        self._tell_alerts(job_id, announce=told)  # a run's old alerts are not news the first time
        if job_id == self.selected:
            self.refresh_view()

    def client_ready(self):
        if self.selected is not None:
            self._load(self.selected)

    def _reload_running(self):
        job = self.held.run(self.selected).job if self.selected else None
        if self.active and job and is_live(job):
            self._load(self.selected)

    # -- live records

    def _on_records(self, items):
        for data, _seq in items:
            self.held.take_progress(data.get("snapshot"))
            for record in data.get("records") or []:
                action = self.held.add_record(record)
                if action == "load":
                    self._load(record["job"])
                elif action == "nan":
                    self._tell_alerts(record["job"])
        self._dirty = True

    def _tell_alerts(self, job_id, announce=True):
        for alert in self.held.new_alerts(job_id):
            if announce:
                self.notify("%s: %s" % (job_id, alert), title="training alert", severity="warning", timeout=30, markup=False)

    # -- drawing

    def _draw_if_dirty(self):
        if self._dirty and self.active:
            self._dirty = False
            self.refresh_view()
        elif self.active and self.selected is not None and self._quiet(self.held.run(self.selected)):
            run = self.held.run(self.selected)  # the age in the headline moves though nothing else does
            self.query_one("#training-summary", Static).update(self._summary(run, run.job, run.curves, run.progress or {}))

    @staticmethod
    def _quiet(run):
        return bool(run.job) and is_live(run.job) and run.age_s() >= QUIET_S

    def pane_shown(self):
        self.refresh_view()

    def refresh_view(self):
        if self.selected is None:
            return
        job_id = self.selected
        run = self.held.run(job_id)
        job = run.job or {"id": job_id, "kind": "training", "process_state": "running", "state": "running"}
        curves, progress = run.curves, run.progress or {}
        self.query_one("#training-summary", Static).update(self._summary(run, job, curves, progress))
        alerts = ["alert: " + a for a in run.alerts()]
        alerts += ["notice: " + n for n in (curves.get("notices") or progress.get("notices") or [])]
        if progress.get("error"):
            alerts.append("error: following the run failed: " + progress["error"])
        self.query_one("#training-alerts", Static).update(Text("\n".join(safe_text(alert) for alert in alerts)))
        self.query_one("#training-alerts", Static).display = bool(alerts)
        self._draw_charts(run)
        self._fill_checkpoints(curves.get("checkpoints") or [])
        if job["kind"] == "datagen":
            self.set_status("data generation: samples done of total, from its progress bars")
        else:
            self.set_status("%d run(s); %s: %d steps shown" % (len(self.runs), job_id, len(curves.get("steps") or [])))

    def _summary(self, run, job, curves, progress):
        text = Text()
        runs = self.runs
        text.append(safe_text("%s  %s" % (job["id"], job.get("name") or "")), style="bold")
        text.append("  %s  run %d/%d ([ ])" % (job.get("state"), runs.index(job["id"]) + 1 if job["id"] in runs else 0, len(runs)))
        if self._quiet(run):  # the figures below are its last, not its now
            text.append("  nothing new for %s" % format_duration(run.age_s()), style="bold yellow")
        text.append("\n")
        if job["kind"] == "datagen":
            done, total, rate = progress.get("done"), progress.get("total"), progress.get("rate")
            text.append("samples %s of %s   %s samples/s   ETA %s" % (
                number(done, "%d"), number(total, "%d"), number(rate, "%.1f"), format_duration(progress.get("eta_s"))))
            return text
        latest = curves.get("latest") or {}
        step = latest.get("step", progress.get("step"))
        epoch = latest.get("epoch", progress.get("epoch"))
        steps_total, epochs_total = progress.get("steps_total"), progress.get("epochs_total")
        rate = progress.get("steps_per_s") or curves.get("steps_per_s")
        eta = progress.get("eta_s") if is_live(job) else curves.get("eta_s")
        text.append("step %s%s  epoch %s%s  %s steps/s  ETA %s  %s tok/s  loss %s\n" % (
            number(step, "%d"), "/%d" % steps_total if steps_total else "", number(epoch, "%d"),
            "/%d" % epochs_total if epochs_total else "", number(rate, "%.2f"), format_duration(eta) if eta is not None else "-",
            number(latest.get("tokens_per_s"), "%.0f"), loss_text(latest.get("loss", progress.get("loss")))))
        predicted = run_prediction(curves, progress)
        checkpoints = curves.get("checkpoints") or []
        measured = [c for c in checkpoints if c.get("measured_accept_length") is not None]
        where = ("epoch %s" % number(predicted["epoch"], "%d")) if predicted["from"] == "validation" else (
            "step %s" % number(predicted["step"], "%d"))
        text.append("predicted accept length %s" % number(predicted["accept_length"]))
        if predicted["from"] is not None:
            text.append(" (%s, %s)" % (predicted["from"], where))
        text.append("  measured %s" % ("%.2f (ckpt %s)" % (measured[-1]["measured_accept_length"], measured[-1]["name"])
                                       if measured else "-"))
        line, source = run.break_even()
        if line is not None:
            text.append("  break-even %.2f (%s)" % (line, source))
            judged = run_curves.against_break_even(predicted, checkpoints, line)
            if judged is not None:
                text.append(" %s" % judged["verdict"], style="green" if judged["verdict"] == "ABOVE" else "bold yellow")
                if judged["judged"] == "measured":
                    text.append(" (measured)")
        else:
            text.append("  break-even not known: m measures a checkpoint")
        best = best_line(checkpoints)
        if best:  # the trainer keeps its best by loss; the score ranks by the accept length serving will see
            text.append("\n" + safe_text(best))
        return text

    def _draw_charts(self, run):
        curves = run.curves
        steps = curves.get("steps") or []
        metric_chart = self.query_one("#training-metric-chart", TimeChart)
        metric_chart.title = "%s (c: next curve)" % self.metric
        metric_chart.show(metric_series(steps, self.metric))
        accept_chart = self.query_one("#training-accept-chart", TimeChart)
        line, _ = run.break_even()
        accept_chart.thresholds = [(line, "break-even")] if line is not None else []
        predicted = run_prediction(curves, run.progress or {})
        # The legend shows labels only beside another series: the title says which prediction it is.
        accept_chart.title = "accept length (%s)" % predicted["from"] if predicted["from"] else "accept length"
        series = accept_series(steps, curves.get("validation") or [], curves.get("checkpoints") or [], predicted)
        values = [p[1] for points in series.values() for p in points] + ([line] if line is not None else [])
        # Room above the line: the legend sits top left, where the line's label would be.
        accept_chart.y_range = (min(values + [1.0]), max(values) * 1.4) if values else None
        accept_chart.show(series)

    def _fill_checkpoints(self, checkpoints):
        table = self.query_one("#training-checkpoints", DataTable)
        rows = [checkpoint_row(entry) for entry in checkpoints]
        if [tuple(table.get_row_at(i)) for i in range(table.row_count)] == rows:
            return
        cursor = table.cursor_row
        table.clear()
        for entry, row in zip(checkpoints, rows):
            table.add_row(*row, key=entry["path"])
        if rows:
            table.move_cursor(row=min(max(cursor, 0), len(rows) - 1))

    # -- keys

    def action_next_run(self):
        self._step_run(1)

    def action_previous_run(self):
        self._step_run(-1)

    def _step_run(self, step):
        if not self.runs:
            self.notify("no training run to show", severity="warning")
            return
        index = self.runs.index(self.selected) if self.selected in self.runs else 0
        self.picked = True
        self.select(self.runs[(index + step) % len(self.runs)])

    def action_next_metric(self):
        self.metric = METRICS[(METRICS.index(self.metric) + 1) % len(METRICS)]
        self.refresh_view()

    def action_measure(self):
        checkpoints = self.held.run(self.selected).curves.get("checkpoints") or [] if self.selected else []
        table = self.query_one("#training-checkpoints", DataTable)
        if not checkpoints or table.cursor_row < 0:
            self.notify("no checkpoint to measure yet", severity="warning")
            return
        entry = checkpoints[min(table.cursor_row, len(checkpoints) - 1)]
        if (self.held.run(self.selected).job.get("meta") or {}).get("measure"):
            self._ask_measure(entry, None)
            return
        self.app.push_screen(PromptScreen("Measure checkpoint %s: TARGET PYTHON [gpus=IDS] [k=3] [port=P] [requests=N] (on the host)"
                                          % entry["name"]), lambda answer: self._ask_measure(entry, answer))

    def _ask_measure(self, entry, answer):
        params = {"id": self.selected, "checkpoint": entry["name"]}
        if answer is not None:
            try:
                params["measure"] = parse_measure(answer)
            except ValueError as exc:
                self.notify(str(exc), severity="error")
                return
        job_id = self.selected
        self.request("training.measure", params, title="measure checkpoint",
                     done=lambda reply: self.notify("%s: checkpoint %s queued for measurement" % (job_id, reply["checkpoint"])))


def parse_measure(answer):
    """`TARGET PYTHON [gpus=0] [k=3] [port=8100] [requests=8] [max_tokens=64]` as measure options."""
    words = answer.split()
    positional = [w for w in words if "=" not in w]
    if len(positional) < 1:
        raise ValueError("give at least the target model's path on the host")
    options = {"target": positional[0]}
    if len(positional) > 1:
        options["python"] = positional[1]
    for word in words:
        key, sep, value = word.partition("=")
        if not sep:
            continue
        if key in ("k", "port", "requests", "max_tokens"):
            if not value.isdigit():
                raise ValueError("%s must be a whole number, not %r" % (key, value))
            options[key] = int(value)
        elif key in ("gpus", "engine", "python", "target"):
            options[key] = value
        else:
            raise ValueError("no measure option %r (there are gpus, k, port, requests, max_tokens, engine)" % key)
    return options
