"""One checkpoint's format and, for an EAGLE-3 drafter, the sizes it was trained for, on a line,
and the share of the target's tokens its vocabulary holds, when measured."""

import os

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


def coverage_line(result):
    """The drafter's draft-vocabulary coverage of the last text measured on the host
    (`checkpoint.coverage_last`): the share, on what, and the accept length it bounds at K=3."""
    text = Text()
    text.append("coverage ", style="dim")
    if result is None:
        text.append("not measured: specdeck coverage HOST DRAFTER --target TARGET --text FILE", style="dim")
        return text
    if result.get("full_vocabulary"):
        text.append("1 (no d2t/t2d: the whole target vocabulary, by construction)")
        return text
    text.append("%.4f" % result["coverage"], style="bold")
    text.append(" of %s's tokens on %s" % (os.path.basename((result.get("target") or "").rstrip("/")) or "?",
                                          result.get("text") or "server %s" % result.get("server")))
    bound = dict((row["k"], row["accept_length"]) for row in result.get("bound") or [])
    if bound.get(3) is not None:
        text.append("  bounds accept length at K=3 to %.2f" % bound[3], style="dim")
    return text


class Eagle3Summary(Static):
    """The format line of the checkpoint shown, how many name patterns a huge one has, and for
    a drafter the coverage of the last text measured."""

    def show(self, report, tensor_count=None, coverage=False):
        """The line for `report`; with `tensor_count` (a huge checkpoint, paged), its patterns
        too; with `coverage` (False: not asked yet), the coverage line."""
        summary = eagle3_summary(report)
        if tensor_count is not None:
            summary.append("\n{:,} tensors in {:,} name patterns: g shows them".format(
                tensor_count, report.get("group_count", 0)), style="dim")
        if coverage is not False and report.get("eagle3"):
            summary.append("\n")
            summary.append_text(coverage_line(coverage))
        self.update(summary)
