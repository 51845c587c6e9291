"""The wire's reference: every method registered by an area has a docstring that gives its
parameters and reply, and docs/wire.md is the reference as the registry makes it today."""

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
