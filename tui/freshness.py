"""How old the figures shown are, said the same way by every pane and command that shows a
host's live figures (GPUs, servers): the host's own verdict carried by the last frame, aged since
it arrived, or stale when no frame came for a while (a cut link)."""

from .display import safe_text

QUIET_STALE_S = 5.0  # no frame from the host this long: the figures shown are stale


def freshness(sample, received_at, now_monotonic):
    """(stale, age in seconds or None, why) of the figures shown: the host's own verdict carried
    by the last frame, aged since it arrived, or stale when no frame came for QUIET_STALE_S."""
    if sample is None:
        return False, None, None
    since = now_monotonic - received_at if received_at is not None else 0.0
    age = sample.get("age_s")
    age = None if age is None else age + since
    if sample.get("stale"):
        return True, age, sample.get("error")
    if since > QUIET_STALE_S:
        return True, age, "no sample from the host for %d s" % since
    return False, age, None


def stale_text(age, why=None):
    """`(stale, 12 s old: the scrape timed out)`; `?` for an age the host did not say."""
    text = "stale, %s old" % ("?" if age is None else "%d s" % age)
    return "(%s%s)" % (text, ": %s" % safe_text(why) if why else "")  # why: a server's error line


def not_current_line(figures):
    """The line above stale figures read once (a command's answer): None when they are current."""
    if not figures.get("stale"):
        return None
    return "figures below are not current %s" % stale_text(figures.get("age_s"), figures.get("error"))
