"""What the console remembers per host (tui/config.py, `specdeck config`, the download form's
"remember" box): written where XDG says, read back by TOML readers, used as the default."""

import json
import os
import stat
import sys

import pytest
from textual.app import App
from textual.widgets import Checkbox, Input

from tests.conftest import run_cli
from tests.test_app_tensors import wait_until
from tui import config
from tui.config import tomllib
from tui.connection import open_client
from tui.screens.download_form import DownloadForm


@pytest.fixture
def xdg(tmp_path, monkeypatch):
    """A private XDG_CONFIG_HOME: the tests never read or write the real one."""
    path = tmp_path / "xdg"
    monkeypatch.setenv("XDG_CONFIG_HOME", str(path))
    return path


def test_settings_round_trip_through_a_toml_file_of_the_users(xdg):
    path = xdg / "specdeck" / "config.toml"
    assert config.config_path() == str(path)
    assert config.remembered("me@gpu01", "ml_python") is None and not path.exists()
    config.remember("me@gpu01", {"ml_python": "/home/me/venv/bin/python", "agent_python": "/usr/bin/python3"})
    config.remember("gpu02.example.org", {"download_dir": 'C:\\odd "dir"\twith tab'})
    # A table written by hand for later (alerts) is kept through our own writes.
    with open(path, "a") as f:
        f.write('\n[hosts."me@gpu01".alerts]\naccept_length_below = 2.46\nenabled = true\n')
    config.remember("me@gpu01", {"agent_python": "/opt/py/bin/python3"})
    config.remember(None, {"ml_python": sys.executable})
    with open(path, "rb") as f:
        data = tomllib.load(f)  # the standard reader agrees with our writer
    assert data["hosts"]["me@gpu01"] == {"ml_python": "/home/me/venv/bin/python", "agent_python": "/opt/py/bin/python3",
                                         "alerts": {"accept_length_below": 2.46, "enabled": True}}
    assert data["hosts"]["gpu02.example.org"] == {"download_dir": 'C:\\odd "dir"\twith tab'}
    assert data["hosts"]["local"] == {"ml_python": sys.executable}
    assert '[hosts."me@gpu01"]' in path.read_text()
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    # Forgetting a key removes it.
    config.remember("me@gpu01", {"agent_python": None})
    assert config.remembered("me@gpu01", "agent_python") is None
    assert config.remembered("me@gpu01", "ml_python") == "/home/me/venv/bin/python"


def test_the_config_command_shows_sets_and_names_a_broken_file(tmp_path):
    home = tmp_path / "home"
    home.mkdir()
    env = {"XDG_CONFIG_HOME": ""}  # unset: ~/.config
    run_cli("config", "me@gpu01", "--ml-python", "/srv/venv/bin/python", home=home, env=env, check=0)
    shown = json.loads(run_cli("config", "me@gpu01", "--json", home=home, env=env, check=0).stdout)
    assert shown == {"host": "me@gpu01", "path": str(home / ".config" / "specdeck" / "config.toml"),
                     "settings": {"ml_python": "/srv/venv/bin/python"}}
    human = run_cli("config", "me@gpu01", home=home, env=env, check=0).stdout
    assert "/srv/venv/bin/python" in human and "--agent-python PATH" in human
    (home / ".config" / "specdeck" / "config.toml").write_text("[hosts\nbroken")
    broken = run_cli("config", "me@gpu01", home=home, env=env)
    assert broken.returncode == 2
    assert "config.toml" in broken.stderr and len(broken.stderr.strip().splitlines()) == 1


class FormHost(App):
    """The download form over the local agent, as the console opens it for `local`."""

    def __init__(self, client):
        super().__init__()
        self.client = client
        self.host = "local"
        self.results = []

    def on_mount(self):
        self.push_screen(DownloadForm(), self.results.append)


async def test_the_download_form_remembers_the_interpreter_for_the_host(xdg, agent_home, hub, tmp_path):
    hub.add_repo("team/tiny", {"config.json": b"{}"})
    client = open_client("local")
    try:
        app = FormHost(client)
        async with app.run_test(size=(100, 30)) as pilot:
            await wait_until(pilot, lambda: isinstance(app.screen, DownloadForm) and app.screen.query("#form-python"))
            form = app.screen
            assert form.query_one("#form-python", Input).value == ""  # nothing remembered yet
            assert "for local" in str(form.query_one("#form-remember", Checkbox).tooltip)
            values = {"repo": "team/tiny", "local_dir": str(tmp_path / "tiny"), "endpoint": hub.url, "python": sys.executable}
            for key, value in values.items():
                form.query_one("#form-%s" % key.replace("_", "-"), Input).value = value
            form.query_one("#form-remember", Checkbox).value = True
            await pilot.press("enter")
            await wait_until(pilot, lambda: app.results, timeout=60)
            assert app.results[0]["job"]["kind"] == "download"
            assert config.remembered("local", "ml_python") == sys.executable
            # The next form starts with it.
            app.push_screen(DownloadForm())
            await wait_until(pilot, lambda: isinstance(app.screen, DownloadForm) and app.screen.query("#form-python"))
            assert app.screen.query_one("#form-python", Input).value == sys.executable
    finally:
        client.close()
