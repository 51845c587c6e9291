"""What the CLI says when something goes wrong, as a new user meets it: the real `specdeck` in a
subprocess against the local agent. One line on stderr (or one JSON error object with --json),
and the exit code by what went wrong: 1 when the thing asked for failed, 2 for usage, connection
or I/O."""

import json
import sys

import pytest

from tests.checkpoint_fixtures import write_drafter
from tests.helpers.cli import daemon_pid, run_cli
from tests.helpers.waits import wait_for


def one_line(result):
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    return lines[0]


def json_error(result):
    """The --json error object on stderr, which has exactly a type and a message."""
    error = json.loads(one_line(result))["error"]
    assert sorted(error) == ["message", "type"]
    return error


def test_a_mistyped_command_is_named_with_the_command_it_resembles(tmp_path):
    result = run_cli("downlaod", "local", "org/repo", "--local-dir", tmp_path / "x")
    assert result.returncode == 2
    assert one_line(result) == "specdeck: unknown command 'downlaod', did you mean 'download'?"
    alone = run_cli("jbos", "--json")
    assert alone.returncode == 2 and json_error(alone) == {"type": "UsageError", "message": "unknown command 'jbos', did you mean 'jobs'?"}
    # Nothing like a command, with a word no host can be after it (a repo): not the console's hosts.
    other = run_cli("frobnicate", "org/repo")
    assert other.returncode == 2 and "unknown command 'frobnicate'" in one_line(other) and "specdeck -h" in one_line(other)


def test_an_unknown_flag_is_answered_with_the_commands_own_usage():
    result = run_cli("jobs", "local", "--bogus")
    assert result.returncode == 2
    assert result.stderr.startswith("usage: specdeck jobs ")  # not `specdeck [-h] [--version] [HOST | COMMAND ...]`
    assert result.stderr.strip().splitlines()[-1] == "specdeck jobs: error: unrecognized arguments: --bogus"
    scripted = run_cli("inspect", "x", "--bogus", "--json")
    assert scripted.returncode == 2
    assert json_error(scripted) == {"type": "UsageError", "message": "specdeck inspect: unrecognized arguments: --bogus"}


def test_serve_under_an_interpreter_without_vllm_says_once_how_to_name_one(tmp_path, agent_home):
    target = tmp_path / "target"
    target.mkdir()
    result = run_cli("serve", "local", target, "--python", sys.executable, "--wait", timeout=120)
    assert result.returncode == 1, result.stderr
    first = result.stderr.splitlines()[0]
    assert first.startswith("specdeck: server ") and "died while starting" in first
    assert "has no vllm" in first and "specdeck config local --ml-python PATH" in first
    assert result.stderr.count("No module named 'vllm'") == 1  # once, not once per place it was written


def test_a_host_name_that_does_not_resolve_says_how_to_name_one_in_ssh_config(tmp_path):
    home = tmp_path / "home"
    (home / ".ssh").mkdir(parents=True)
    result = run_cli("jobs", "gpu-box.invalid", home=home)
    assert result.returncode == 2
    line = one_line(result)
    assert "cannot resolve host 'gpu-box.invalid'" in line and "did not resolve" in line
    assert "Host gpu-box.invalid" in line and "HostName" in line and "~/.ssh/config" in line
    assert "press r" not in line
    # An alias whose HostName does not resolve: the line says where that name came from.
    (home / ".ssh" / "config").write_text("Host gpubox\n    HostName gpu-box.invalid\n")
    aliased = run_cli("jobs", "gpubox", "--json", home=home)
    error = json_error(aliased)
    assert aliased.returncode == 2 and error["type"] == "ConnectError"
    assert "gpu-box.invalid" in error["message"] and "HostName the ssh config gives for gpubox" in error["message"]


@pytest.mark.parametrize(
    "argv, code, error_type, words",
    [
        (("logs", "local", "j999"), 1, "NotFound", "j999"),
        (("verify", "local:/no/such/dir", "--repo", "org/repo"), 1, "NotFound", "/no/such/dir"),
        (("inspect", "local:/no/such/checkpoint"), 1, "NotFound", "/no/such/checkpoint"),
        (("run", "local", "--", "no-such-command-anywhere"), 2, "BadRequest", "no-such-command-anywhere"),
    ],
)
def test_a_hosts_refusal_keeps_its_type_and_exits_by_what_it_means(agent_home, argv, code, error_type, words):
    human = run_cli(*argv)
    assert human.returncode == code, human.stderr
    assert one_line(human).startswith("specdeck: ") and words in one_line(human)
    assert human.stdout == ""
    split = argv.index("--") if "--" in argv else len(argv)  # after --, words are the job's own
    as_json = run_cli(*argv[:split], "--json", *argv[split:])
    assert as_json.returncode == code
    error = json_error(as_json)
    assert error["type"] == error_type and words in error["message"]


def test_a_refusal_that_a_command_put_in_its_own_words_keeps_the_hosts_type(agent_home):
    # `spec` names the job in its own line; the type and the exit code stay the host's NotFound.
    result = run_cli("spec", "local", "j999", "--json")
    assert result.returncode == 1
    assert json_error(result)["type"] == "NotFound"


