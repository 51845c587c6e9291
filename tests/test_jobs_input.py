"""Input a submit refuses in one line, with nothing made on the host: argv and environment over
the kernel's limit for exec (which used to be accepted and fail at exec), and a byte that is not
UTF-8 in argv, env or cwd (which used to read "the link to the host dropped" and cost the link),
named by field, from the CLI, from a client in this process, and on the raw wire."""

import os
import socket
import subprocess
import sys

import pytest

from remote.core.protocol import FrameReader, RemoteError
from tests.helpers.cli import REPO_ROOT
from tests.helpers.waits import wait_for

ARG_MAX = os.sysconf("SC_ARG_MAX")
ONE_ARG_MAX = 32 * 4096  # the kernel's limit for one argument (MAX_ARG_STRLEN)


def nothing_made(client, agent_home):
    return client.call("jobs.list")["jobs"] == [] and os.listdir(agent_home / "jobs") == []


TOO_LONG = {
    # Each argument fits; together they are over ARG_MAX.
    "argv-over-arg-max": ({"argv": ["true"] + ["a" * (ONE_ARG_MAX - 1)] * (ARG_MAX // ONE_ARG_MAX + 1)}, "ARG_MAX"),
    # A short argv with an environment that is over it: the kernel counts both.
    "env-over-arg-max": ({"argv": ["true"], "env": {"BIG%d" % i: "e" * (ONE_ARG_MAX - 16) for i in range(ARG_MAX // ONE_ARG_MAX + 1)}}, "ARG_MAX"),
    "one-argument-too-long": ({"argv": ["echo", "a" * ONE_ARG_MAX]}, "argv item 1"),
}


@pytest.mark.parametrize("case", sorted(TOO_LONG))
def test_argv_and_environment_over_the_kernels_limit_are_refused_at_submit(client, agent_home, case):
    params, expected = TOO_LONG[case]
    with pytest.raises(RemoteError) as error:
        client.call("jobs.submit", params)
    assert error.value.type == "BadRequest" and expected in error.value.message, error.value.message
    assert len(error.value.message.splitlines()) == 1
    assert nothing_made(client, agent_home)


def test_a_command_line_just_within_the_limit_runs(client, agent_home):
    # Half of ARG_MAX in arguments (the login environment takes some of the rest): exec takes it.
    count = ARG_MAX // 2 // ONE_ARG_MAX
    job = client.call("jobs.submit", {"argv": ["true"] + ["a" * (ONE_ARG_MAX - 1)] * count})
    done = wait_for(lambda: (lambda j: j["exit_code"] is not None and j)(client.call("jobs.get", {"id": job["id"]})), 30)
    assert done["exit_code"] == 0 and done["error"] is None


def cli_bytes(*args):
    """`specdeck ARGS` with byte arguments, as a shell passes a name that is not UTF-8."""
    env = {k: v for k, v in os.environ.items() if k != "SSH_AUTH_SOCK"}
    env["PYTHONPATH"] = str(REPO_ROOT)
    return subprocess.run([sys.executable.encode(), b"-m", b"tui.cli"] + list(args), capture_output=True, env=env,
                          cwd=str(REPO_ROOT), timeout=120)


NOT_UTF8 = {
    "argv": ((b"run", b"local", b"--", b"echo", b"caf\xe9"), "argv[1]"),
    "env": ((b"run", b"local", b"--env", b"GREETING=caf\xe9", b"--", b"true"), "env[GREETING]"),
    "cwd": ((b"run", b"local", b"--cwd", b"/tmp/caf\xe9", b"--", b"true"), "cwd"),
}


@pytest.mark.parametrize("field", sorted(NOT_UTF8))
def test_a_byte_that_is_not_utf8_is_one_line_naming_the_field(client, agent_home, field):
    args, name = NOT_UTF8[field]
    result = cli_bytes(*args)
    stderr = result.stderr.decode("utf-8", "replace")
    assert result.returncode != 0 and stderr.count("\n") == 1, stderr
    assert name in stderr and "not UTF-8" in stderr and "\\xe9" in stderr, stderr
    assert "dropped" not in stderr
    assert nothing_made(client, agent_home)


def test_a_client_keeps_its_link_after_refusing_a_request_that_is_not_utf8(client, agent_home):
    with pytest.raises(RemoteError) as error:
        client.call("jobs.submit", {"argv": ["echo", "caf\udce9"]})  # what os.fsdecode makes of b"caf\xe9"
    assert error.value.type == "BadRequest" and "argv[1]" in error.value.message
    assert client.state == "connected" and client.call("ping") is not None
    assert nothing_made(client, agent_home)


def raw_call(agent_home, payload):
    """One request sent as raw bytes on the daemon's socket; its reply frame."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.settimeout(60)
        sock.connect(str(agent_home / "daemon.sock"))
        frames = FrameReader(sock.recv)
        next(frames)  # hello
        sock.sendall(payload)
        return next(frames)


@pytest.mark.parametrize("params, field", [
    (b'{"argv": ["echo", "caf\\udce9"]}', "argv item 1"),
    (b'{"argv": ["true"], "env": {"GREETING": "caf\\udce9"}}', "the value of GREETING"),
    (b'{"argv": ["true"], "cwd": "/tmp/caf\\udce9"}', "working directory"),
])
def test_the_daemon_names_the_field_of_a_lone_surrogate(client, agent_home, params, field):
    """A client that escapes the byte in JSON (\\udce9) gets past the encoder: the daemon refuses it."""
    reply = raw_call(agent_home, b'{"id": 7, "method": "jobs.submit", "params": ' + params + b"}\n")
    assert reply["ok"] is False and reply["error"]["type"] == "BadRequest", reply
    assert field in reply["error"]["message"] and "not UTF-8" in reply["error"]["message"]
    assert nothing_made(client, agent_home)
