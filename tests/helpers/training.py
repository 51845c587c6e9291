"""The speculators venv the real training tests run (built by .ci/speculators-env) and the
script that makes a tiny run for them."""

import os
from pathlib import Path

import pytest

TESTS = Path(__file__).resolve().parent.parent
VENV = Path(os.environ.get("SPECDECK_SPECULATORS_CACHE", "/opt/specdeck-test")) / "speculators-0.9.0"
PATCH = TESTS / "training_data" / "cpu_patch"
MAKER = TESTS / "training_data" / "make_tiny_run.py"


@pytest.fixture(scope="module")
def speculators_python():
    python = VENV / "bin" / "python"
    if not (VENV / ".specdeck-complete").exists():
        if os.environ.get("CI") == "true":
            pytest.fail("the speculators venv is missing under CI: .ci/speculators-env should have built %s" % VENV)
        pytest.skip("no speculators venv (build it with .ci/speculators-env)")
    return python
