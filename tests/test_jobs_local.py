"""The agent on this machine (`local`): jobs, the daemon's death and return, the wire's limits."""

import json
import os
import signal
import subprocess
import sys
import threading

import pytest

from remote.jobs.processes import process_start_ticks
from remote.core.protocol import MAX_FRAME_BYTES, FrameReader, RemoteError, encode
from tests.helpers.cli import REPO_ROOT, daemon_pid, run_cli
from tests.helpers.waits import wait_for
from tui.jobs.follow import follow_job
from tui.transport.connection import open_client


def job_state(client, job_id):
    return client.call("jobs.get", {"id": job_id})


def test_job_runs_detached_and_reports_exit_code(client, agent_home, tmp_path):
    job = client.call("jobs.submit", {"argv": ["bash", "-c", "echo out; echo err >&2; exit 3"], "cwd": str(tmp_path)})
    assert job["argv"][0] == "/usr/bin/bash" or os.path.isabs(job["argv"][0])
    done = wait_for(lambda: job_state(client, job["id"])["exit_code"] is not None and job_state(client, job["id"]), 30)
    assert done["state"] == "failed" and done["exit_code"] == 3
    assert done["ended_at"] >= done["started_at"]
    tail = client.call("jobs.tail", {"id": job["id"], "offset": 0})
    assert tail["text"] == "out\nerr\n"
    # The process was alone in its session: stdin is /dev/null.
    job = client.call("jobs.submit", {"argv": ["bash", "-c", "readlink /proc/self/fd/0; ps -o sid= -p $$; echo $$"]})
    wait_for(lambda: job_state(client, job["id"])["exit_code"] == 0, 30)
    stdin, sid, pid = client.call("jobs.tail", {"id": job["id"]})["text"].split()
    assert stdin == "/dev/null"
    assert int(sid) != os.getsid(0)


def test_unknown_command_is_refused_at_submit_with_nothing_left_behind(client, agent_home):
    with pytest.raises(RemoteError) as error:
        client.call("jobs.submit", {"argv": ["huggingface-cli-not-on-path", "download", "x"]})
    assert "command not found" in error.value.message and "huggingface-cli-not-on-path" in error.value.message
    assert client.call("jobs.list")["jobs"] == []


def test_executable_resolved_with_the_login_path(client, agent_home, tmp_path, monkeypatch):
    # A tool that only the login shell's PATH knows (as a venv activated in ~/.profile would be).
    bin_dir = tmp_path / "venv-bin"
    bin_dir.mkdir()
    tool = bin_dir / "my-tool"
    tool.write_text("#!/bin/sh\necho tool ran\n")
    tool.chmod(0o755)
    job = client.call("jobs.submit", {"argv": ["my-tool"], "env": {"PATH": "%s:/usr/bin:/bin" % bin_dir}})
    assert job["argv"] == [str(tool)]
    wait_for(lambda: job_state(client, job["id"])["exit_code"] == 0, 30)


def test_tail_from_the_end_never_reads_the_whole_log(client, agent_home):
    job = client.call("jobs.submit", {"argv": ["bash", "-c", "for i in $(seq 1 20000); do echo line $i; done"]})
    wait_for(lambda: job_state(client, job["id"])["exit_code"] == 0, 30)
    tail = client.call("jobs.tail", {"id": job["id"], "offset": -100, "max_bytes": 1000})
    lines = tail["text"].splitlines()
    assert lines[-1] == "line 20000"
    assert lines[0].startswith("line ") and len(tail["text"]) <= 100  # starts on a whole line
    window = client.call("jobs.tail", {"id": job["id"], "offset": 0, "max_bytes": 50})
    assert len(window["text"]) == 50 and window["next_offset"] == 50 and window["size"] > 100000


