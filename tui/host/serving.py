"""The host's inference servers as its model holds them (`HostModel.serving`): a `ServerRecord`
per server, filled from the one `serving.follow` stream, the job book, the host's alerts and the
questions a view asks (a window's figures and advice in one `serving.advise`, a dead server's
status, the history store's series). Each change is told to the view that follows it as a
`ServingChanged` message; the view keeps only what it shows (which server, which window).
Held by the host's model, the records outlive the views: a host shown again shows them at once."""

from textual.message import Message

from ..jobs import model as jobs
from ..serving.model import RECENT_S, is_live, line_of, target_key
from .records import Aged, ServerRecord

KEPT_S = 6 * 3600  # the chart's points kept per server: the longest window


class ServingChanged(Message):
    """The host's servers changed: `servers` (ids) in the parts named in `what` (records, jobs,
    window, history, positions, status, line, alert)."""

    def __init__(self, servers, what):
        super().__init__()
        self.servers = set(servers)
        self.what = set(what)


class Serving:
    """Every server the host told of, in the order first heard (oldest first)."""

    def __init__(self, model):
        self.model = model
        self.records = {}  # id -> ServerRecord, in the order first heard
        self.alerts = {}  # server id -> the host's below_break_even alert, until accept length is back over the line
        self._asking = set()  # servers whose window or status is being asked
        self.views = []  # those that follow the servers, told of every change

    @property
    def ids(self):
        return list(self.records)

    def record(self, server_id):
        if server_id not in self.records:
            self.records[server_id] = ServerRecord(server_id)
        return self.records[server_id]

    def live(self, server_id):
        record = self.records.get(server_id)
        return is_live(record.job if record is not None else None)

    def fresh(self, server_id):
        """Whether the host's feed has read the server yet (a starting one: not)."""
        record = self.records.get(server_id)
        return record is not None and record.latest is not None

    # -- what the view follows

    def follow(self, owner):
        """The host's servers' records, once a second, for `owner` while it is shown; every
        change of them (the host's alerts included) is told to it as ServingChanged."""
        if owner not in self.views:
            self.views.append(owner)
        return self.model.follow(owner, "serving.follow", {}, lambda items: self.take_frames(owner, items))

    def forget(self, owner):
        if owner in self.views:
            self.views.remove(owner)

    def take_frames(self, owner, items):
        """Frames of serving.follow (a snapshot, then records), for `owner`."""
        changed = set()
        for data, _seq in items:
            for record in list((data.get("snapshot") or {}).values()) + list(data.get("records") or []):
                if record:
                    changed.add(self.take(record))
        owner.post_message(ServingChanged(changed, {"records"}))

    def take(self, figures):
        """One record of `serving.follow`: the latest figures, the line, the baseline, and a chart
        point unless it is stale or not newer than the last."""
        server_id = figures["server"]
        record = self.record(server_id)
        record.latest = Aged(figures)
        if "break_even" in figures:
            record.line = line_of(figures["break_even"])
        if "baseline" in figures:
            record.baseline = figures["baseline"] if isinstance(figures["baseline"], dict) else None
        # The host's figures over its last RECENT_S seconds; a log-read server's own line is already
        # an average over the engine's interval.
        point = figures.get("recent") or (figures if figures.get("source") == "log" else None)
        kept = record.points
        if figures.get("stale") or point is None or point.get("time") is None or (kept and kept[-1]["time"] >= point["time"]):
            return server_id  # a stale figure is not a new point of the chart
        kept.append(point)
        while kept and kept[0]["time"] < point["time"] - KEPT_S:
            kept.popleft()
        line = record.line
        if line and point.get("accept_length") is not None and point["accept_length"] >= line["accept_length"]:
            self.alerts.pop(server_id, None)  # back over the line: the host's alert is over
        return server_id

    def take_alerts(self, alerts):
        """The host's alerts (notify.follow's, or notify.list's newest): its below_break_even for
        a server is that server's, told to every view."""
        changed = set()
        for alert in alerts:
            if isinstance(alert, dict) and alert.get("kind") == "below_break_even" and isinstance(alert.get("server"), str):
                self.alerts[alert["server"]] = alert
                changed.add(alert["server"])
        if changed:
            for view in self.views:
                view.post_message(ServingChanged(changed, {"alert"}))

    def take_jobs(self, book, changed):
        """The job book changed: (servers whose advice a benchmark that just ended may change,
        their advice dropped), after every server job's record has its job's state."""
        for job in book.of_kind("server"):
            meta = job.get("meta") or {}
            progress = job.get("progress") or {}
            record = self.record(job["id"])
            before = record.job or {}
            record.job = dict(before, name=job.get("name"), k=meta.get("k"), target=meta.get("target"), drafter=meta.get("drafter"),
                              state=job["process_state"], ended=progress.get("error") or before.get("ended"),
                              exit_code=job.get("exit_code"), signal=job.get("signal"))
        stale = []
        for job in book.of_kind("benchmark"):
            if job["id"] in changed and not jobs.is_live(job):
                meta = job.get("meta") or {}
                stale += self._benchmark_ended(meta.get("target"), meta.get("drafter"))
        return stale

    def _benchmark_ended(self, target, drafter):
        """A benchmark (a K sweep, say) of a server's target and drafter ended: the advice held for
        that server may name no sweep; it is dropped, to be asked again."""
        dropped = []
        for record in self.records.values():
            info = record.job or {}
            key = target_key(info.get("target"))
            if key and key == target_key(target) and target_key(info.get("drafter")) == target_key(drafter):
                record.advice = None
                dropped.append(record.id)
        return dropped

    # -- questions

    def ask_window(self, owner, server_id, window_s):
        """The window's figures and advice of a running server (one serving.advise), then its
        per-position series; a dead one's status (how it ended), once."""
        record = self.records.get(server_id)
        if record is None or server_id in self._asking or self.model.client is None:
            return
        if not self.live(server_id):
            if (record.job or {}).get("first_error") is not None:
                return
            self._asking.add(server_id)
            self.model.ask(owner, "serving.status", {"id": server_id}, done=lambda reply: self._status_came(owner, server_id, reply),
                           failed=lambda failure: self._asking.discard(server_id), title="server status")
            return
        if record.latest is None:  # not read by the host's feed yet (starting): nothing to ask
            return
        self._asking.add(server_id)
        self.model.ask(owner, "serving.advise", {"id": server_id, "window_s": float(window_s)}, title="speculation figures",
                       done=lambda reply: self.take_window(owner, server_id, window_s, reply),
                       failed=lambda failure: self._asking.discard(server_id))

    def take_window(self, owner, server_id, window_s, reply):
        """serving.advise over `window_s` answered for `owner`: its figures, advice and line."""
        self._asking.discard(server_id)
        record = self.record(server_id)
        record.advice = Aged(reply, window_s)
        if "break_even" in reply:
            record.line = line_of(reply["break_even"])
        owner.post_message(ServingChanged({server_id}, {"window"}))
        resolution_s = max(float(RECENT_S), window_s / 60.0)  # about one cell a bucket
        self.model.ask(owner, "serving.history", {"id": server_id, "metric": "per_position", "since_s": window_s, "resolution_s": resolution_s},
                       done=lambda reply: self._history_came(owner, server_id, "per_position", window_s, reply, "positions"),
                       failed=lambda failure: None, title="per-position history")

    def _status_came(self, owner, server_id, reply):
        self._asking.discard(server_id)
        record = self.record(server_id)
        info = dict(record.job or {}, first_error=reply.get("reason") or "")
        if reply.get("ended"):
            info["ended"] = reply["ended"]
        record.job = info
        if "break_even" in reply:
            record.line = line_of(reply["break_even"])
        owner.post_message(ServingChanged({server_id}, {"status"}))

    def ask_history(self, owner, server_id, window_s):
        """The chart's series from the history store, in buckets of at least RECENT_S: each point
        an average over seconds, never one second's burst."""
        resolution_s = max(float(RECENT_S), window_s / 240.0)
        for metric in ("accept_length", "generation_tps"):
            self.model.ask(owner, "serving.history", {"id": server_id, "metric": metric, "since_s": window_s, "resolution_s": resolution_s},
                           done=lambda reply, metric=metric: self._history_came(owner, server_id, metric, window_s, reply, "history"),
                           failed=lambda failure: None, title="speculation history")

    def _history_came(self, owner, server_id, metric, window_s, reply, what):
        self.record(server_id).history[metric] = Aged(reply, window_s)
        owner.post_message(ServingChanged({server_id}, {what}))

    def line_set(self, server_id, reply):
        """serving.set_break_even answered: every server of the same target has the line (their
        records say so from the next second), and the time under it counts again from now."""
        target = reply.get("target")
        line = line_of(reply.get("break_even"))
        for record in self.records.values():
            if record.id == server_id or (target and target_key((record.job or {}).get("target")) == target):
                record.line = line
                self.alerts.pop(record.id, None)
        return line
