"""The GPUs pane: the host's CPU, memory and disks on one line, one row per GPU with bars, a
history chart of one metric over a window (a minute to a week, from the host's history store),
and the GPU processes with the job that owns each. Alerts fired on the host ring the bell.

While a Slurm job runs, its nodes' GPUs come in the same samples (`nodes`, sampled on each node
by a step of the job): a line names the job's nodes with their figures (or why a node has none),
and `n` shows one node's GPUs, processes and chart in place of the host's, and back.

Samples come from the `telemetry.follow` stream (deltas rebuilt on the client's thread); the
chart is seeded from `telemetry.history` when the metric or window changes, then grows with
the stream (windows up to an hour) or is asked again once a minute (longer ones). Alerts are
followed whether the pane is shown or not, and on connecting the pane says what fired while
nobody watched.
"""

import time

from rich.text import Text
from textual.binding import Binding
from textual.widgets import Static

from remote.telemetry.alerts import alert_text, alert_title

from .. import display
from ..freshness import freshness, stale_text
from ..pane import Pane
from ..widgets.chart import TimeChart
from .rows import gpu_row, host_line, nodes_line, process_lines

# (key word, sample field, chart label, scale to the chart's unit)
METRICS = (
    ("utilization", "utilization_percent", "GPU utilisation %", 1.0),
    ("memory", "memory_used_bytes", "GPU memory GiB", 1.0 / 2 ** 30),
    ("power", "power_w", "power W", 1.0),
    ("temperature", "temperature_c", "temperature °C", 1.0),
    ("pcie rx", "pcie_rx_bytes_per_s", "PCIe rx MB/s", 1e-6),
    ("pcie tx", "pcie_tx_bytes_per_s", "PCIe tx MB/s", 1e-6),
)
WINDOWS_S = (60, 600, 3600, 6 * 3600, 86400, 7 * 86400)
DEFAULT_WINDOW = 1  # 10 minutes
LIVE_WINDOW_MAX_S = 3600  # longer windows are asked again instead of grown sample by sample
REQUERY_S = 60.0
CHART_POINTS = 240


# What the chart shows of a host without GPUs, in % (of all cores, of the memory): series -> host field.
HOST_CHART = {"cpu": "cpu_percent", "memory": "memory_used_bytes"}


def host_percents(host):
    """{series name: percent or None} of one host sample, for the chart of a host without GPUs."""
    used, total = host.get("memory_used_bytes"), host.get("memory_total_bytes")
    return {"cpu": host.get("cpu_percent"), "memory": 100.0 * used / total if used is not None and total else None}


