"""The wire's reference: every method registered by an area has a docstring that gives its
parameters and reply, every error type the agent can answer with is listed, and docs/wire.md
is the reference as the registry makes it today."""

import ast
import re
import subprocess
import sys
from pathlib import Path

from remote import areas  # noqa: F401  (the composition root installs the areas)
from remote.core import wire

REPO_ROOT = Path(__file__).resolve().parent.parent


def test_every_method_has_an_entry_with_params_and_reply():
    methods = wire.load_areas()
    assert {"ping", "jobs.submit", "jobs.follow", "jobs.events", "checkpoint.inspect", "download.start"} <= set(methods)
    for name, function in methods.items():
        doc = (function.__doc__ or "").strip()
        assert doc, "wire method %s has no docstring" % name
        assert "reply" in doc.lower() or "frames" in doc.lower(), "the docstring of %s does not say what it replies" % name


def test_docs_wire_md_is_the_reference_of_today():
    text = (REPO_ROOT / "docs" / "wire.md").read_text()
    assert text == wire.reference(), "docs/wire.md is stale: run python -m remote wire-reference > docs/wire.md"
    for name in wire.load_areas():
        assert "### `%s`" % name in text
    for frame, _ in wire.FRAMES:
        assert "**%s**" % frame in text
    for error, _ in wire.ERRORS:
        assert "**%s**" % error in text


def test_the_agent_prints_the_reference():
    out = subprocess.run([sys.executable, "-m", "remote", "wire-reference"], capture_output=True, text=True, cwd=str(REPO_ROOT), check=True)
    assert out.stdout == wire.reference()


def test_an_unknown_method_is_a_typed_error():
    try:
        wire.dispatch(None, None, "no.such.method", {})
    except wire.RemoteError as exc:
        assert exc.type == "UnknownMethod"
    else:
        raise AssertionError("an unknown method was dispatched")


# ---------------------------------------------------------------- every error type

ERROR_TYPE = re.compile(r"[A-Z][A-Za-z]+\Z")  # error types are CamelCase; frame types (hello, notice) are not
ERROR_CALLS = ("RemoteError", "PlanError")  # the wire's error, and a download step's (passed on as the wire's)


def _names(node):
    """The CamelCase string constants anywhere in `node` (both branches of `"A" if x else "B"` too)."""
    return {n.value for n in ast.walk(node) if isinstance(n, ast.Constant) and isinstance(n.value, str) and ERROR_TYPE.match(n.value)}


def error_types_in(root):
    """{type: first place} of every error type remote/ can answer with, found in its sources:
    `RemoteError("X", ...)` and `PlanError("X", ...)`, a RemoteError subclass's `__init__("X", ...)`,
    an error object `{"type": "X", ...}`, and the PLAN_ERROR_TYPES tuple."""
    found = {}
    for path in sorted((Path(root) / "remote").rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        subclasses = {node.name for node in ast.walk(tree) if isinstance(node, ast.ClassDef)
                      and any(isinstance(b, ast.Name) and b.id in ERROR_CALLS + ("BadRequest", "NotFound") for b in node.bases)}
        for node in ast.walk(tree):
            names = set()
            if isinstance(node, ast.Call) and node.args:
                called = node.func.id if isinstance(node.func, ast.Name) else getattr(node.func, "attr", None)
                if called in ERROR_CALLS:
                    names = _names(node.args[0])
            elif isinstance(node, ast.ClassDef) and node.name in subclasses:
                names = set().union(*[_names(call.args[0]) for call in ast.walk(node) if isinstance(call, ast.Call)
                                      and getattr(call.func, "attr", None) == "__init__" and call.args])
            elif isinstance(node, ast.Dict):
                names = set().union(*[_names(v) for k, v in zip(node.keys, node.values) if isinstance(k, ast.Constant) and k.value == "type"])
            elif isinstance(node, ast.Assign) and any(getattr(t, "id", None) == "PLAN_ERROR_TYPES" for t in node.targets):
                names = _names(node.value)
            for name in names:
                found.setdefault(name, "%s:%d" % (path.relative_to(root), node.lineno))
    return found


def test_every_error_type_the_agent_raises_is_in_the_reference():
    raised = error_types_in(REPO_ROOT)
    # The finder sees each way a type is made: a literal, a subclass, an error object, a branch.
    assert {"DrafterMismatch", "NoHistory", "TooLarge", "BadRequest", "PlanFailed", "HubError", "NoSpace", "IOError"} <= set(raised)
    listed = {name for name, _ in wire.ERRORS}
    assert {name: where for name, where in raised.items() if name not in listed} == {}, "add these to wire.ERRORS"
    assert listed - set(raised) == set(), "wire.ERRORS lists types nothing raises"
    text = (REPO_ROOT / "docs" / "wire.md").read_text()
    assert all("- **%s**: " % name in text for name in raised)


def test_the_finder_sees_a_new_error_type(tmp_path):
    (tmp_path / "remote").mkdir()
    (tmp_path / "remote" / "planted.py").write_text(
        "from .core.protocol import RemoteError\n\n\n"
        "def refuse(full):\n    raise RemoteError(\"QuotaExceeded\" if full else \"RateLimited\", \"try later\")\n")
    assert error_types_in(tmp_path) == {"QuotaExceeded": "remote/planted.py:5", "RateLimited": "remote/planted.py:5"}
