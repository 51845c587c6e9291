"""Jobs that always stop, clean job environments, bad input refused: the agent on this machine
(`local`), real processes, a real tmpfs for the full disk."""

import json
import math
import os
import signal
import subprocess
import sys
import time

import pytest

from remote.core.words import LIVE_STATES as LIVE
from remote.core.protocol import RemoteError
from remote.jobs.processes import process_start_ticks
from tests.helpers.cli import daemon_pid, run_cli, use_home
from tests.helpers.waits import wait_for
from tui.transport.connection import open_client



def get(client, job_id):
    return client.call("jobs.get", {"id": job_id})


def log_text(client, job_id):
    return client.call("jobs.tail", {"id": job_id})["text"]


def wait_ended(client, job_id, timeout_s=30):
    return wait_for(lambda: (lambda job: job["process_state"] not in LIVE and job)(get(client, job_id)), timeout_s)


def alive(pids):
    """Those of (pid, start_ticks) still running (a zombie counts as gone: it runs nothing)."""
    return [pid for pid, ticks in pids if process_start_ticks(pid) == ticks]


def started_pids(client, job_id):
    """The pids a job printed as `pid N` lines (its main process included), with start times."""
    wait_for(lambda: "ready" in log_text(client, job_id), 30)
    pids = [int(line.split()[1]) for line in log_text(client, job_id).splitlines() if line.startswith("pid ")]
    pids.append(get(client, job_id)["pid"])
    return [(pid, process_start_ticks(pid)) for pid in pids]


def kill_all(pids):
    for pid in alive(pids):
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


DAEMONISE = """
import os, signal, time
r, w = os.pipe()
if os.fork() == 0:
    os.setsid()
    if os.fork() == 0:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        os.write(w, b"%d" % os.getpid())
        time.sleep(300)
    os._exit(0)
os.wait()
print("pid", os.read(r, 64).decode(), flush=True)
print("ready", flush=True)
time.sleep(300)
"""

ESCAPES = {
    # The main process exits 0 on TERM; its child (same group) ignores TERM.
    "term-ignoring-child": ["bash", "-c", "trap 'exit 0' TERM; (trap '' TERM; echo pid $BASHPID; echo ready; exec sleep 300) & while :; do sleep 0.1; done"],
    # A child in a session of its own: TERM to the job's group never reaches it.
    "setsid-child": ["bash", "-c", "setsid sh -c 'echo pid $$; echo ready; exec sleep 300' & wait"],
    # A daemon: double fork, new session, parent gone (reparented), TERM ignored.
    "double-forked-daemon": [sys.executable, "-c", DAEMONISE],
}


@pytest.mark.parametrize("case", sorted(ESCAPES))
def test_stop_leaves_no_process_of_the_job(client, case):
    job = client.call("jobs.submit", {"argv": ESCAPES[case]})
    pids = started_pids(client, job["id"])
    try:
        assert len(alive(pids)) == len(pids) >= 2
        client.call("jobs.stop", {"id": job["id"], "grace_s": 1})
        ended = wait_ended(client, job["id"])
        left = alive(pids)
        print("%s: processes left after stop: %d" % (case, len(left)))
        assert left == []
        assert ended["state"] == "stopped"
    finally:
        kill_all(pids)


def test_processes_left_running_by_an_ended_job_are_stopped(client):
    """A job ends with its last process: what its main process left running in the background
    (one of them deaf to TERM) is stopped, and the job keeps the main process's exit code."""
    script = "sleep 300 & echo pid $!; (trap '' TERM; exec sleep 300) & echo pid $!; echo ready; sleep 3; exit 3"
    job = client.call("jobs.submit", {"argv": ["bash", "-c", script]})
    wait_for(lambda: "ready" in log_text(client, job["id"]), 30)
    pids = [int(line.split()[1]) for line in log_text(client, job["id"]).splitlines() if line.startswith("pid ")]
    pids = [(pid, process_start_ticks(pid)) for pid in pids]
    try:
        assert len(pids) == 2 and all(ticks is not None for _, ticks in pids), "read while the main process still ran"
        ended = wait_ended(client, job["id"])
        assert alive(pids) == []
        assert ended["state"] == "failed" and ended["exit_code"] == 3
        assert "stopping the 2 processes it left running" in log_text(client, job["id"])
    finally:
        kill_all(pids)


