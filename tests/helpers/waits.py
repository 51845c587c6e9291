"""Waits on a condition, never on the clock: poll until `predicate()` returns something truthy
and return that value, or fail with what was awaited and the last value seen. The timeouts are
bounds on a hang, not speed assertions."""

import time

from textual.css.query import NoMatches

WAIT_S = 60
INTERVAL_S = 0.05


def _timed_out(timeout_s, predicate, message, last_value, last_exc):
    what = (message() if callable(message) else message) or getattr(predicate, "__name__", repr(predicate))  # a callable: said as it is then
    seen = "last exception: %r" % (last_exc,) if last_exc is not None else "last value: %r" % (last_value,)
    return AssertionError("timed out after %s s waiting for %s; %s" % (timeout_s, what, seen))


def wait_for(predicate, timeout_s=WAIT_S, message=None, interval_s=INTERVAL_S, ignore=()):
    """Poll `predicate()` from a plain (synchronous) test.

    Exceptions listed in `ignore` count as "not yet" (the last one is reported on timeout);
    any other exception propagates."""
    deadline = time.monotonic() + timeout_s
    last_value = last_exc = None
    while True:
        try:
            last_value, last_exc = predicate(), None
            if last_value:
                return last_value
        except ignore as exc:  # noqa: PERF203 - polling
            last_exc = exc
        if time.monotonic() >= deadline:
            raise _timed_out(timeout_s, predicate, message, last_value, last_exc)
        time.sleep(interval_s)


async def wait_until(pilot, predicate, timeout_s=WAIT_S, message=None, interval_s=INTERVAL_S):
    """Poll `predicate()` between frames of a Pilot test, yielding to the app's event loop
    (pilot.pause) so that the app goes on working while it waits. A widget the predicate
    asks for that is not composed yet (NoMatches) is "not yet"."""
    deadline = time.monotonic() + timeout_s
    last_value = last_exc = None
    while True:
        try:
            last_value, last_exc = predicate(), None
            if last_value:
                return last_value
        except NoMatches as exc:
            last_exc = exc
        if time.monotonic() >= deadline:
            raise _timed_out(timeout_s, predicate, message, last_value, last_exc)
        await pilot.pause(interval_s)
