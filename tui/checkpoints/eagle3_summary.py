"""One checkpoint's format and, for an EAGLE-3 drafter, the sizes it was trained for, on a line."""

from rich.text import Text
from textual.widgets import Static

from ..display import format_shape

EAGLE3_FIELDS = (
    ("hidden", "hidden_size"),
    ("target hidden", "target_hidden_size"),
    ("draft vocab", "draft_vocab_size"),
    ("target vocab", "target_vocab_size"),
    ("aux layers", "aux_layer_ids"),
)


def _value(value):
    if value is None:
        return "?"
    if isinstance(value, (list, tuple)):
        return format_shape(value)
    return str(value)


def eagle3_summary(report):
    """`format specforge  hidden 7168  target hidden 7168  draft vocab 32000 ...` as styled text."""
    text = Text()
    text.append("format ", style="dim")
    text.append(report.get("format") or "unknown", style="bold")
    eagle3 = report.get("eagle3")
    if not eagle3:
        text.append("  not an EAGLE-3 drafter", style="dim")
        return text
    for label, key in EAGLE3_FIELDS:
        text.append("  %s " % label, style="dim")
        if key == "aux_layer_ids" and eagle3.get(key) is None:
            text.append("not in config (vLLM default: 2, L/2, L-3 of the target)")
        else:
            text.append(_value(eagle3.get(key)))
    return text


class Eagle3Summary(Static):
    """The format line of the checkpoint shown, and how many name patterns a huge one has."""

    def show(self, report, tensor_count=None):
        """The line for `report`; with `tensor_count` (a huge checkpoint, paged), its patterns too."""
        summary = eagle3_summary(report)
        if tensor_count is not None:
            summary.append("\n{:,} tensors in {:,} name patterns: g shows them".format(
                tensor_count, report.get("group_count", 0)), style="dim")
        self.update(summary)