class GpusPane(Pane):
    """GPU rows, a history chart (the host's CPU and memory when it has no GPU), the GPU processes."""

    PANE_TITLE = "GPUs"
    can_focus = True
    BINDINGS = [
        Binding("m", "next_metric", "metric", tooltip="chart another metric: utilisation, memory, power, temperature, PCIe"),
        Binding("w", "next_window", "window", tooltip="chart another window: 1 min, 10 min, 1 h, 6 h, 1 day, 1 week"),
        Binding("n", "next_node", "node", tooltip="show the GPUs of the next node of a Slurm job (then this host again)"),
    ]
    DEFAULT_CSS = """
    GpusPane #gpu-host { height: auto; }
    GpusPane #gpu-nodes { height: auto; }
    GpusPane #gpu-rows { height: auto; }
    GpusPane #gpu-chart { height: 1fr; min-height: 5; }
    GpusPane #gpu-processes { height: auto; max-height: 4; color: $text-muted; }
    """

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.metric_index = 0
        self.window_index = DEFAULT_WINDOW
        self.series = {}  # GPU index -> [[t, min, mean, max], ...] of the charted metric
        self._shown_stale = False
        self._alerts = None
        self._queried_at = None
        self._charting_host = False  # the chart shows the host's CPU and memory (no GPUs)
        self.node = None  # the Slurm job's node shown, None: this host

    def compose(self):
        yield Static(Text("connecting…"), id="gpu-host")
        yield Static(id="gpu-nodes")
        yield Static(id="gpu-rows")
        yield TimeChart(id="gpu-chart")
        yield Static(id="gpu-processes")
        yield self.status_line()

    def watch_connection(self, connection):
        super().watch_connection(connection)
        if self.sample is None:  # the top line waits for the first sample: say why none comes
            self.query_one("#gpu-host", Static).update(
                Text("not connected: %s" % display.safe_text(connection.error), style="red") if connection.failed else Text("connecting…"))

    def on_mount(self):
        self.model.gpus.follow(self.model, self, self._show_samples)
        if self.sample is not None:  # the host shown again: its last sample at once, with its age
            self._chart_source_changed()
            self.render_sample()
        self.set_interval(REQUERY_S, self._requery_long_window)
        self.set_interval(1.0, self._age_tick)
        self._show_status()

    # -- samples

    def _on_samples(self, items):
        self._show_samples(self.model.gpus.take(items))

    def _show_samples(self, samples):
        if not samples:
            return
        self._chart_source_changed()
        if WINDOWS_S[self.window_index] <= LIVE_WINDOW_MAX_S:
            for sample in samples:
                self._append(sample)
        self.render_sample()

    @property
    def sample(self):
        """The host's latest sample, as its model holds it (None before the first)."""
        return self.model.gpus.sample

    def nodes(self):
        """{name: the latest sample of that node} of the running Slurm jobs."""
        return (self.sample or {}).get("nodes") or {}

    def shown(self):
        """The sample whose GPUs the pane shows: the host's, or the chosen node's."""
        node = self.nodes().get(self.node) if self.node is not None else None
        if node is None:
            return self.sample
        # A node's processes belong to its job when their environment names its Slurm job.
        processes = [dict(p, job_id=node.get("job_id") if p.get("slurm_job_id") == node.get("slurm_job_id") else None)
                     for p in node.get("processes") or ()]
        return dict(node, processes=processes, host=node.get("host") or {})

    def render_sample(self):
        if self.sample is None:
            return
        if self.node is not None and self.node not in self.nodes():
            self.node = None  # its job ended: back to the host
            self.series = {}
            self._query_history()
        sample = self.shown()
        jobs = {}
        for process in sample.get("processes") or ():
            if process.get("job_id") and process["job_id"] not in jobs.setdefault(process["gpu_index"], []):
                jobs[process["gpu_index"]].append(process["job_id"])
        nodes = self.query_one("#gpu-nodes", Static)
        if nodes.display != bool(self.nodes()):
            nodes.display = bool(self.nodes())
            self.refresh_bindings()  # n (a node) comes and goes
        if self.nodes():
            nodes.update(nodes_line(self.nodes(), self.node))
        self.query_one("#gpu-host", Static).update(self._freshness_line() + host_line(sample["host"], sample.get("nvml") or {}, self.node))
        rows = Text("\n").join(gpu_row(gpu, jobs.get(gpu["index"])) for gpu in sample["gpus"])
        self.query_one("#gpu-rows", Static).update(rows)
        self.query_one("#gpu-rows", Static).display = bool(sample["gpus"])
        self.query_one("#gpu-processes", Static).update(process_lines(sample.get("processes") or [], sample["time"] or self.sample["time"], 3))
        self._draw_chart()
        self._show_status()

    def _freshness_line(self):
        stale, age, why = freshness(self.sample, self.model.gpus.received_s, time.monotonic())
        return Text("figures below are not current %s\n" % stale_text(age, why), style="bold red") if stale else Text("")

    def _age_tick(self):
        """Once a second: a stale sample's age grows on screen, and a quiet stream turns stale."""
        stale, _, _ = freshness(self.sample, self.model.gpus.received_s, time.monotonic())
        if stale or self._shown_stale:
            self._shown_stale = stale
            self.render_sample()

    # -- the chart

    def _append(self, sample):
        if self._charting_host:
            self._append_host(sample)
            return
        _, field, _, _ = METRICS[self.metric_index]
        cutoff = sample["time"] - WINDOWS_S[self.window_index]
        if self.node is not None:
            node = (sample.get("nodes") or {}).get(self.node)
            if node is None or node.get("stale"):
                return  # a node's old figures are not charted again as new points
        for gpu in (sample["gpus"] if self.node is None else node["gpus"]):
            value = gpu.get(field)
            if value is None:
                continue
            points = self.series.setdefault(gpu["index"], [])
            if points and points[-1][0] >= sample["time"]:
                continue
            points.append([sample["time"], value, value, value])
            while points and points[0][0] < cutoff:
                points.pop(0)

    def _draw_chart(self):
        if self._charting_host:
            self._draw_host_chart()
            return
        name, field, label, scale = METRICS[self.metric_index]
        chart = self.query_one(TimeChart)
        chart.title = "%s%s, last %s" % ("%s: " % self.node if self.node else "", label, display.format_age(WINDOWS_S[self.window_index]))
        series = {"gpu%d" % index: [[p[0]] + [None if v is None else v * scale for v in p[1:]] for p in points]
                  for index, points in sorted(self.series.items())}
        thresholds = []
        shown = self.shown()
        if shown and shown["gpus"]:
            gpu = shown["gpus"][0]
            if field == "power_w" and gpu.get("power_limit_w"):
                thresholds.append((gpu["power_limit_w"], "power limit"))
            if field == "memory_used_bytes" and gpu.get("memory_total_bytes"):
                thresholds.append((gpu["memory_total_bytes"] * scale, "memory total"))
        chart.thresholds = thresholds
        chart.show(series, WINDOWS_S[self.window_index], now=self.sample["time"] if self.sample else None)

    def _query_history(self):
        if self.client is None:
            return
        if self._charting_host:
            self._query_host_history()
            return
        window_s = WINDOWS_S[self.window_index]
        metric_index, window_index, node = self.metric_index, self.window_index, self.node
        self._queried_at = time.monotonic()

        def done(result):
            if (metric_index, window_index, node) != (self.metric_index, self.window_index, self.node):
                return  # the user moved on meanwhile
            self.series = {s["gpu_index"]: s["points"] for s in result["series"]}
            self._draw_chart()

        params = {"metric": METRICS[metric_index][1], "since_s": float(window_s), "resolution_s": max(1.0, window_s / CHART_POINTS)}
        if node is not None:
            params["node"] = node
        self.request("telemetry.history", params, done=done, title="GPU history")

    def _requery_long_window(self):
        if self.active and WINDOWS_S[self.window_index] > LIVE_WINDOW_MAX_S:
            self._query_history()

    def action_next_metric(self):
        self.metric_index = (self.metric_index + 1) % len(METRICS)
        self.series = {}
        self._draw_chart()
        self._show_status()
        self._query_history()

    def action_next_window(self):
        self.window_index = (self.window_index + 1) % len(WINDOWS_S)
        self.series = {}
        self._draw_chart()
        self._show_status()
        self._query_history()

    def action_next_node(self):
        """This host, then each node of the running Slurm jobs in turn."""
        places = [None] + sorted(self.nodes())
        self.node = places[(places.index(self.node) + 1) % len(places)] if self.node in places else None
        self.series = {}
        self._charting_host = self._charts_host()
        self.refresh_bindings()
        self.render_sample()
        self._draw_chart()
        self._show_status()
        self._query_history()

    def _show_status(self):
        sample = self.shown() or {}
        nvml = sample.get("nvml") or {}
        gpus = len(sample.get("gpus") or ())
        text = "m metric: %s   w window: %s" % (METRICS[self.metric_index][0], display.format_age(WINDOWS_S[self.window_index]))
        if gpus:
            text += "   %d GPU%s, driver %s" % (gpus, "" if gpus == 1 else "s", nvml.get("driver_version") or "?")
        if self._charting_host:
            text = "w window: %s   no GPUs: the chart shows the host's CPU and memory" % display.format_age(WINDOWS_S[self.window_index])
        if self.nodes():
            text += "   n node: %s" % (self.node or "this host")
        self.set_status(text)

    def pane_shown(self):
        # The chart missed the samples of the time the pane was hidden: ask the store again.
        self._query_history()

    # -- the chart of a host without GPUs: its CPU and memory instead of an empty GPU chart

    def _charts_host(self):
        """True when there is no GPU to chart (no NVML on the host): CPU and memory instead."""
        sample = self.sample
        return sample is not None and self.node is None and not sample.get("gpus") and not (sample.get("nvml") or {}).get("available")

    def _chart_source_changed(self):
        """After a sample: when it turns out the host has no GPU (or has one again), the chart
        starts over from the store with what there is to chart."""
        host = self._charts_host()
        if host != self._charting_host:
            self._charting_host = host
            self.series = {}
            self._draw_chart()
            self.refresh_bindings()  # m (a GPU metric) comes and goes
            if self.active:
                self._query_history()

    def check_action(self, action, parameters):
        if action == "next_metric" and self._charting_host:
            return None  # shown dimmed: there is no GPU metric to pick
        if action == "next_node" and not self.nodes():
            return False  # no Slurm job runs: nothing but this host, and no key to show for it
        return True

    def _append_host(self, sample):
        cutoff = sample["time"] - WINDOWS_S[self.window_index]
        for name, percent in host_percents(sample.get("host") or {}).items():
            points = self.series.setdefault(name, [])
            if percent is None or (points and points[-1][0] >= sample["time"]):
                continue
            points.append([sample["time"], percent, percent, percent])
            while points and points[0][0] < cutoff:
                points.pop(0)

    def _draw_host_chart(self):
        chart = self.query_one(TimeChart)
        chart.title = "CPU and memory %% of the host (no GPUs), last %s" % display.format_age(WINDOWS_S[self.window_index])
        chart.thresholds = []
        chart.show({name: self.series.get(name, []) for name in HOST_CHART}, WINDOWS_S[self.window_index],
                   now=self.sample["time"] if self.sample else None)

    def _query_host_history(self):
        window_s, window_index = WINDOWS_S[self.window_index], self.window_index
        total = ((self.sample or {}).get("host") or {}).get("memory_total_bytes")
        for name, field in HOST_CHART.items():
            def done(result, name=name, field=field):
                if window_index != self.window_index or not self._charts_host():
                    return  # the user (or the host) moved on meanwhile
                scale = 1.0 if field == "cpu_percent" else (100.0 / total if total else None)
                points = [p for s in result["series"] for p in s["points"]]
                self.series[name] = [[p[0]] + [None if v is None or scale is None else v * scale for v in p[1:]] for p in points]
                self._draw_chart()

            self.request("telemetry.history", {"metric": field, "host": True, "since_s": float(window_s),
                                               "resolution_s": max(1.0, window_s / CHART_POINTS)},
                         done=done, title="host history")

    # -- connection, alerts

    def client_ready(self):
        if self.active:
            self._query_history()
        # Send this host's alert settings, show what fired while nobody watched, then follow
        # (a lost link is said by the header; the next connection tries again).
        self.request("telemetry.configure", self._alert_settings, title="GPU alerts", notify="refusals",
                     done=lambda _: self.request("telemetry.alerts", {"unseen": True}, title="GPU alerts", notify="refusals",
                                                 done=self._follow_alerts))

    def _alert_settings(self):
        """telemetry.configure's params from this host's settings (a file: on the request's
        worker), or None when there is nothing to send."""
        from ..config import host_settings

        host = getattr(self.app, "host", None)
        settings = host_settings(host) if host else {}
        configure = {}
        if isinstance(settings.get("alerts"), dict):
            configure["alerts"] = settings["alerts"]
        if settings.get("checkpoint_dir"):
            configure["checkpoint_dirs"] = [settings["checkpoint_dir"]]
        return configure or None

    def _follow_alerts(self, unseen):
        self._announce(unseen["alerts"], True)
        # Alerts ring whichever pane is shown: this stream runs while the pane is hidden, and
        # the pane base starts it again on a new client.
        if self._alerts is None or self._alerts.ended:
            self._alerts = self.follow("telemetry.alerts_follow", {}, while_hidden=True,
                                       on_data=lambda items: self._announce([r for data, _ in items for r in data.get("records") or []], False))

    def _announce(self, alerts, missed):
        if not alerts:
            return
        # Each line names its source (`GPU 2: ...`, `download j4: ...`); the title its kind.
        lines = [alert_text(alert) for alert in alerts[-6:]]
        titles = {alert.get("title") or alert_title(alert) for alert in alerts[-6:]}
        title = "while nobody watched" if missed else titles.pop() if len(titles) == 1 else "alerts"
        self.app.bell()
        self.notify(lines, title=title, severity="warning", timeout=30 if missed else 15, markup=False)
        until = max(max(a["fired_at"], a.get("ended_at") or 0) for a in alerts)
        self.request("telemetry.alerts_seen", {"until": until}, title="alerts")
