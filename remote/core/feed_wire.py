"""What every feed's wire methods share (remote/core/feeds.py): the follow (a topic as a
stream whose first frame is a snapshot with ages), the history window of a request
(`start`/`end`/`since_s`, checked) and the history query, which also reads the series a
capability recorded under its former source name (`register_former_source`), so a week of
history written before a rename stays readable."""

import time

from . import streams
from .history_query import HistoryUnavailable
from .protocol import BadRequest, Busy
from .streams import TopicSource
from .windows import window_bounds

# new source -> [(former source, labels filter -> former filter or None, former labels -> new labels)]
_FORMER = {}


def register_former_source(source, former, to_former=None, from_former=None):
    """Series of `source` were once recorded as `former`: queries of `source` read both.
    `to_former(labels filter)` gives the filter to use there (None: that filter matches none of
    them); `from_former(labels)` names a former series as it is named now."""
    entry = (former, to_former or (lambda labels: labels), from_former or (lambda labels: labels))
    if entry[0] not in [e[0] for e in _FORMER.get(source, ())]:
        _FORMER.setdefault(source, []).append(entry)


def follow(call, feed, snapshot=None):
    """Stream `feed`'s topic (params `stream`, `after`); the first frame holds `feed.snapshot()`
    (or `snapshot()`), each record with its `age_s` and `stale`."""
    return streams.follow(call, TopicSource(feed.topic, snapshot=snapshot or feed.snapshot))


def history_window(call, default_s=3600.0):
    """(start, end) of a request's `start`/`end` (s since the epoch) or `since_s`; BadRequest
    for an empty, infinite or absurd window."""
    try:
        return window_bounds(time.time(), call.param("start", float), call.param("end", float), call.param("since_s", float), default_s)
    except ValueError as exc:
        raise BadRequest(str(exc))


def query_history(call, source, name, labels, start, end, resolution_s=None):
    """(series, resolution_s) of `source`/`name` whose labels include `labels`, over [start,
    end), with the series recorded under the source's former names merged in. NoHistory when
    the daemon keeps no store; Busy while it is not open."""
    if resolution_s is not None and resolution_s <= 0:
        raise BadRequest("resolution_s must be a number of seconds > 0")
    store = call.history()
    try:
        series, used = store.query(source, name, labels, start, end, resolution_s)
        merged = {_key(s["labels"]): s for s in series}
        for former, to_former, from_former in _FORMER.get(source, ()):
            former_filter = to_former(dict(labels or {}))
            if former_filter is None:
                continue
            old, _ = store.query(former, name, former_filter, start, end, used)
            for found in old:
                now_labels = from_former(found["labels"])
                key = _key(now_labels)
                if key in merged:
                    merged[key] = {"labels": now_labels, "points": _merge_points(found["points"], merged[key]["points"])}
                else:
                    merged[key] = {"labels": now_labels, "points": found["points"]}
    except HistoryUnavailable as exc:
        raise Busy("%s; try again" % exc)
    return [merged[key] for key in sorted(merged)], used


def _key(labels):
    return tuple(sorted((str(k), str(v)) for k, v in labels.items()))


def _merge_points(first, second):
    """Points of one series from two sources, in time order; a group both have is joined."""
    out = []
    for point in sorted(first + second, key=lambda p: p[0]):
        if out and out[-1][0] == point[0]:
            last = out[-1]
            out[-1] = [last[0], min(last[1], point[1]), (last[2] + point[2]) / 2.0, max(last[3], point[3])]
        else:
            out.append(list(point))
    return out
