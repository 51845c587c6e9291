"""The warm runner (tui/cli/runner.py) over a real sshd with real keeper and runner processes: a
headless command after the one that started the keeper is run in the runner's child, with the
same stdout, stderr and exit code as in its own process, in its working directory; Ctrl-C and
a killed command end the child; another locale runs the command in its own process; the runner
ends with its keeper.

Each test has its own HOME and XDG_RUNTIME_DIR, so its own keeper and runner, ended at its end.
"""

import json
import os
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from tests.checkpoint_fixtures import write_drafter
from tests.helpers.cli import REPO_ROOT
from tests.helpers.keepers import keeper_pids
from tests.helpers.waits import wait_for

RAN_WARM = "tui.runner: run by the warm runner"


def processes(*words):
    """pid -> parent pid of the live processes whose command line holds every one of `words`
    (one that ends while it is read is not live)."""
    found = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            cmdline = Path("/proc", entry, "cmdline").read_bytes()
            stat = Path("/proc", entry, "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if all(str(word).encode() in cmdline for word in words) and stat[0] != "Z":
            found[int(entry)] = int(stat[1])
    return found


def commands_of(runner):
    """The runner's children that run a command (its spare, waiting for the next, has /dev/null for stdout)."""
    running = []
    for pid in children_of(runner):
        try:
            if os.readlink("/proc/%d/fd/1" % pid) != os.devnull:
                running.append(pid)
        except OSError:
            pass
    return running


def children_of(pid):
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                stat = Path("/proc", entry, "stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(stat[1]) == pid and stat[0] != "Z":
                found.append(int(entry))
    return found


def started_at(pid):
    """The process's start time (in clock ticks since boot), or None once it is gone."""
    try:
        return Path("/proc/%d/stat" % pid).read_text().rsplit(")", 1)[1].split()[19]
    except OSError:
        return None


def ended(pid, born):
    """Whether the process that started at `born` has ended: gone, a zombie, or its pid reused."""
    try:
        stat = Path("/proc/%d/stat" % pid).read_text().rsplit(")", 1)[1].split()
    except OSError:
        return True
    return stat[0] in ("Z", "X") or stat[19] != born


class Laptop:
    def __init__(self, sshd, home, runtime_dir, host_python):
        self.sshd, self.home, self.runtime_dir, self.host_python = sshd, home, runtime_dir, host_python

    def env(self, **extra):
        env = {k: v for k, v in os.environ.items() if k != "SSH_AUTH_SOCK"}
        env.update(HOME=str(self.home), XDG_RUNTIME_DIR=str(self.runtime_dir), TMPDIR=str(self.runtime_dir), PYTHONPATH=str(REPO_ROOT))
        env.update(extra)
        return env

    def argv(self, *args):
        extra = ("--python", self.host_python) if len(args) > 1 and args[1] == "gpuhost" else ()
        return [sys.executable, "-m", "tui.cli", args[0], *args[1:2], *extra, *map(str, args[2:])]

    def cli(self, *args, cwd=REPO_ROOT, **env):
        return subprocess.run(self.argv(*args), capture_output=True, text=True, timeout=120, env=self.env(**env), cwd=str(cwd))

    def start(self, *args, **env):
        return subprocess.Popen(self.argv(*args), stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=self.env(**env), cwd=str(REPO_ROOT))

    def runner(self):
        """The pid of this laptop's runner, once it listens."""
        def listening():
            mine = list(processes("tui.cli.runner", self.runtime_dir))
            sockets = list((self.runtime_dir / "specdeck").glob("*.sock.run")) if (self.runtime_dir / "specdeck").exists() else []
            return mine[0] if mine and sockets else None
        return wait_for(listening, 30, message="the runner to listen")


@pytest.fixture
def laptop(sshd, tmp_path, host_python):
    runtime_dir = Path(tempfile.mkdtemp(prefix="sd-rn-"))
    user = Laptop(sshd, sshd.client_home(tmp_path), runtime_dir, host_python)
    result = user.cli("jobs", "gpuhost", "--json")  # the cold command: starts the keeper, then a runner beside it
    assert result.returncode == 0, result.stderr
    yield user
    for pid in keeper_pids(runtime_dir):
        os.kill(pid, signal.SIGKILL)
    wait_for(lambda: not processes("tui.cli.runner", runtime_dir), 30, message="the runner to end with its keeper")


def test_a_warm_command_runs_in_the_runner_as_it_would_in_its_own_process(laptop, tmp_path):
    runner = laptop.runner()
    warm = laptop.cli("jobs", "gpuhost", "--json", "-v")
    own = laptop.cli("jobs", "gpuhost", "--json", "-v", SPECDECK_WARM_RUNNER="0")
    assert warm.returncode == own.returncode == 0, warm.stderr
    assert json.loads(warm.stdout) == json.loads(own.stdout)
    assert "%s (%d)" % (RAN_WARM, runner) in warm.stderr and RAN_WARM not in own.stderr
    # A refusal: the same one line on stderr and the same exit code.
    warm, own = (laptop.cli("stop", "gpuhost", "j999", "--json", **env) for env in ({}, {"SPECDECK_WARM_RUNNER": "0"}))
    assert (warm.returncode, warm.stdout, warm.stderr) == (own.returncode, own.stdout, own.stderr)
    assert warm.returncode == 1 and json.loads(warm.stderr)["error"]["type"] == "NotFound"
    # A usage error is argparse's own, code 2.
    warm, own = (laptop.cli("jobs", "gpuhost", "--no-such-option", **env) for env in ({}, {"SPECDECK_WARM_RUNNER": "0"}))
    assert (warm.returncode, warm.stderr) == (own.returncode, own.stderr) and warm.returncode == 2
    # In the command's own working directory: a relative path is the user's.
    write_drafter(tmp_path / "drafter")
    warm = laptop.cli("inspect", "drafter", "--json", "-v", cwd=tmp_path)
    own = laptop.cli("inspect", "drafter", "--json", cwd=tmp_path, SPECDECK_WARM_RUNNER="0")
    assert warm.returncode == own.returncode == 0, warm.stderr
    listed = [json.loads(result.stdout) for result in (warm, own)]
    assert listed[0]["path"] == "drafter" and listed[0]["tensor_count"] > 0  # read from the working directory
    assert [dict(reply, handle=None) for reply in listed] == [dict(listed[1], handle=None)] * 2 and RAN_WARM in warm.stderr


def test_the_installed_script_runs_warm_and_another_locale_in_its_own_process(laptop):
    runner = laptop.runner()
    result = laptop.cli("jobs", "gpuhost", "--json", "-v", LC_ALL="C")
    assert result.returncode == 0, result.stderr
    assert RAN_WARM not in result.stderr
    assert RAN_WARM in laptop.cli("jobs", "gpuhost", "--json", "-v").stderr
    # `specdeck` as pip installed it, its interpreter named as pip wrote it (`python3`, where this
    # runner was started as `python`): the same interpreter, run warm.
    script = Path(sys.executable).with_name("specdeck")
    installed = subprocess.run([str(script)] + laptop.argv("jobs", "gpuhost", "--json", "-v")[3:], capture_output=True, text=True,
                               timeout=120, env=laptop.env(), cwd=str(REPO_ROOT))
    assert installed.returncode == 0, installed.stderr
    assert "%s (%d)" % (RAN_WARM, runner) in installed.stderr
    assert json.loads(installed.stdout) == json.loads(laptop.cli("jobs", "gpuhost", "--json").stdout)


def test_ctrl_c_and_a_killed_command_end_the_child(laptop):
    runner = laptop.runner()
    started = laptop.cli("run", "gpuhost", "--json", "--", "python3", "-u", "-c", "import time\nwhile True:\n    print('tick', flush=True)\n    time.sleep(0.2)")
    assert started.returncode == 0, started.stderr
    job = json.loads(started.stdout)["id"]
    for end, code in ((signal.SIGINT, 130), (signal.SIGKILL, -signal.SIGKILL)):
        follow = laptop.start("logs", "gpuhost", job, "--follow")
        assert follow.stdout.readline().startswith(b"tick")  # following, from the runner's child
        [child] = commands_of(runner)
        born = started_at(child)
        follow.send_signal(end)
        assert follow.wait(30) == code
        # Ended, not just gone from the runner's commands: a process in the middle of its exit has
        # closed its descriptors before it is a zombie.
        wait_for(lambda: not commands_of(runner) and ended(child, born), 30, message="the child to end with its command")
        follow.stdout.close()
        follow.stderr.close()
    laptop.cli("stop", "gpuhost", job)


def test_the_runner_ends_with_its_keeper(laptop):
    runner = laptop.runner()
    result = laptop.cli("disconnect")
    assert result.returncode == 0, result.stderr
    wait_for(lambda: not os.path.exists("/proc/%d" % runner), 30, message="the runner to end")
    # The next command runs in its own process, and starts a keeper and a runner again.
    result = laptop.cli("jobs", "gpuhost", "--json", "-v")
    assert result.returncode == 0 and RAN_WARM not in result.stderr, result.stderr
    assert laptop.runner() != runner
