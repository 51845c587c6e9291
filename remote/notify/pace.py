"""A run's pace and its limits: the steps (or samples) per second a training or data-generation
run keeps (or the tokens per second its log gives), the median of that pace over its last hour, and the limits that make a slowdown of
it (slowdowns.py): under FRACTION of the median for FOR_S. The limits are a job's meta
`slowdown` `{fraction, for_s, median_s}` (`train --slowdown`, `config HOST --slowdown`;
fraction 0: never told), else these defaults.

Bounded: the pace is the rate over the last PACE_INTERVALS moves, and the median is of at most
PACES_KEPT paces, one kept per `median_s / PACES_KEPT` seconds (so a fast run's hour weighs as
much as a slow one's, and its median is sorted at most that often).
"""

import collections

from ..core.protocol import BadRequest

FRACTION = 0.5
FOR_S = 600.0
MEDIAN_S = 3600.0
PACE_INTERVALS = 5
PACES_KEPT = 720
MIN_PACES = 5  # a run with fewer kept paces than this has no median yet
LIMIT_MAX_S = 10 * 365 * 86400.0


def limits(meta):
    """(fraction, for_s, median_s) of a job: its meta's `slowdown`, else the defaults per field."""
    own = (meta or {}).get("slowdown")
    own = own if isinstance(own, dict) else {}

    def field(name, default, low, high):
        value = own.get(name)
        ok = isinstance(value, (int, float)) and not isinstance(value, bool) and low <= value <= high
        return float(value) if ok else default

    return (field("fraction", FRACTION, 0.0, 1.0), field("for_s", FOR_S, 0.0, LIMIT_MAX_S),
            field("median_s", MEDIAN_S, 1.0, LIMIT_MAX_S))


def slowdown_param(call):
    """A job start's `slowdown` `{fraction, for_s, median_s}` (each optional), or None;
    BadRequest naming the field that is wrong."""
    value = call.param("slowdown", dict)
    if value is None:
        return None
    bounds = {"fraction": (0.0, 1.0), "for_s": (0.0, LIMIT_MAX_S), "median_s": (1.0, LIMIT_MAX_S)}
    kept = {}
    for name, given in value.items():
        if name not in bounds:
            raise BadRequest("slowdown: unknown field %r (fraction, for_s, median_s)" % name)
        low, high = bounds[name]
        if isinstance(given, bool) or not isinstance(given, (int, float)) or not low <= given <= high:
            raise BadRequest("slowdown.%s must be a number from %g to %g, not %r" % (name, low, high, given))
        kept[name] = float(given)
    return kept


def with_slowdown(meta, call):
    """`meta` with the start's `slowdown` limits when it gave any."""
    value = slowdown_param(call)
    return meta if value is None else dict(meta or {}, slowdown=value)


def median(values):
    ordered = sorted(values)
    if not ordered:
        return None
    middle = len(ordered) // 2
    return ordered[middle] if len(ordered) % 2 else (ordered[middle - 1] + ordered[middle]) / 2.0


class Pace:
    """One run's counter over time: `add(when, count)` returns its pace then (None until it has two)."""

    __slots__ = ("points", "kept", "kept_at", "reference")

    def __init__(self):
        self.points = collections.deque(maxlen=PACE_INTERVALS + 1)
        self.kept = collections.deque(maxlen=PACES_KEPT)  # (time, pace), thinned
        self.kept_at = None
        self.reference = None  # the median of `kept`, sorted when one is kept

    def add(self, when, count, median_s):
        if self.points and (count <= self.points[-1][1] or when <= self.points[-1][0]):
            if count < self.points[-1][1]:
                self.points.clear()  # counted again from the start (a restart): a new pace
            else:
                return None
        self.points.append((when, count))
        if len(self.points) < 2:
            return None
        (first_at, first), (last_at, last) = self.points[0], self.points[-1]
        return self._keep(when, (last - first) / (last_at - first_at), median_s)

    def add_rate(self, when, rate, median_s):
        """A rate the run's log gives itself (tokens/s on a step line): its pace is the mean of
        its last PACE_INTERVALS, so one slow step is not a slowdown."""
        if self.points and when <= self.points[-1][0]:
            return None
        self.points.append((when, rate))
        if len(self.points) < 2:
            return None
        recent = list(self.points)[1:]
        return self._keep(when, sum(r for _, r in recent) / len(recent), median_s)

    def _keep(self, when, pace, median_s):
        while self.kept and self.kept[0][0] < when - median_s:
            self.kept.popleft()
        if self.kept_at is None or when - self.kept_at >= median_s / PACES_KEPT:
            self.kept.append((when, pace))
            self.kept_at = when
            self.reference = median(p for _, p in self.kept) if len(self.kept) >= MIN_PACES else None
        return pace

    def covered_s(self):
        """Seconds of pace behind the median (from its oldest kept pace to its newest)."""
        return self.kept[-1][0] - self.kept[0][0] if len(self.kept) >= 2 else 0.0
