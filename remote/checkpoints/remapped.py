"""Draft ids that name another target token in a second drafter: two drafters' d2t maps compared
id by id (`target = draft + d2t[draft]`), so `compare` says how many of a drafter's proposals
mean something else now (a retrained vocabulary), not only that the maps differ. Standard library only."""

import operator

from .coverage import draft_offsets
from .problems import count_text


def remapped(drafter_a, drafter_b):
    """`{draft_ids_remapped, draft_vocab_size, message}` for two drafters with d2t maps: the
    draft ids of B whose target token differs from A's (ids only one side has count too), out of
    B's draft vocabulary (ids only A has are not B's: the message says the vocabulary shrank);
    None when either has no d2t or one cannot be read."""
    try:
        a, b = draft_offsets(drafter_a), draft_offsets(drafter_b)
    except (OSError, ValueError):
        return None
    if a is None or b is None:
        return None
    common = min(len(a), len(b))
    # Offsets are relative to the draft id, which both sides share: equal offsets, equal tokens.
    differing = common - sum(map(operator.eq, a[:common], b[:common]))
    count = differing + max(0, len(b) - len(a))
    message = "%s of %s draft ids now name other tokens" % (count_text(count), count_text(len(b)))
    if len(a) != len(b):
        message += " (the draft vocabulary went from %s to %s)" % (count_text(len(a)), count_text(len(b)))
    return {"draft_ids_remapped": count, "draft_vocab_size": len(b), "message": message}
