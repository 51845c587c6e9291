"""A checkpoint's problems in a few lines: a count, then errors before warnings, one line each."""

from rich.text import Text
from textual.widgets import Static

from ..display import safe_text

PROBLEMS_SHOWN = 3


def problems_text(problems, limit=PROBLEMS_SHOWN):
    """A count line, then errors (red) before warnings (yellow), one line each, at most `limit`.

    Compact so that a corrupt checkpoint still leaves room for what could be read of it."""
    ordered = sorted(problems or [], key=lambda p: p.get("level") != "error")
    errors = sum(1 for p in ordered if p.get("level") == "error")
    warnings = len(ordered) - errors
    text = Text(no_wrap=True, overflow="ellipsis")
    counts = []
    if errors:
        counts.append("%d error%s" % (errors, "" if errors == 1 else "s"))
    if warnings:
        counts.append("%d warning%s" % (warnings, "" if warnings == 1 else "s"))
    text.append(", ".join(counts), style="bold red" if errors else "bold yellow")
    if len(ordered) > limit:
        text.append("  (first %d below; specdeck inspect lists them all)" % limit, style="dim")
    for problem in ordered[:limit]:
        error = problem.get("level") == "error"
        text.append("\n")
        text.append("error: " if error else "warning: ", style="bold red" if error else "bold yellow")
        # One line each: the message is cut at the pane's edge, never wrapped.
        text.append(safe_text(" ".join(problem.get("message", "").split())), style="red" if error else "yellow")
    return text


class CheckpointProblems(Static):
    """The problems of the checkpoint shown; hidden when it has none."""

    def show(self, problems):
        self.update(problems_text(problems))
        self.display = bool(problems)