def test_stop_terms_the_group_then_kills_after_grace(client, agent_home):
    # A job that ignores TERM, with a child in the same group.
    job = client.call("jobs.submit", {"argv": ["bash", "-c", "trap '' TERM; sleep 300 & echo started; wait"]})
    wait_for(lambda: "started" in client.call("jobs.tail", {"id": job["id"]})["text"], 30)
    pid = job_state(client, job["id"])["pid"]
    stopped = client.call("jobs.stop", {"id": job["id"], "grace_s": 1})
    assert stopped["process_state"] in ("running", "stopped")
    final = wait_for(lambda: job_state(client, job["id"])["state"] == "stopped" and job_state(client, job["id"]), 30)
    assert final["signal"] == signal.SIGKILL
    assert process_start_ticks(pid) is None  # gone, or a zombie waiting for init to reap it


def test_a_wait_follows_the_job_events_to_the_end(client, agent_home, tmp_path):
    """What `stop --wait`, `download --wait`, bench and coverage wait with: each change of the
    job as the host tells it, then the job as it ended (a change before the wait began is in
    the stream's first snapshot, not missed)."""
    go = tmp_path / "go"
    job = client.call("jobs.submit", {"argv": ["bash", "-c", "while [ ! -e %s ]; do sleep 0.05; done; exit 4" % go]})
    seen = []
    waiter = threading.Thread(target=lambda: seen.append(follow_job(client, job, on_change=seen.append)))
    waiter.start()
    wait_for(lambda: seen, 30, message="the stream's first snapshot")
    go.touch()
    waiter.join(60)
    ended = seen[-1]
    assert ended["id"] == job["id"] and ended["state"] == "failed" and ended["exit_code"] == 4
    assert ended == client.call("jobs.get", {"id": job["id"]})
    assert all(change["exit_code"] is None for change in seen[:-2])  # nothing ended before the end


def test_unknown_job_id_is_a_clear_error(client, agent_home):
    with pytest.raises(RemoteError) as error:
        client.call("jobs.get", {"id": "j404"})
    assert error.value.type == "NotFound" and "j404" in error.value.message
    result = run_cli("logs", "local", "j404")
    assert result.returncode == 1 and result.stderr.strip() == "specdeck: no job j404 on this host"


def test_daemon_killed_job_survives_and_is_readopted(agent_home):
    client = open_client("local")
    job = client.call("jobs.submit", {"argv": ["bash", "-c", "for i in $(seq 1 400); do echo tick $i; sleep 0.05; done"]})
    ender = client.call("jobs.submit", {"argv": ["bash", "-c", "sleep 1.5; exit 7"]})
    wait_for(lambda: job_state(client, job["id"])["state"] == "running", 30)
    pid = job_state(client, job["id"])["pid"]
    first_daemon = daemon_pid(agent_home)
    os.kill(first_daemon, signal.SIGKILL)
    wait_for(lambda: not os.path.exists("/proc/%d" % first_daemon) or open("/proc/%d/stat" % first_daemon).read().split()[2] == "Z", 10)
    client.close()
    size_before = os.path.getsize(agent_home / "jobs" / job["id"] / "output.log")
    # While no daemon runs: the job goes on writing, and the other ends with its code.
    wait_for(lambda: os.path.getsize(agent_home / "jobs" / job["id"] / "output.log") > size_before, message="the log to grow with no daemon")
    assert os.path.exists("/proc/%d" % pid)

    client = open_client("local")  # starts a new daemon
    assert daemon_pid(agent_home) != first_daemon
    readopted = job_state(client, job["id"])
    assert readopted["state"] == "running" and readopted["pid"] == pid
    ended = wait_for(lambda: job_state(client, ender["id"])["exit_code"] is not None and job_state(client, ender["id"]), 30)
    assert ended["exit_code"] == 7 and ended["state"] == "failed"
    client.call("jobs.stop", {"id": job["id"], "grace_s": 1})
    assert wait_for(lambda: job_state(client, job["id"])["state"] == "stopped", 30)
    client.close()


def test_recycled_pid_is_not_taken_for_the_job(agent_home, client):
    job = client.call("jobs.submit", {"argv": ["sleep", "300"]})
    wait_for(lambda: job_state(client, job["id"])["state"] == "running", 30)
    run_path = agent_home / "jobs" / job["id"] / "run.json"
    run = json.loads(run_path.read_text())
    # Pretend the supervisor's pid now belongs to another process: same pid, other start time.
    # The supervisor goes first: killed after its job, it could still write how the job ended.
    os.kill(run["supervisor_pid"], signal.SIGKILL)
    os.kill(run["pid"], signal.SIGKILL)
    run["supervisor_pid"] = os.getpid()
    run_path.write_text(json.dumps(run))
    assert job_state(client, job["id"])["state"] == "lost"


