"""Per-position acceptance as text, both ways and each named as such, the same in `spec`,
`advise`, `bench` and the Speculation pane: the unconditional share (of all drafts, the share whose
token at position i was accepted: vLLM's counter) and the conditional rate (accepted at i given
i-1 was), `undefined` where no draft reached the position."""

from remote.serving.positions import conditional as _conditional

from ..display import safe_text

# What `--json` passes on beside `per_position` (the host's remote/serving/positions.FIGURE_KEYS).
JSON_KEYS = ("per_position", "per_position_conditional", "per_position_note", "per_position_counter", "k_schedule", "k_in_force")
UNCONDITIONAL_NAME = "unconditional (share of drafts reaching it)"
CONDITIONAL_NAME = "conditional (given the one before)"


def rates(values, pattern="%.2f"):
    """`0.81 0.62 undefined`: None is a rate that is undefined (the position before was never accepted)."""
    return " ".join("undefined" if v is None else pattern % v for v in values or ()) or "-"


def json_part(figures):
    """The per-position keys of a reply for `--json` (`per_position` is the unconditional shares)."""
    result = dict((key, figures.get(key)) for key in JSON_KEYS[:2])
    result.update((key, figures[key]) for key in JSON_KEYS[2:] if figures.get(key))
    return result


def lines(figures, label_width=18, pattern="%.2f"):
    """The per-position lines: unconditional, conditional, and the note when they are not knowable."""
    pad = " " * label_width
    said = ["%s%s" % ("K in force".ljust(label_width), safe_text(figures["k_in_force"]))] if figures.get("k_in_force") else []
    if figures.get("per_position_note"):
        said.append("%s%s" % ("per position".ljust(label_width), safe_text(figures["per_position_note"])))
        if figures.get("per_position_counter"):
            said.append("%s%s  the counter's shares, over every draft" % (pad, rates(figures["per_position_counter"], pattern)))
        return said
    conditional = figures.get("per_position_conditional")
    if conditional is None and figures.get("per_position"):  # a host older than the conditional rates
        conditional = _conditional(figures["per_position"])
    return said + ["%s%s  %s" % ("per position".ljust(label_width), rates(figures.get("per_position"), pattern), UNCONDITIONAL_NAME),
            "%s%s  %s" % (pad, rates(conditional, pattern), CONDITIONAL_NAME)]
