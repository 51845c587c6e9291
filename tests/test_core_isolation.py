"""On this machine (`local`) the agent runs isolated from the current directory: a `remote/`
folder planted where the console is started (a shared or world-writable directory), where the
daemon runs, or where a job runs never runs in the agent's place, as the relay, the daemon,
a job's supervisor or a job step of the agent's own (a download). Everything here goes through
the installed `specdeck` entry point, as a user runs it."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers.cli import daemon_pid, python39

SPECDECK = Path(sys.executable).with_name("specdeck")  # installed by `pip install -e .`


def plant(directory, marker):
    """A `remote` package in `directory` whose import (or run with -m) appends to `marker`."""
    package = directory / "remote"
    package.mkdir(parents=True)
    code = "open(%r, 'a').write('planted code ran in %%d\\n' %% __import__('os').getpid())\n" % str(marker)
    for name in ("__init__.py", "__main__.py"):
        (package / name).write_text(code)


@pytest.fixture
def planted(tmp_path, agent_home):
    """(run `specdeck ARGS` in a directory with a planted remote/, the marker it would write,
    the HOME given: jobs' default working directory, planted too)."""
    marker = tmp_path / "planted-code-ran"
    shared = tmp_path / "shared"
    home = tmp_path / "home"
    plant(shared, marker)
    plant(home, marker)
    env = dict(os.environ, HOME=str(home), SPECDECK_HOME=str(agent_home), XDG_CONFIG_HOME=str(tmp_path / "xdg"))

    def specdeck(*args, check=0):
        result = subprocess.run([str(SPECDECK), *map(str, args)], cwd=str(shared), env=env, capture_output=True, text=True, timeout=300)
        assert result.returncode == check, "exit %d: %s%s" % (result.returncode, result.stderr, result.stdout)
        return result

    return specdeck, marker, shared, home


def test_a_planted_remote_folder_never_runs_as_relay_daemon_supervisor_or_job_step(planted, agent_home, hub, tmp_path):
    specdeck, marker, shared, home = planted
    job_id = json.loads(specdeck("run", "local", "--json", "--", sys.executable, "-c", "import os; print('job ran in', os.getcwd())").stdout)["id"]
    assert specdeck("logs", "local", job_id, "--follow").stdout == "job ran in %s\n" % home
    # The daemon (started by the relay, from the console's directory) runs there, and so do the
    # supervisors it starts: the planted folder was in reach of every one of them.
    assert os.readlink("/proc/%d/cwd" % daemon_pid(agent_home)) == str(shared)
    # A download is a job whose command is the agent itself, in the job's directory (HOME).
    hub.add_repo("team/tiny", {"config.json": b"{}"})
    done = specdeck("download", "local", "team/tiny", "--local-dir", tmp_path / "tiny", "--endpoint", hub.url,
                    "--host-python", sys.executable, "--wait", "--json")
    assert (tmp_path / "tiny" / "config.json").read_bytes() == b"{}", done.stdout
    assert not marker.exists(), marker.read_text()


@pytest.mark.skipif(python39() is None, reason="no Python 3.9 on this machine")
def test_the_isolated_agent_runs_on_python_3_9(planted, agent_home):
    specdeck, marker, shared, home = planted
    job_id = json.loads(specdeck("run", "local", "--python", python39(), "--json", "--", "bash", "-c", "echo on 3.9").stdout)["id"]
    assert specdeck("logs", "local", job_id, "--follow", "--python", python39()).stdout == "on 3.9\n"
    daemon = daemon_pid(agent_home)
    assert os.path.realpath("/proc/%d/exe" % daemon) == os.path.realpath(python39())
    assert not marker.exists(), marker.read_text()
