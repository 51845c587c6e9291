"""What every feed's wire methods share (remote/core/feeds.py): the follow (a topic as a
stream whose first frame is a snapshot with ages), the history window of a request
(`start`/`end`/`since_s`, checked) and the history query (through `call.history()`: the
history area's store, which the core does not import)."""

import time

from . import streams
from .protocol import BadRequest
from .streams import TopicSource
from .windows import window_bounds


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
    end). NoHistory when the daemon keeps no store; Busy while it is not open."""
    if resolution_s is not None and resolution_s <= 0:
        raise BadRequest("resolution_s must be a number of seconds > 0")
    return call.history().query(source, name, labels, start, end, resolution_s)
