"""Windows of time as people and the wire give them: durations such as `90`, `30s`, `5m`,
`8h`, `2d`, `1w` (one parser for every command that takes one: `gpus --since`, `spec
--window`), and a window's bounds from `start`/`end`/`since_s`, checked to be finite and
within ten years, so a window of 1e308 seconds is a clear refusal rather than an overflow."""

import math
import re

UNIT_S = {None: 1, "s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}
MAX_WINDOW_S = 10 * 365 * 86400.0
# Times are s since the epoch; anything past this is a unit mistake (ms), not a date.
MAX_TIME_S = 1e11
_DURATION = re.compile(r"^(\d+(?:\.\d+)?)\s*(s|m|h|d|w)?$")


def parse_duration(text):
    """Seconds in `90`, `90s`, `10m`, `8h`, `2d`, `1w`; ValueError with a sentence otherwise."""
    match = _DURATION.match(str(text).strip())
    if not match:
        raise ValueError("a duration is a number with s, m, h, d or w, e.g. 30s, 5m, 8h or 1d, not %r" % text)
    seconds = float(match.group(1)) * UNIT_S[match.group(2)]
    if not 0 < seconds <= MAX_WINDOW_S:
        raise ValueError("a duration must be more than 0 and at most ten years, not %r" % text)
    return seconds


def window_bounds(now, start=None, end=None, since_s=None, default_s=3600.0):
    """(start, end) in s since the epoch: `end` (default now) back `since_s` (default
    `default_s`) unless `start` is given. ValueError with a sentence for a window that is
    empty, not finite, longer than ten years or outside the epoch's sane range."""
    for name, value in (("start", start), ("end", end), ("since_s", since_s)):
        if value is not None and not math.isfinite(value):
            raise ValueError("%s must be a finite number" % name)
    if since_s is not None and not 0 < since_s <= MAX_WINDOW_S:
        raise ValueError("since_s must be more than 0 and at most %d (ten years), not %g" % (MAX_WINDOW_S, since_s))
    end = now if end is None else end
    start = end - (default_s if since_s is None else since_s) if start is None else start
    for name, value in (("start", start), ("end", end)):
        if not 0 <= value <= MAX_TIME_S:
            raise ValueError("%s must be a time in seconds since the epoch, not %g" % (name, value))
    if start >= end:
        raise ValueError("the window is empty: start must come before end")
    if end - start > MAX_WINDOW_S:
        raise ValueError("a window is at most ten years long")
    return start, end
