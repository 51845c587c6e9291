"""Running the CLI and looking at the agent's daemon the way a user's machine does: `run_cli`,
`daemon_pid`, `stop_daemon`, `laptop_for`, `python39` and `REPO_ROOT`. Test modules import them
from here (tests/conftest.py keeps only hooks and fixtures)."""

import glob
import os
import shutil
import signal
import socket
import subprocess
import sys
from pathlib import Path

from remote.core.protocol import FrameReader

REPO_ROOT = Path(__file__).resolve().parents[2]


def python39():
    """A Python 3.9 interpreter (the oldest hosts run): $PYTHON39, python3.9 on the PATH, or a
    pyenv-installed 3.9; None when this machine has none."""
    candidates = [os.environ.get("PYTHON39"), shutil.which("python3.9")]
    candidates += sorted(glob.glob(os.path.expanduser("~/.pyenv/versions/3.9*/bin/python3.9")))
    for exe in filter(None, candidates):
        try:
            probe = subprocess.run([exe, "-c", "import sys; print(sys.version_info[:2] == (3, 9))"], capture_output=True, text=True)
        except OSError:
            continue
        if probe.stdout.strip() == "True":
            return exe
    return None


def laptop_for(server, tmp_path, monkeypatch):
    """Make this process a laptop that knows `server` as `gpuhost` (HOME with .ssh/config)."""
    home = server.client_home(tmp_path)
    use_home(monkeypatch, home)
    monkeypatch.delenv("SSH_AUTH_SOCK", raising=False)
    return home


def ssh_config_env(home):
    """The environment that makes `home` a laptop's home for specdeck and for the ssh it asks:
    OpenSSH reads ~/.ssh/config from the passwd entry, not $HOME, so the file is named as `ssh -F`
    would be given it (SPECDECK_SSH_CONFIG)."""
    env = {"HOME": str(home)}
    config = Path(home) / ".ssh" / "config"
    if config.exists():
        env["SPECDECK_SSH_CONFIG"] = str(config)
    return env


def use_home(monkeypatch, home):
    """This process (and what it starts) uses `home` as the laptop's home (ssh_config_env)."""
    monkeypatch.delenv("SPECDECK_SSH_CONFIG", raising=False)
    for name, value in ssh_config_env(home).items():
        monkeypatch.setenv(name, value)


def daemon_pid(home):
    """The pid of the daemon listening in HOME, from its hello; None when none listens."""
    path = Path(home) / "daemon.sock"
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.settimeout(5)
    try:
        sock.connect(str(path))
        hello = next(FrameReader(sock.recv))
        return hello.get("daemon_pid")
    except (OSError, StopIteration):
        return None
    finally:
        sock.close()


def stop_daemon(home):
    pid = daemon_pid(home)
    if pid:
        try:
            os.kill(pid, signal.SIGTERM)
        except ProcessLookupError:
            pass


def run_cli(*args, home=None, timeout=120, env=None, check=None):
    """Run `specdeck ARGS` as a separate process, the way a user does."""
    run_env = {k: v for k, v in os.environ.items() if k != "SSH_AUTH_SOCK"}
    if home is not None:
        run_env.pop("SPECDECK_SSH_CONFIG", None)
        run_env.update(ssh_config_env(home))
    run_env["PYTHONPATH"] = str(REPO_ROOT)
    run_env.update(env or {})
    result = subprocess.run(
        [sys.executable, "-m", "tui.cli", *map(str, args)], capture_output=True, text=True, timeout=timeout, env=run_env, cwd=str(REPO_ROOT)
    )
    if check is not None:
        assert result.returncode == check, "exit %d, stderr: %s\nstdout: %s" % (result.returncode, result.stderr, result.stdout)
    return result
