"""Wire methods of the history store (store.py): windows of recorded series, what is
recorded, and how big the store is. They read through the daemon's history service
(`daemon.history`, which this area gives the daemon), each on a read connection of its own;
while the store is not open they answer Busy (query.py's HistoryUnavailable)."""

from ..core.protocol import BadRequest
from ..core.wire import method
from .store import HistoryService


def attach(daemon):
    daemon.history = None  # until the service is made: the methods answer NoHistory


def history_service(daemon):
    """The daemon's history store, run first of the samplers' stores (they record into it)."""
    daemon.history = HistoryService()
    return daemon.history


SERVICES = (history_service,)

# Times a window may name, s since the epoch: from the epoch to the year 5138. Outside that the
# milliseconds the store keys on do not fit its integers (a start of -1e308 was an InternalError).
LATEST_TIME_S = 1e11


def _time(call, name):
    value = call.param(name, float)
    if value is not None and not 0 <= value <= LATEST_TIME_S:
        raise BadRequest("%s must be a time in s since the epoch, from 0 to %g, not %r" % (name, LATEST_TIME_S, value))
    return value


def _store(call):
    return call.history()


@method("history.query")
def history_query(call):
    """A window of recorded series at a resolution. Params: `source` and `name` (required, e.g.
    `gpu`, `utilization_percent`), `labels` (an object: only series whose labels include these;
    absent: every series of that name), `start`, `end` (s since the epoch; default the last
    hour), `resolution_s` (default: the window in 500 points). Points come from the coarsest tier
    (raw, 10 s, 1 min) that meets the resolution, the rest of the window from the others, so a
    window across tiers has no hole; raw points give min = mean = max. The resolution is widened
    so a series has at most 5,000 points and the reply at most 100,000.
    Reply: `{series: [{labels, points: [[t, min, mean, max], ...]}], resolution_s}` (`t`: the
    start of each group, s since the epoch; `resolution_s`: the one used)."""
    resolution_s = call.param("resolution_s", float)
    if resolution_s is not None and not 0 < resolution_s <= LATEST_TIME_S:
        raise BadRequest("resolution_s must be a number of seconds > 0 and at most %g, not %r" % (LATEST_TIME_S, resolution_s))
    start, end = _time(call, "start"), _time(call, "end")
    labels = call.param("labels", dict)
    if labels and not all(isinstance(v, (str, int, float)) for v in labels.values()):
        raise BadRequest("labels must map names to strings or numbers")
    series, used_s = _store(call).query(call.param("source", str, required=True), call.param("name", str, required=True),
                                        labels=labels, start=start, end=end, resolution_s=resolution_s)
    return {"series": series, "resolution_s": used_s}


@method("history.series")
def history_series(call):
    """What is recorded. Params: `source` (only that source's series). Reply: `{series: [{source,
    name, labels, first, last, points: {raw, 10s, 1m}}]}`: `first`/`last` the times (s since the
    epoch) of its first and last point, `points` how many the store keeps of it in each tier."""
    return {"series": _store(call).series(call.param("source", str))}


@method("history.latest")
def history_latest(call):
    """The last committed value of each series of a source. Params: `source` (required), `name`.
    Reply: `{series: [{name, labels, time, value}]}`."""
    return {"series": _store(call).latest(call.param("source", str, required=True), call.param("name", str))}


@method("history.status")
def history_status(call):
    """The store's file and bound. Params: none. Reply: `{path, file_bytes, wal_bytes, used_bytes,
    max_bytes (the cap: above it the oldest buckets are dropped), series, tiers: [{name, bucket_s,
    retention_s, points, rolled_until, kept_from}], buffered_points, dropped_points, recovered
    (null, or {reason, kept_as, at} when a corrupt or locked file was moved aside), time}`."""
    return _store(call).status()
