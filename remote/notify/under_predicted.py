"""Live acceptance under the served drafter's prediction: a server whose live accept length (the
last 10 s, `recent`) stays under what its drafter's speculation profile predicts at the served K
(the serving feed's `predicted`, remote/serving/served_profile.py) by more than MARGIN of the
prediction for UNDER_S is told once as an `under_predicted` alert, naming the server and both
figures; told again only after it was back within the margin. The usual causes: the speculation
method mistaken (a drafter served as another method's), a drafter served against another target
than the one it was scored on, or prompts unlike the scored data. A refused profile predicts
nothing; an idle second says nothing.
"""

import os

from ..core.words import minutes
from .alert import label, make_alert

# Offline, on the target's own greedy output, a drafter predicts a little over what varied live
# prompts give; 15% under it is past that. Ten minutes: a run of unusual prompts passes in less.
MARGIN = 0.15
# The environment can shorten it for the daemon it starts (the tests' daemons: minutes are not waited there).
UNDER_S = float(os.environ.get("SPECDECK_UNDER_PREDICTED_S") or 600.0)
MAX_SERVERS = 2000
CAUSES = "the method mistaken, a drafter served against another target, or prompts unlike the scored data"


def floor_of(predicted_accept_length):
    """The accept length under which a server counts as under its prediction."""
    return predicted_accept_length * (1.0 - MARGIN)


class UnderPredicted:
    def __init__(self, evaluator):
        self.evaluator = evaluator
        self.servers = {}  # server id -> {below_since, fired, predicted: the figure the time counts against}

    def serving_record(self, record, now):
        server_id = record["server"]
        predicted = record.get("predicted") if isinstance(record.get("predicted"), dict) else {}
        expected = predicted.get("accept_length")
        recent = record.get("recent") if isinstance(record.get("recent"), dict) else {}
        live = recent.get("accept_length") if recent.get("accept_length") is not None else record.get("accept_length")
        if not isinstance(expected, (int, float)) or isinstance(expected, bool) or predicted.get("error"):
            self.servers.pop(server_id, None)  # no prediction (none, refused, past its K): nothing to be under
            return
        if not isinstance(live, (int, float)):
            return
        state = self.servers.get(server_id)
        if state is None or state["predicted"] != expected:
            # A new prediction (scored again): the time under it counts from now.
            if len(self.servers) >= MAX_SERVERS:
                self.servers.clear()
            state = self.servers[server_id] = {"below_since": None, "fired": False, "predicted": expected}
        if live >= floor_of(expected):
            state.update(below_since=None, fired=False)
            return
        state["below_since"] = state["below_since"] or now
        if not state["fired"] and now - state["below_since"] >= UNDER_S:
            state["fired"] = True
            self._tell(server_id, state, live, predicted, now)

    def _tell(self, server_id, state, live, predicted, now):
        job = self.evaluator._job(server_id) if not server_id.startswith("u") else None
        expected = predicted["accept_length"]
        conditions = predicted.get("conditions") if isinstance(predicted.get("conditions"), dict) else {}
        scored_on = ("; scored on %s" % conditions["dataset"]) if isinstance(conditions.get("dataset"), str) else ""
        alert = make_alert("under_predicted:%s:%d" % (server_id, int(state["below_since"])), "under_predicted", ["speculation"],
                           self.evaluator.host, "acceptance under its prediction on %s" % self.evaluator.host,
                           "%s: accept length %.2f, its drafter's profile predicts %.2f (%+.0f%%, more than the %.0f%% margin) for %s: "
                           "%s%s" % (label(job) if job else server_id, live, expected, 100.0 * (live / expected - 1.0), 100.0 * MARGIN,
                                     minutes(now - state["below_since"]), CAUSES, scored_on),
                           state["below_since"], job=job)
        alert.update(server=server_id, accept_length=live,
                     predicted={"accept_length": expected, "path": predicted.get("path"), "k": predicted.get("served_k") or predicted.get("k"),
                                "margin": MARGIN, "for_s": UNDER_S})
        self.evaluator.raise_alert(alert)
