"""The speculators venv the real training tests run (built by .ci/speculators-env) and the
script that makes a tiny run for them."""

import json
import os
import sys
import textwrap
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


# A training job on the local agent, and its curves, as the CLI gives them.


def start(home, tmp_path, name, body, *options):
    script = tmp_path / ("%s.py" % name)
    script.write_text(textwrap.dedent(body))
    from tests.helpers.cli import run_cli

    started = run_cli("train", "local", "--name", name, *options, "--json", "--", sys.executable, "-u", str(script), home=home, check=0)
    return json.loads(started.stdout)["id"]


def curves(home, job_id, *options):
    from tests.helpers.cli import run_cli

    answered = run_cli("curves", "local", job_id, "--json", *options, home=home)
    return json.loads(answered.stdout) if answered.returncode == 0 else None


# One step's record as speculators' trainer prints it through rich (loss, then the step): what the
# stall and slowdown tests' trainers write.
STEP_LINE = ("[17:21:37] INFO     train/loss_0=0.025, train/full_acc_0=0.00e+00, train/loss=%.3f, epoch=0, "
             "lr/AdamW=9.09e-04, global_step=%d                     trainer.py:587")