def test_logs_follow_of_a_failed_job_says_how_it_ended(agent_home):
    job_id = run_cli("run", "local", "--", "sh", "-c", "echo working; exit 3", check=0).stdout.strip()
    result = run_cli("logs", "local", job_id, "--follow")
    assert result.returncode == 1
    assert result.stdout == "working\n"
    assert one_line(result) == "specdeck: %s exited 3" % job_id
    as_json = run_cli("logs", "local", job_id, "--follow", "--json")
    assert as_json.returncode == 1 and json_error(as_json) == {"type": "JobFailed", "message": "%s exited 3" % job_id}
    done = run_cli("run", "local", "--", "sh", "-c", "echo fine", check=0).stdout.strip()
    ok = run_cli("logs", "local", done, "--follow")
    assert ok.returncode == 0 and ok.stdout == "fine\n" and ok.stderr == ""


def test_compare_against_a_folder_that_is_not_a_checkpoint_is_one_line(tmp_path):
    drafter = write_drafter(tmp_path / "drafter")
    folder = tmp_path / "notes"
    folder.mkdir()
    (folder / "README.md").write_text("not weights\n")
    for a, b in ((drafter, folder), (folder, drafter)):
        result = run_cli("compare", a, b)
        assert result.returncode == 1
        assert result.stdout == ""
        line = one_line(result)
        assert "not a checkpoint" in line and str(folder) in line
    as_json = run_cli("compare", drafter, folder, "--json")
    assert as_json.returncode == 1 and json_error(as_json)["type"] == "NotACheckpoint"


def test_compare_gives_its_verdict_as_status_and_message(tmp_path):
    specforge = write_drafter(tmp_path / "a", layout="specforge")
    speculators = write_drafter(tmp_path / "b", layout="speculators")
    result = run_cli("compare", specforge, speculators, "--json", check=0)
    report = json.loads(result.stdout)
    assert sorted(report["verdict"]) == ["message", "status"]
    assert report["verdict"]["status"] == "compatible" and report["verdict"]["message"] == report["reasons"][0]
    assert report["a"]["path"] == str(specforge) and report["b"]["format"] == "speculators"
    assert report["rows_total"] == len(report["rows"])


def test_daemon_stop_says_whether_one_was_running(agent_home):
    run_cli("jobs", "local", check=0)  # connecting starts the daemon
    pid = daemon_pid(agent_home)
    assert pid
    stopped = run_cli("daemon", "stop", "local", check=0)
    assert stopped.stdout.startswith("stopped the daemon on local (pid %d, up " % pid)
    wait_for(lambda: daemon_pid(agent_home) is None, 30, message="the daemon to go")
    again = run_cli("daemon", "stop", "local", "--json", check=0)
    answer = json.loads(again.stdout)
    assert answer["was_running"] is False and answer["host"] == "local"
    wait_for(lambda: daemon_pid(agent_home) is None, 30, message="the daemon this connection started to go")


def test_each_command_is_found_in_the_module_that_adds_it():
    """The table that lets a command import only its own area names every command where it is."""
    import argparse
    import importlib

    from tui.cli.main import AREAS, build_parser

    for module, names in AREAS:
        commands = argparse.ArgumentParser().add_subparsers()
        importlib.import_module(module).add_commands(commands)
        assert tuple(commands.choices) == names, module
    for module, names in AREAS:
        for name in names:
            parser = build_parser(name)
            assert name in parser._subparsers._group_actions[0].choices


def test_the_console_opens_the_hosts_named_else_the_fleet_of_the_config_else_this_machine(tmp_path, monkeypatch):
    from tui import config
    from tui.cli.main import COMMAND_NAMES, console_hosts, unknown_command

    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path))
    assert console_hosts([], config.fleet_hosts) == ["local"]
    config.save({"fleet": {"hosts": ["me@gpu01", "trainer"]}})
    assert console_hosts([], config.fleet_hosts) == ["me@gpu01", "trainer"]
    assert console_hosts(["b", "a", "b"], config.fleet_hosts) == ["b", "a"]
    # Several hosts are hosts, not a mistyped command; a repo among them is not a host.
    assert unknown_command(["gpu01", "me@gpu02:2222", "[fe80::1]:22", "local"], COMMAND_NAMES) is None
    assert unknown_command(["gpu01", "org/repo"], COMMAND_NAMES).startswith("unknown command 'gpu01'")


def test_a_path_or_job_that_is_not_there_exits_1_in_every_command(tmp_path, agent_home):
    # The README's rule: 1 when what was asked for is not found (inspect and compare said 2, as
    # for a path that cannot be read, while verify and logs said 1).
    missing = tmp_path / "no-such-drafter"
    drafter = write_drafter(tmp_path / "drafter")
    for args in (("inspect", missing), ("compare", missing, drafter), ("compare", drafter, missing),
                 ("inspect", "local:%s" % missing),
                 ("verify", "local:%s" % missing, "--repo", "org/repo"), ("logs", "local", "j999")):
        result = run_cli(*args)
        assert result.returncode == 1, (args, result.stderr)
        assert result.stdout == ""
        line = one_line(result)
        assert ("no-such-drafter" in line) if "j999" not in args else ("j999" in line)
    as_json = run_cli("inspect", missing, "--json")
    assert as_json.returncode == 1 and json_error(as_json) == {
        "type": "NotFound", "message": "%s does not exist" % missing}