def test_pending_kill_survives_the_daemon(client, agent_home):
    job = client.call("jobs.submit", {"argv": ["bash", "-c", "trap '' TERM; sleep 300 & echo pid $!; echo ready; wait"]})
    pids = started_pids(client, job["id"])
    try:
        client.call("jobs.stop", {"id": job["id"], "grace_s": 3})
        os.kill(daemon_pid(agent_home), signal.SIGKILL)
        time.sleep(1.0)
        assert len(alive(pids)) == 2  # TERM ignored: the grace is still running
        wait_for(lambda: not alive(pids), 30)
        client.close()
        client = open_client("local")  # a new daemon
        assert get(client, job["id"])["state"] == "stopped"
    finally:
        kill_all(pids)
        client.close()


def test_a_stopping_job_never_reads_lost(client, agent_home):
    for _ in range(3):
        job = client.call("jobs.submit", {"argv": ["bash", "-c", "trap '' TERM; sleep 300 & echo ready; wait"]})
        wait_for(lambda: "ready" in log_text(client, job["id"]), 30)
        client.call("jobs.stop", {"id": job["id"], "grace_s": 0.5})
        states = []
        while True:
            seen = get(client, job["id"])
            states.append(seen["state"])
            if seen["process_state"] not in LIVE:
                break
            time.sleep(0.01)
        assert "lost" not in states and states[-1] == "stopped", states
        assert "stopping" in states
    job = client.call("jobs.submit", {"argv": ["bash", "-c", "trap '' TERM; sleep 300 & echo ready; wait"]})
    wait_for(lambda: "ready" in log_text(client, job["id"]), 30)
    for grace in (math.nan, math.inf, -1):
        with pytest.raises(RemoteError) as error:
            client.call("jobs.stop", {"id": job["id"], "grace_s": grace})
        assert error.value.type == "BadRequest"
    result = run_cli("stop", "local", job["id"], "--wait", "--grace", "2", check=0)
    assert result.stdout.strip() == "%s stopped" % job["id"]


BAD_SUBMITS = {
    "env-name-with-equals": ({"argv": ["true"], "env": {"A=B": "x"}}, "A=B"),
    "env-name-empty": ({"argv": ["true"], "env": {"": "x"}}, "empty"),
    "env-name-with-nul": ({"argv": ["true"], "env": {"A\0B": "x"}}, "NUL"),
    "env-value-with-nul": ({"argv": ["true"], "env": {"A": "x\0y"}}, "NUL"),
    "argv-item-with-nul": ({"argv": ["echo", "a\0b"]}, "NUL"),
    "python-with-nul": ({"argv": ["x.py"], "python": "pyth\0on"}, "NUL"),
    "cwd-a-file": ({"argv": ["true"], "cwd": "/etc/hostname"}, "not a directory"),
    "cwd-missing": ({"argv": ["true"], "cwd": "/no/such/dir"}, "does not exist"),
}


@pytest.mark.parametrize("case", sorted(BAD_SUBMITS))
def test_bad_input_refused_at_submit_with_nothing_left(client, agent_home, case):
    params, expected = BAD_SUBMITS[case]
    with pytest.raises(RemoteError) as error:
        client.call("jobs.submit", params)
    assert error.value.type == "BadRequest" and expected in error.value.message
    assert len(error.value.message.splitlines()) == 1
    assert client.call("jobs.list")["jobs"] == [] and os.listdir(agent_home / "jobs") == []


@pytest.fixture
def small_jobs_disk(agent_home):
    """SPECDECK_HOME/jobs on a 1 MiB tmpfs."""
    jobs = agent_home / "jobs"
    jobs.mkdir()
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m,mode=0700", "tmpfs", str(jobs)], capture_output=True, text=True)
    if mounted.returncode != 0:
        pytest.skip("cannot mount a tmpfs here: %s" % mounted.stderr.strip())
    yield jobs
    subprocess.run(["umount", "-l", str(jobs)], check=False)


def fill(directory):
    with open(os.path.join(directory, "filler"), "wb", buffering=0) as f:
        try:
            while True:
                f.write(b"\0" * 4096)
        except OSError:
            pass


