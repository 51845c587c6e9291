"""The daily digest in one line, as `specdeck notify HOST` lists it."""

from ..display import format_time


def digest_line(digest):
    """`daily digest at 08:00 (next Fri 08:00); last sent Thu 08:00: c1 delivered, c2 not delivered: why`."""
    text = "daily digest at %s (next %s)" % (digest["at"], format_time(digest["next_at"]))
    if digest.get("last_sent_at"):
        results = digest.get("last_results") or {}
        told = ", ".join("%s delivered" % c if error is None else "%s not delivered: %s" % (c, error) for c, error in sorted(results.items()))
        text += "; last sent %s: %s" % (format_time(digest["last_sent_at"]), told or "no channel")
    return text
