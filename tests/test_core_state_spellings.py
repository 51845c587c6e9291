"""The states that say whether a job, a download or a server still runs are spelled once, in the
view models (tui/*/model.py, which take the host's own lists where the host has one): a pane or
a command that spells its own copy can drift from them, and the pane and `--json` then disagree
about the same moment. This reads tui/ for such copies, so that a new one fails here."""

import ast
from pathlib import Path

from remote.core.words import LIVE_STATES
from tui.downloads.model import ACTIVE_STATES, VERDICT_STATES
from tui.jobs.model import FAILED_STATES, UNFINISHED_STATES

TUI = Path(__file__).resolve().parent.parent / "tui"
# A group with one of these words written out is a copy of one of the models' lists. `failed`
# alone says nothing: a connection fails too (`("failed", "closed")` is the client's own states).
LISTED_WORDS = (set(UNFINISHED_STATES) | set(ACTIVE_STATES) | set(FAILED_STATES) | set(VERDICT_STATES)) - {"failed"}
# A comparison with one of these alone is a one-word copy of the live states.
COMPARED_WORDS = set(LIVE_STATES)


def _words(node):
    return {element.value for element in getattr(node, "elts", ()) if isinstance(element, ast.Constant) and isinstance(element.value, str)}


def spellings(source, filename="<source>"):
    """(line, what) for each copy of a state list in `source`: a tuple, list or set literal with
    one of the states in it, or a comparison of a value with one of the live states."""
    found = []
    for node in ast.walk(ast.parse(source, filename)):
        if isinstance(node, (ast.Tuple, ast.List, ast.Set)) and _words(node) & LISTED_WORDS:
            found.append((node.lineno, "the states %s" % sorted(_words(node))))
        elif isinstance(node, ast.Compare):
            for operand in [node.left] + node.comparators:
                if isinstance(operand, ast.Constant) and operand.value in COMPARED_WORDS:
                    found.append((node.lineno, "a comparison with %r" % operand.value))
    return sorted(found)


def test_the_detector_finds_the_copies_people_write():
    copies = spellings('live = ("running", "starting")\n'
                       'if job["process_state"] in ["starting", "running"]:\n    pass\n'
                       'ended = state not in ("queued", "resolving", "downloading", "verifying")\n'
                       'dead = info.get("state") in ("failed", "lost")\n'
                       'if job.get("state") == "running":\n    pass\n')
    assert sorted(line for line, _ in copies) == [1, 2, 4, 5, 6]
    # A state's colour (a dict) or a kind's name is not a copy of a state list.
    assert spellings('STYLES = {"running": "green", "failed": "bold red"}\nkinds = ("command", "server")\n') == []


def test_no_state_list_is_spelled_outside_the_view_models():
    strays = []
    for path in sorted(TUI.rglob("*.py")):
        if path.name == "model.py":
            continue
        relative = path.relative_to(TUI.parent)
        strays += ["%s:%d: %s" % (relative, line, what) for line, what in spellings(path.read_text(encoding="utf-8"), str(relative))]
    assert strays == [], "states spelled outside tui/*/model.py (import them from the model):\n" + "\n".join(strays)
