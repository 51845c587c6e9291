"""What the console remembers per host (tui/config.py, `specdeck config`, the download form's
"remember" box): written where XDG says, read back by TOML readers, used as the default; a
file the user got wrong is one line naming the file and the key, from every command."""

import json
import os
import stat
import sys

import pytest
from textual.app import App
from textual.widgets import Checkbox, Input

from tests.helpers.cli import run_cli
from tests.helpers.waits import wait_until
from tui import config
from tui.transport.connection import open_client
from tui.downloads.form import DownloadForm


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
        data = config.toml_reader().load(f)  # the standard reader agrees with our writer
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


# A config file the user got wrong, and the one line every command says about it.
BAD_CONFIGS = [
    (b'hosts = "abc"\n', "hosts: expected a table of hosts, got a string"),
    (b"hosts = 5\n", "hosts: expected a table of hosts, got a number"),
    (b"[hosts]\ngpu01 = 3\n", "hosts.gpu01: expected a table, got a number"),
    (b"[hosts.gpu01]\nml_python = 5\n", "hosts.gpu01.ml_python: expected a string, got a number"),
    (b'[hosts."me@gpu01"]\nagent_python = ["/usr/bin/python3"]\n', 'hosts."me@gpu01".agent_python: expected a string, got a list'),
    (b"[hosts.gpu01]\ndownload_dir = true\n", "hosts.gpu01.download_dir: expected a string, got a boolean"),
    (b"[hosts.gpu01]\ncheckpoint_dir = 2024-01-01\n", "hosts.gpu01.checkpoint_dir: expected a string, got a date or time"),
    (b'[hosts.gpu01]\nalerts = "on"\n', "hosts.gpu01.alerts: expected a table, got a string"),
    (b'[hosts.gpu01]\nml_python = "/usr/bin/py\\u0000thon"\n', "hosts.gpu01.ml_python: contains a NUL byte"),
    (b'[hosts.gpu01]\nml_python = "/usr/bin/py\x00thon"\n', "not valid TOML: Illegal character '\\x00' (at line 2, column 25)"),
    (b'[hosts.gpu01]\nml_python = "/opt/\xff/python"\n', "not UTF-8 text (byte 0xff on line 2)"),
    (b"x = " + b"[" * 5000 + b"]" * 5000 + b"\n", "values nested too deeply"),
    (b"x = " + b"{a = " * 20 + b"1" + b"}" * 20 + b"\n", "x.a.a.a.a.a.a.a.a.a.a.a.a.a.a.a.a: nested more than 16 levels deep"),
    (b"[hosts.gpu01]\n" + b"a." * 40000 + b"b = 1\n", "a key of more than 16 dotted parts on line 2"),
    (b"# a note\n" * (200 << 10), "larger than 1024 KiB, too large for a config file"),
    (b'[fleet]\nhosts = "gpu01"\n', "fleet.hosts: expected a list of hosts, got a string"),
    (b'[fleet]\nhosts = ["gpu01", 2]\n', "fleet.hosts[1]: expected a host name, got a number"),
    (b'[links]\nkeep = "ten minutes"\n', "links.keep: a duration is a number with s, m, h, d or w, e.g. 30s, 5m, 8h or 1d, not 'ten minutes'"),
    (b"[hosts\nbroken\n", "not valid TOML: Expected ']' at the end of a table declaration (at line 1, column 7)"),
]


@pytest.mark.parametrize("content, line", BAD_CONFIGS, ids=[line.split(":")[0][:40] for _, line in BAD_CONFIGS])
def test_a_bad_config_file_is_one_line_naming_the_file_and_the_key(tmp_path, content, line):
    home = tmp_path / "home"
    (home / ".config" / "specdeck").mkdir(parents=True)
    (home / ".config" / "specdeck" / "config.toml").write_bytes(content)
    result = run_cli("jobs", "local", home=home, env={"XDG_CONFIG_HOME": ""})
    assert (result.returncode, result.stdout) == (2, "")
    assert result.stderr == "specdeck: ~/.config/specdeck/config.toml: %s\n" % line


def test_every_command_and_the_console_say_the_config_file_is_bad(tmp_path):
    xdg = tmp_path / "xdg"
    (xdg / "specdeck").mkdir(parents=True)
    (xdg / "specdeck" / "config.toml").write_text("[hosts.gpu01]\nml_python = 5\n")
    line = "~/xdg/specdeck/config.toml: hosts.gpu01.ml_python: expected a string, got a number"  # HOME is tmp_path
    for args in (["gpu01"], [], ["config", "gpu01"], ["download", "local", "team/tiny"], ["breakeven", "--cycle-ms", "20", "--baseline-tps", "50"]):
        result = run_cli(*args, home=tmp_path, env={"XDG_CONFIG_HOME": str(xdg)})
        assert (result.returncode, result.stderr) == (2, "specdeck: %s\n" % line), args
    as_json = run_cli("jobs", "local", "--json", home=tmp_path, env={"XDG_CONFIG_HOME": str(xdg)})
    assert as_json.returncode == 2 and json.loads(as_json.stderr) == {"error": {"type": "ConfigError", "message": line}}
    # Help still helps, and a fixed file is read again.
    assert run_cli("--help", home=tmp_path, env={"XDG_CONFIG_HOME": str(xdg)}).returncode == 0
    (xdg / "specdeck" / "config.toml").write_text('[hosts.gpu01]\nml_python = "/srv/venv/bin/python"\n')
    shown = json.loads(run_cli("config", "gpu01", "--json", home=tmp_path, env={"XDG_CONFIG_HOME": str(xdg)}, check=0).stdout)
    assert shown["settings"] == {"ml_python": "/srv/venv/bin/python"}


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
            await wait_until(pilot, lambda: app.results, timeout_s=60)
            assert app.results[0]["job"]["kind"] == "download"
            assert config.remembered("local", "ml_python") == sys.executable
            # The next form starts with it.
            app.push_screen(DownloadForm())
            await wait_until(pilot, lambda: isinstance(app.screen, DownloadForm) and app.screen.query("#form-python"))
            assert app.screen.query_one("#form-python", Input).value == sys.executable
    finally:
        client.close()


def test_the_fleet_and_the_warm_links_read_from_the_config_file(xdg):
    assert (config.fleet_hosts(), config.link_keep_s()) == ([], config.DEFAULT_KEEP_S)
    path = xdg / "specdeck" / "config.toml"
    path.parent.mkdir(parents=True)
    path.write_text('[fleet]\nhosts = ["me@gpu01", " trainer ", "me@gpu01"]\n[links]\nkeep = "90s"\n')
    assert config.fleet_hosts() == ["me@gpu01", "trainer"]
    assert config.link_keep_s() == 90.0