def test_disk_full_keeps_the_exit_code_and_refuses_a_submit_cleanly(small_jobs_disk, client, tmp_path):
    go = tmp_path / "go"
    job = client.call("jobs.submit", {"argv": ["bash", "-c", "echo ready; while [ ! -e %s ]; do sleep 0.05; done; exit 5" % go]})
    wait_for(lambda: "ready" in log_text(client, job["id"]), 30)
    fill(small_jobs_disk)
    before = sorted(os.listdir(small_jobs_disk))
    with pytest.raises(RemoteError) as error:
        client.call("jobs.submit", {"argv": ["true"]})
    assert error.value.type == "NoSpace" and len(error.value.message.splitlines()) == 1
    assert sorted(os.listdir(small_jobs_disk)) == before  # no half job directory
    result = run_cli("run", "local", "--", "true")
    assert result.returncode == 2 and result.stderr.count("\n") == 1 and "no space" in result.stderr.lower(), result.stderr
    go.touch()
    ended = wait_ended(client, job["id"])
    assert ended["exit_code"] == 5 and ended["state"] == "failed"
    assert [name for name in os.listdir(small_jobs_disk / job["id"]) if "tmp" in name] == []
    os.unlink(small_jobs_disk / "filler")
    again = client.call("jobs.submit", {"argv": ["true"]})
    assert wait_ended(client, again["id"])["exit_code"] == 0


def test_a_malformed_job_directory_is_skipped_and_noted_once(client, agent_home):
    good = client.call("jobs.submit", {"argv": ["true"]})
    wait_ended(client, good["id"])
    jobs = agent_home / "jobs"
    for name, text in (("j2", "[1, 2]"), ("j3", "garbage{"), ("jfoo", "{}"), ("j\u00b2", "{}")):
        (jobs / name).mkdir()
        (jobs / name / "job.json").write_text(text)
    (jobs / "j4").write_text("a file, not a directory")
    assert [job["id"] for job in client.call("jobs.list")["jobs"]] == [good["id"]]
    new = client.call("jobs.submit", {"argv": ["true"]})
    assert new["id"] not in ("j1", "j2", "j3", "j4")
    time.sleep(1.5)  # three polls of the job watcher
    assert [job["id"] for job in client.call("jobs.list")["jobs"]] == [good["id"], new["id"]]
    log = (agent_home / "daemon.log").read_text()
    notes = [line for line in log.splitlines() if "skipped" in line and "job" in line]
    assert sum(" j2 " in line or " j2:" in line for line in notes) == 1, notes
    assert sum(" j3 " in line or " j3:" in line for line in notes) == 1, notes


def test_forget_removes_ended_jobs_only(client, agent_home, tmp_path):
    events = []
    client.subscribe("jobs.events", {}, lambda data, seq: events.extend(data.get("records") or []))
    ended = client.call("jobs.submit", {"argv": ["true"]})
    wait_ended(client, ended["id"])
    running = client.call("jobs.submit", {"argv": ["sleep", "300"]})
    wait_for(lambda: get(client, running["id"])["state"] == "running", 30)
    with pytest.raises(RemoteError) as error:
        client.call("jobs.forget", {"ids": [ended["id"], running["id"]]})
    assert error.value.type == "BadRequest" and running["id"] in error.value.message
    assert (agent_home / "jobs" / ended["id"]).is_dir()  # nothing removed when one is refused
    result = run_cli("forget", "local", running["id"])
    assert result.returncode == 2 and result.stderr.count("\n") == 1 and running["id"] in result.stderr
    assert client.call("jobs.forget", {"ids": [ended["id"]]}) == {"forgotten": [ended["id"]], "not_found": []}
    assert not (agent_home / "jobs" / ended["id"]).exists()
    assert [job["id"] for job in client.call("jobs.list")["jobs"]] == [running["id"]]
    wait_for(lambda: any(r["event"] == "removed" and r["id"] == ended["id"] for r in events), 30)
    client.call("jobs.stop", {"id": running["id"], "grace_s": 1})
    wait_ended(client, running["id"])
    result = run_cli("forget", "local", running["id"], "--json", check=0)
    assert json.loads(result.stdout) == {"forgotten": [running["id"]], "not_found": []}
    assert client.call("jobs.list")["jobs"] == []
    # A forgotten id is never given to a new job (a console may still show the old one).
    assert client.call("jobs.submit", {"argv": ["true"]})["id"] not in (ended["id"], running["id"])


