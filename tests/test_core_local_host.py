"""This machine as a host, as a newcomer meets it: a fresh virtualenv made by the README's first
command (this checkout installed into it, no extras), then `specdeck download local REPO
--local-dir DIR --wait` with no interpreter flag reaches `verified`. Only --endpoint is given,
because the hub here is the local fake one.

Marked `install`: it builds a virtualenv (pip's cache makes it quick, the network is needed once),
so it runs once per test run; `-m "not install"` leaves it out.
"""

import json
import os
import shutil
import subprocess
import sys

import pytest

from tests.checkpoint_fixtures import write_drafter
from tests.helpers.cli import REPO_ROOT

pytestmark = [pytest.mark.install, pytest.mark.timeout(900)]

# What a checkout has that is not the project (the copy is what `git clone` would give).
NOT_THE_CHECKOUT = shutil.ignore_patterns(".venv", ".git", "build", "dist", "*.egg-info", "__pycache__", ".pytest_cache",
                                          ".hypothesis", ".ruff_cache", ".whl", ".gl")


@pytest.fixture(scope="module")
def fresh_venv(tmp_path_factory):
    """`python3 -m venv V && V/bin/pip install CHECKOUT`: the README's install step, from a copy of
    this checkout (an in-tree build would leave build/ in the working tree)."""
    root = tmp_path_factory.mktemp("newcomer")
    checkout = root / "specdeck"
    shutil.copytree(REPO_ROOT, checkout, ignore=NOT_THE_CHECKOUT)
    venv = root / "venv"
    base = getattr(sys, "_base_executable", None) or sys.executable
    subprocess.run([base, "-m", "venv", str(venv)], check=True, capture_output=True)
    env = dict(os.environ, PIP_DISABLE_PIP_VERSION_CHECK="1")
    env.pop("PYTHONPATH", None)
    done = subprocess.run([str(venv / "bin" / "pip"), "install", "-q", str(checkout)], capture_output=True, text=True, env=env)
    assert done.returncode == 0, done.stderr[-3000:]
    shutil.rmtree(checkout)  # what runs from now on is the installed copy only
    return venv


def newcomer_env(tmp_path, agent_home):
    """A shell of someone new: own HOME (no config, no hub token), nothing of this test run's
    Python paths, the agent's state in agent_home."""
    home = tmp_path / "newcomer-home"
    home.mkdir()
    env = {k: v for k, v in os.environ.items()
           if k not in ("PYTHONPATH", "HF_TOKEN", "HUGGING_FACE_HUB_TOKEN", "HF_ENDPOINT", "XDG_CONFIG_HOME", "VIRTUAL_ENV")}
    env.update(HOME=str(home), SPECDECK_HOME=str(agent_home), HF_HOME=str(tmp_path / "hf-home"))
    return env


def test_a_fresh_install_downloads_and_verifies_on_this_machine_with_no_flags(fresh_venv, agent_home, hub, tmp_path):
    write_drafter(tmp_path / "drafter")
    files = {name: (tmp_path / "drafter" / name).read_bytes() for name in ("config.json", "model.safetensors")}
    hub.add_repo("team/tiny-eagle3", files)
    target = tmp_path / "models" / "tiny-eagle3"
    specdeck = str(fresh_venv / "bin" / "specdeck")
    env = newcomer_env(tmp_path, agent_home)
    result = subprocess.run([specdeck, "download", "local", "team/tiny-eagle3", "--local-dir", str(target), "--wait",
                             "--endpoint", hub.url], capture_output=True, text=True, env=env, cwd=str(tmp_path), timeout=600)
    assert result.returncode == 0, result.stderr + result.stdout
    assert result.stdout.strip().splitlines()[-1].startswith("verified: verified 2 files")
    for name, data in files.items():
        assert (target / name).read_bytes() == data
    assert hub.bytes_served("team/tiny-eagle3", "model.safetensors") == len(files["model.safetensors"])
    # The agent and its job ran under the console's own interpreter: the fresh venv's.
    jobs = json.loads(subprocess.run([specdeck, "jobs", "local", "--json"], capture_output=True, text=True, env=env,
                                     check=True, timeout=120).stdout)
    assert len(jobs) == 1 and jobs[0]["state"] == "verified"
    interpreter = jobs[0]["argv"][0]  # bin/python3.X: the one in the console script's shebang
    assert os.path.dirname(interpreter) == str(fresh_venv / "bin") and os.path.basename(interpreter).startswith("python")
