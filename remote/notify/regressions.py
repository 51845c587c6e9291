"""Acceptance regressions: a server whose live accept length stays under its pair's saved
baseline (remote/serving/baselines.py) by more than the baseline's margin for its duration is
told as an `acceptance_regression` alert, and once with `acceptance_recovered` when it is back
over. Read from the `serving` topic's records the evaluator already follows: the "now" figure
(`recent`, the last 10 s) where a record has it, else its second; an idle second says nothing.
"""

from ..serving.baselines import STORE, floor_of
from ..core.words import minutes
from .alert import label, make_alert

MAX_SERVERS = 2000


class Regressions:
    def __init__(self, evaluator, store=None):
        self.evaluator = evaluator
        self.store = store or STORE
        self.servers = {}  # server id -> {below_since, fired, baseline}

    def serving_record(self, record, now):
        server_id = record["server"]
        recent = record.get("recent") if isinstance(record.get("recent"), dict) else {}
        accept_length = recent.get("accept_length") if recent.get("accept_length") is not None else record.get("accept_length")
        if not isinstance(accept_length, (int, float)):
            return
        baseline = self.store.of_server(self.evaluator.daemon, server_id)
        state = self.servers.get(server_id)
        if state is None:
            if baseline is None:
                return
            if len(self.servers) >= MAX_SERVERS:
                self.servers.clear()
            state = self.servers[server_id] = {"below_since": None, "fired": None, "baseline": baseline}
        if baseline is None or baseline != state["baseline"]:
            # Removed, or saved again: what was told holds no more; the time under it counts from now.
            state.update(below_since=None, fired=None, baseline=baseline)
            if baseline is None:
                del self.servers[server_id]
                return
        if accept_length >= floor_of(baseline):
            if state["fired"] is not None:
                self._recovered(server_id, state, accept_length, now)
            state["below_since"] = None
            return
        state["below_since"] = state["below_since"] or now
        if state["fired"] is None and now - state["below_since"] >= baseline["for_s"]:
            self._regressed(server_id, state, accept_length, now)

    def _job(self, server_id):
        return self.evaluator._job(server_id) if not server_id.startswith("u") else None

    def _regressed(self, server_id, state, accept_length, now):
        baseline, job = state["baseline"], self._job(server_id)
        key = "regression:%s:%d" % (server_id, int(state["below_since"]))
        state["fired"] = key
        change = accept_length / baseline["accept_length"] - 1.0
        alert = make_alert(key, "acceptance_regression", ["speculation"], self.evaluator.host,
                           "acceptance regressed on %s" % self.evaluator.host,
                           "%s: accept length %.2f, baseline %.2f (%+.0f%%) for %s (more than the %.0f%% margin)" % (
                               label(job) if job else server_id, accept_length, baseline["accept_length"], 100.0 * change,
                               minutes(now - state["below_since"]), 100.0 * baseline["margin"]),
                           state["below_since"], job=job)
        alert.update(server=server_id, baseline=dict((k, baseline[k]) for k in ("accept_length", "margin", "for_s", "saved_at")),
                     accept_length=accept_length)
        self.evaluator.raise_alert(alert)

    def _recovered(self, server_id, state, accept_length, now):
        baseline, job = state["baseline"], self._job(server_id)
        alert = make_alert(state["fired"] + ":resumed", "acceptance_recovered", ["speculation"], self.evaluator.host,
                           "acceptance recovered on %s" % self.evaluator.host,
                           "%s: accept length %.2f is back within %.0f%% of its baseline %.2f" % (
                               label(job) if job else server_id, accept_length, 100.0 * baseline["margin"], baseline["accept_length"]),
                           now, job=job)
        alert.update(server=server_id, accept_length=accept_length)
        state["fired"] = None
        self.evaluator.raise_alert(alert)