def test_verify_of_a_missing_directory_makes_no_job(client, tmp_path):
    with pytest.raises(RemoteError) as error:
        client.call("download.verify", {"repo": "org/model", "local_dir": str(tmp_path / "not-there")})
    assert error.value.type in ("BadRequest", "NotFound") and "not-there" in error.value.message
    assert client.call("jobs.list")["jobs"] == []


def test_a_job_gets_the_login_environment_not_the_daemons(agent_home, tmp_path, monkeypatch):
    home = tmp_path / "user-home"
    home.mkdir()
    (home / ".profile").write_text("export SPECDECK_PROFILE_VAR=from-profile\n")
    use_home(monkeypatch, home)
    monkeypatch.setenv("SPECDECK_TEST_LEAK", "1")
    monkeypatch.setenv("HF_TOKEN", "secret")
    client = open_client("local")  # the daemon starts with this environment
    try:
        job = client.call("jobs.submit", {"argv": ["env"], "env": {"REQUEST_VAR": "asked for"}})
        wait_ended(client, job["id"])
        seen = dict(line.split("=", 1) for line in log_text(client, job["id"]).splitlines() if "=" in line)
        assert seen["SPECDECK_PROFILE_VAR"] == "from-profile" and seen["REQUEST_VAR"] == "asked for"
        assert "SPECDECK_TEST_LEAK" not in seen and "HF_TOKEN" not in seen
        assert "secret" not in log_text(client, job["id"])
        assert seen["HOME"] == str(home)
        # A change to ~/.profile counts at the next submit.
        (home / ".profile").write_text("export SPECDECK_PROFILE_VAR=changed\n")
        job = client.call("jobs.submit", {"argv": ["env"]})
        wait_ended(client, job["id"])
        assert "SPECDECK_PROFILE_VAR=changed\n" in log_text(client, job["id"])
    finally:
        client.close()


def test_jobs_readopted_after_the_daemon_is_killed(client, agent_home):
    count = 8
    jobs = [client.call("jobs.submit", {"argv": ["bash", "-c", "echo ready; sleep 2; exit %d" % code]}) for code in range(count)]
    for job in jobs:
        wait_for(lambda: "ready" in log_text(client, job["id"]), 30)
    os.kill(daemon_pid(agent_home), signal.SIGKILL)
    client.close()
    client = open_client("local")
    try:
        ended = [wait_ended(client, job["id"]) for job in jobs]
        readopted = sum(job["exit_code"] == code for code, job in enumerate(ended))
        print("re-adopted with the right exit code: %d of %d" % (readopted, count))
        assert readopted == count
    finally:
        client.close()


def test_forget_on_a_full_disk_never_gives_an_id_again(small_jobs_disk, client, agent_home):
    first, second = (client.call("jobs.submit", {"argv": ["true"]}) for _ in range(2))
    for job in (first, second):
        wait_ended(client, job["id"])
    fill(small_jobs_disk)
    # The counter was kept at each submit, in place: forgetting the newest job on a full disk
    # needs no new block, and its id is not given again.
    assert client.call("jobs.forget", {"ids": [second["id"]]}) == {"forgotten": [second["id"]], "not_found": []}
    os.unlink(small_jobs_disk / "filler")
    third = client.call("jobs.submit", {"argv": ["true"]})
    assert int(third["id"][1:]) > int(second["id"][1:])
    wait_ended(client, third["id"])
    # A tree whose counter an older agent never wrote, on a full disk: forget refuses as a
    # whole (NoSpace, one line) rather than remove the job whose id would then come back.
    os.unlink(small_jobs_disk / ".last-id")
    fill(small_jobs_disk)
    before = sorted(os.listdir(small_jobs_disk))
    with pytest.raises(RemoteError) as error:
        client.call("jobs.forget", {"ids": [first["id"], third["id"]]})
    assert error.value.type == "NoSpace" and len(error.value.message.splitlines()) == 1
    assert "nothing was forgotten" in error.value.message
    assert sorted(os.listdir(small_jobs_disk)) == before
    assert [job["id"] for job in client.call("jobs.list")["jobs"]] == [first["id"], third["id"]]
    os.unlink(small_jobs_disk / "filler")
    assert client.call("jobs.forget", {"ids": [first["id"], third["id"]]})["forgotten"] == [first["id"], third["id"]]
    fourth = client.call("jobs.submit", {"argv": ["true"]})
    assert int(fourth["id"][1:]) > int(third["id"][1:])
