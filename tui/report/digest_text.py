"""The daily digest in one line, as `specdeck notify HOST` lists it."""

from ..display import format_time


def digest_line(digest):
    """`daily digest at 08:00 (next Fri 08:00); last sent Thu 08:00: c1 delivered, c2 not delivered: why`;
    when every channel refused it: `...; not delivered at 08:05 (try 2 today): c1 not delivered: why;
    trying again at 08:07` or `...; no more tries today`."""
    text = "daily digest at %s (next %s)" % (digest["at"], format_time(digest["next_at"]))
    if digest.get("last_sent_at"):
        results = digest.get("last_results") or {}
        told = ", ".join("%s delivered" % c if error is None else "%s not delivered: %s" % (c, error) for c, error in sorted(results.items()))
        if results and all(error is not None for error in results.values()):
            tries = digest.get("tries") or 1
            text += "; not delivered at %s (try %d of %s's digest): %s" % (format_time(digest["last_sent_at"]), tries, digest.get("last_day") or "the day", told)
            text += "; trying again at %s" % format_time(digest["retry_at"]) if digest.get("retry_at") else "; no more tries that day"
        else:
            text += "; last sent %s: %s" % (format_time(digest["last_sent_at"]), told or "no channel")
    return text
