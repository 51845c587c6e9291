"""Words of the domain spelled once, for both sides (the laptop imports this module too): the
process states of a job that still runs, how a job ended, and a span of time as people say it.
A duration typed by a person is read by windows.py's `parse_duration`."""

LIVE_STATES = ("running", "starting")  # a job's process states while it still runs
STOPPED = "stopped"
STALLED = "stalled"  # a live job whose progress stopped, its stall alert open (remote/notify/stalls.py)


def how_it_ended(job):
    """`was stopped`, `was killed by signal 9`, `exited 3`, `was lost` (its end never recorded:
    a supervisor that died, a job its engine no longer knows) or `ended (STATE)`."""
    states = (job.get("state"), job.get("process_state"))
    if STOPPED in states:
        return "was stopped"
    if job.get("signal"):
        return "was killed by signal %d" % job["signal"]
    if job.get("exit_code") is not None:
        return "exited %d" % job["exit_code"]
    if "lost" in states:
        return "was lost"
    return "ended (%s)" % (job.get("process_state") or job.get("state") or "unknown")


def minutes(seconds):
    """A span as people say it: `40 s`, `12 min`, `7 h 12 min`, `2 d 3 h`."""
    seconds = max(0, int(round(seconds)))
    if seconds < 60:
        return "%d s" % seconds
    if seconds < 3600:
        return "%d min" % (seconds // 60)
    if seconds < 86400:
        return "%d h %02d min" % (seconds // 3600, seconds % 3600 // 60)
    return "%d d %d h" % (seconds // 86400, seconds % 86400 // 3600)