def relay(agent_home):
    env = dict(os.environ, PYTHONPATH=str(REPO_ROOT))
    return subprocess.Popen([sys.executable, "-m", "remote", "relay"], stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env)


def test_malformed_and_oversized_frames_do_not_kill_a_session(agent_home):
    process = relay(agent_home)
    frames = FrameReader(lambda n: os.read(process.stdout.fileno(), n))
    assert next(frames)["type"] == "hello"
    process.stdin.write(b"this is not json\n")
    process.stdin.write(b"[1, 2, 3]\n")
    process.stdin.write(b'{"id": 1, "method": 12}\n')
    process.stdin.write(b"x" * (MAX_FRAME_BYTES + 1000) + b"\n")
    process.stdin.write(encode({"id": 2, "method": "ping"}))
    process.stdin.write(encode({"id": 3, "method": "no.such.method"}))
    process.stdin.flush()
    seen = {}
    while 2 not in seen or 3 not in seen or 1 not in seen:
        frame = next(frames)
        if "id" in frame:
            seen[frame["id"]] = frame
    assert seen[1]["ok"] is False and seen[1]["error"]["type"] == "BadRequest"
    assert seen[2]["ok"] is True
    assert seen[3]["error"]["type"] == "UnknownMethod"
    process.stdin.close()
    process.wait(timeout=10)


def test_daemon_socket_is_private(agent_home, client):
    sock = agent_home / "daemon.sock"
    assert (sock.stat().st_mode & 0o777) == 0o600
    assert (agent_home.stat().st_mode & 0o777) == 0o700


def test_log_windows_never_split_a_character(client, agent_home):
    # 3-byte characters, read in windows whose size is not a multiple of 3: joined, the
    # windows give back the text exactly (a split character would come back as U+FFFD).
    job = client.call("jobs.submit", {"argv": ["bash", "-c", "printf '€%.0s' $(seq 1 1000)"]})
    wait_for(lambda: job_state(client, job["id"])["exit_code"] == 0, 30)
    text, offset = "", 0
    while True:
        window = client.call("jobs.tail", {"id": job["id"], "offset": offset, "max_bytes": 100})
        text += window["text"]
        if window["next_offset"] >= window["size"]:
            break
        offset = window["next_offset"]
    assert text == "€" * 1000


def test_protocol_mismatch_is_a_clear_error(agent_home, monkeypatch):
    import tui.transport.client
    from tui.transport.client import ConnectError

    monkeypatch.setattr(tui.transport.client, "PROTOCOL_VERSION", 99)
    with pytest.raises(ConnectError) as error:
        open_client("local")
    assert "speaks protocol 1, this console speaks 99" in str(error.value)


def test_list_by_kind(client, agent_home):
    plain = client.call("jobs.submit", {"argv": ["true"]})
    server = client.call("jobs.submit", {"argv": ["true"], "kind": "server"})
    assert [j["id"] for j in client.call("jobs.list", {"kind": "server"})["jobs"]] == [server["id"]]
    assert [j["id"] for j in client.call("jobs.list")["jobs"]] == [plain["id"], server["id"]]


def test_a_negative_tail_is_a_usage_line_not_a_hang(agent_home):
    result = run_cli("logs", "local", "j1", "--follow", "--tail=-99999999999999999999", timeout=30, check=2)
    assert "--tail" in result.stderr and "Traceback" not in result.stderr


@pytest.mark.parametrize("command", [["run", "local", "--env", "NOEQUALS", "--", "true"],
                                     ["train", "local", "--env", "NOEQUALS", "--", "true"]])
def test_an_env_entry_without_equals_is_one_usage_line(agent_home, command):
    result = run_cli(*command, timeout=60, check=2)
    assert result.stderr.strip() == "specdeck: --env wants KEY=VALUE: env entry 'NOEQUALS' is not KEY=VALUE"
