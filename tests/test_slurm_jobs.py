"""Jobs through a real Slurm (tests/slurm_fixtures.py), as users drive them: `specdeck run HOST
--slurm` over a real sshd, the job's Slurm id, nodes, pending reason, exit code and log as
Slurm has them, stop (scancel: TERM, KILL after the grace), the daemon killed while a Slurm job
runs, the user's own sbatch job listed and cancelled, and the refusals in one line."""

import json
import os
import signal
import subprocess
import sys

from tests.helpers.cli import REPO_ROOT, daemon_pid, run_cli, ssh_config_env
from tests.helpers.waits import wait_for


def cli(laptop, host_python, command, host, *args, check=None):
    """`specdeck COMMAND HOST --python PY ARGS`: the agent's interpreter before any `--`."""
    return run_cli(command, host, "--python", host_python, *args, home=laptop, check=check)


def jobs(laptop, host_python):
    return {job["id"]: job for job in json.loads(cli(laptop, host_python, "jobs", "gpuhost", "--json", check=0).stdout)}


def job(laptop, host_python, job_id):
    return jobs(laptop, host_python).get(job_id)


def submit(laptop, host_python, *args):
    reply = cli(laptop, host_python, "run", "gpuhost", "--slurm", "--json", *args, check=0)
    return json.loads(reply.stdout)


def ended(laptop, host_python, job_id):
    found = job(laptop, host_python, job_id)
    return found if found and found["process_state"] not in ("starting", "running") else None


def job_dirs(host_user):
    root = host_user.home / ".cache" / "specdeck" / "jobs"
    return sorted(p.name for p in root.iterdir() if p.name.startswith("j")) if root.exists() else []


def test_a_slurm_job_runs_on_both_nodes_and_says_so(slurm_host, laptop, host_user, host_python):
    # Arguments a shell would expand or split come out as they were typed: the script quotes them.
    submitted = submit(laptop, host_python, "--nodes", "2", "--", "sh", "-c", 'echo "got: $1"; srun -l printenv SLURMD_NODENAME', "sh",
                       "it's $(id) and `uname` ; exit 9")
    assert submitted["id"].startswith("j") and submitted["slurm_id"].isdigit()
    done = wait_for(lambda: ended(laptop, host_python, submitted["id"]), message="the Slurm job ended")
    assert done["state"] == "succeeded" and done["exit_code"] == 0 and done["signal"] is None
    assert (done["engine"], done["slurm_id"], done["nodes"], done["foreign"], done["pending_reason"]) == ("slurm", submitted["slurm_id"], ["n1", "n2"], False, None)
    assert slurm_host.job(submitted["slurm_id"])["JobState"] == "COMPLETED"
    log = cli(laptop, host_python, "logs", "gpuhost", submitted["id"], check=0).stdout
    assert "got: it's $(id) and `uname` ; exit 9\n" in log
    assert sorted(line for line in log.splitlines() if line[:3] in ("0: ", "1: ")) == ["0: n1", "1: n2"]
    table = cli(laptop, host_python, "jobs", "gpuhost", check=0).stdout
    assert "%s (slurm %s)" % (submitted["id"], submitted["slurm_id"]) in table


def test_a_non_zero_exit_is_the_jobs_code_and_a_local_job_says_local(slurm_host, laptop, host_python):
    # The job is told its id and directory, as a local job is (a job's own progress file goes there).
    submitted = submit(laptop, host_python, "--", "sh", "-c", 'echo on the way out $SPECDECK_JOB_ID "$SPECDECK_JOB_DIR"; exit 3')
    done = wait_for(lambda: ended(laptop, host_python, submitted["id"]), message="the Slurm job ended")
    assert (done["state"], done["exit_code"], done["signal"]) == ("failed", 3, None)
    follow = cli(laptop, host_python, "logs", "gpuhost", submitted["id"], "--follow")
    assert follow.stdout.startswith("on the way out %s /" % submitted["id"])
    assert follow.stdout.rstrip().endswith("/jobs/%s" % submitted["id"])
    assert follow.returncode == 1 and follow.stderr.strip().endswith("%s exited 3" % submitted["id"])
    local = json.loads(cli(laptop, host_python, "run", "gpuhost", "--json", "--", "true", check=0).stdout)["id"]
    mine = job(laptop, host_python, local)
    assert (mine["engine"], mine["slurm_id"], mine["nodes"], mine["pending_reason"], mine["foreign"]) == ("local", None, [], None, False)


def test_a_held_job_is_pending_with_slurms_reason_and_a_stop_takes_it_out_of_the_queue(slurm_host, laptop, host_python):
    submitted = submit(laptop, host_python, "--sbatch-arg=--hold", "--", "sleep", "1000")
    pending = wait_for(lambda: (job(laptop, host_python, submitted["id"]) or {}).get("pending_reason") and job(laptop, host_python, submitted["id"]),
                       message="the pending reason")
    assert (pending["state"], pending["pending_reason"], pending["nodes"]) == ("pending", "JobHeldUser", [])
    assert "pending: JobHeldUser" in cli(laptop, host_python, "jobs", "gpuhost", check=0).stdout
    stopped = json.loads(cli(laptop, host_python, "stop", "gpuhost", submitted["id"], "--wait", "--json", check=0).stdout)
    assert stopped["state"] == "stopped"
    assert slurm_host.job(submitted["slurm_id"])["JobState"] == "CANCELLED"


def test_a_job_waiting_for_cpus_says_resources_then_runs(slurm_host, laptop, host_python):
    # Both nodes' CPUs taken by one job: the next one waits for Resources until that one is stopped.
    first = submit(laptop, host_python, "--nodes", "2", "--sbatch-arg=--cpus-per-task=2", "--", "sleep", "1000")
    wait_for(lambda: (job(laptop, host_python, first["id"]) or {}).get("state") == "running", message="the first job running %s" % first)
    second = submit(laptop, host_python, "--sbatch-arg=--cpus-per-task=2", "--", "echo", "my turn")
    waiting = wait_for(lambda: (job(laptop, host_python, second["id"]) or {}).get("pending_reason") == "Resources" and job(laptop, host_python, second["id"]),
                       message="the second job pending for Resources")
    assert waiting["state"] == "pending"
    cli(laptop, host_python, "stop", "gpuhost", first["id"], "--wait", check=0)
    done = wait_for(lambda: ended(laptop, host_python, second["id"]), message="the second job ran")
    assert done["state"] == "succeeded" and done["nodes"] and done["pending_reason"] is None


def test_stop_sends_term_and_a_job_that_ignores_it_is_killed_after_the_grace(slurm_host, laptop, host_python):
    obeys = submit(laptop, host_python, "--", "sh", "-c", "echo up; exec sleep 1000")
    ignores = submit(laptop, host_python, "--", "sh", "-c", "trap 'echo got TERM' TERM; echo up; while :; do sleep 0.1; done")
    for submitted in (obeys, ignores):
        wait_for(lambda: "up" in cli(laptop, host_python, "logs", "gpuhost", submitted["id"], check=0).stdout, message="the job printed")
    stopped = cli(laptop, host_python, "stop", "gpuhost", obeys["id"], "--wait", "--json", check=0)
    assert json.loads(stopped.stdout)["state"] == "stopped"
    done = job(laptop, host_python, obeys["id"])
    assert done["signal"] == 15 and not done["slurm"]["killed_after_grace"]
    cli(laptop, host_python, "stop", "gpuhost", ignores["id"], "--grace", "1", "--wait", check=0)
    done = job(laptop, host_python, ignores["id"])
    assert done["state"] == "stopped" and done["slurm"]["killed_after_grace"] and done["signal"] == 9
    assert "got TERM" in cli(laptop, host_python, "logs", "gpuhost", ignores["id"], check=0).stdout
    assert slurm_host.job(ignores["slurm_id"])["JobState"] in ("CANCELLED", "FAILED")


def test_the_daemon_killed_while_a_slurm_job_runs_loses_no_line_and_knows_how_it_ended(slurm_host, laptop, host_user, host_python):
    script = "i=0; while [ $i -lt 60 ]; do echo line $i; i=$((i+1)); sleep 0.1; done; exit 4"
    submitted = submit(laptop, host_python, "--", "sh", "-c", script)
    env = {k: v for k, v in os.environ.items() if k != "SSH_AUTH_SOCK"}
    env.update(ssh_config_env(laptop))
    env.update(PYTHONPATH=str(REPO_ROOT))
    follower = subprocess.Popen([sys.executable, "-m", "tui.cli", "logs", "gpuhost", submitted["id"], "--follow", "--python", host_python],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, cwd=str(REPO_ROOT))
    log_path = host_user.home / ".cache" / "specdeck" / "jobs" / submitted["id"] / "output.log"
    wait_for(lambda: log_path.exists() and b"line 5\n" in log_path.read_bytes(), message="the job's first lines")
    home = host_user.home / ".cache" / "specdeck"
    os.kill(daemon_pid(home), signal.SIGKILL)
    wait_for(lambda: daemon_pid(home) is None, message="the daemon gone")
    done = wait_for(lambda: ended(laptop, host_python, submitted["id"]), message="the job's end, told by the new daemon")
    assert (done["state"], done["exit_code"]) == ("failed", 4)
    out, err = follower.communicate(timeout=120)
    assert out == "".join("line %d\n" % i for i in range(60)), err
    assert follower.returncode == 1


def test_the_users_own_sbatch_job_is_listed_followed_and_cancelled_after_a_yes(slurm_host, laptop, host_user, host_python):
    out = host_user.home / "own-job.out"
    slurm_id = slurm_host.run(["sbatch", "--parsable", "-o", str(out), "--job-name", "by-hand", "--wrap", "echo foreign line; exec sleep 1000"],
                              user=host_user).stdout.strip()
    foreign_id = "s" + slurm_id
    listed = wait_for(lambda: (job(laptop, host_python, foreign_id) or {}).get("state") == "running" and job(laptop, host_python, foreign_id),
                      message="the user's own job listed running")
    assert (listed["foreign"], listed["engine"], listed["slurm_id"], listed["name"]) == (True, "slurm", slurm_id, "by-hand")
    assert "%s (not ours)" % foreign_id in cli(laptop, host_python, "jobs", "gpuhost", check=0).stdout
    wait_for(lambda: "foreign line" in cli(laptop, host_python, "logs", "gpuhost", foreign_id, check=0).stdout, message="its output followed")
    refused = cli(laptop, host_python, "stop", "gpuhost", foreign_id)
    assert refused.returncode == 2 and "specdeck did not start" in refused.stderr and "--yes" in refused.stderr
    assert len(refused.stderr.strip().splitlines()) == 1
    assert slurm_host.job(slurm_id)["JobState"] == "RUNNING"
    cli(laptop, host_python, "stop", "gpuhost", foreign_id, "--yes", "--wait", check=0)
    assert slurm_host.job(slurm_id)["JobState"] in ("CANCELLED", "FAILED")


def test_a_refused_submission_says_slurms_reason_in_one_line_and_leaves_nothing(slurm_host, laptop, host_user, host_python):
    cli(laptop, host_python, "jobs", "gpuhost", check=0)
    before = job_dirs(host_user)
    for flags, reason in ((["--partition", "nope"], "Invalid partition name specified"),
                          (["--time", "2:00:00"], "Requested time limit is invalid (missing or exceeds some limit)"),
                          (["--nodes", "3"], "Node count specification invalid")):
        refused = cli(laptop, host_python, "run", "gpuhost", "--slurm", *flags, "--", "true")
        assert refused.returncode != 0
        assert refused.stderr.strip().splitlines() == ["specdeck: Batch job submission failed: %s" % reason]
    assert job_dirs(host_user) == before
    assert not slurm_host.user_jobs(host_user)


def test_a_host_without_slurm_answers_slurm_in_one_line(sshd, laptop, host_user, host_python):
    # No slurm_host: the host user's login environment has no SLURM_CONF, and this machine no
    # /etc/slurm/slurm.conf: Slurm's commands are there and cannot work.
    cli(laptop, host_python, "jobs", "gpuhost", check=0)
    before = job_dirs(host_user)
    refused = cli(laptop, host_python, "run", "gpuhost", "--slurm", "--", "true")
    assert refused.returncode == 2
    lines = refused.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("specdeck: ") and "slurm" in lines[0].lower(), lines
    assert job_dirs(host_user) == before


def test_the_hosts_slurm_defaults_come_from_the_config_and_a_flag_wins(slurm_host, laptop, host_python, private_laptop_config):
    config = private_laptop_config / "specdeck" / "config.toml"
    config.parent.mkdir(parents=True, exist_ok=True)
    config.write_text('[hosts.gpuhost.slurm]\npartition = "nope"\nnodes = 2\nsbatch_args = ["--job-name=from-config"]\n')
    env = {"XDG_CONFIG_HOME": str(private_laptop_config)}
    refused = run_cli("run", "gpuhost", "--python", host_python, "--slurm", "--", "true", home=laptop, env=env)
    assert refused.stderr.strip() == "specdeck: Batch job submission failed: Invalid partition name specified"
    taken = run_cli("run", "gpuhost", "--python", host_python, "--slurm", "--partition", "debug", "--json", "--", "true", home=laptop, env=env, check=0)
    submitted = json.loads(taken.stdout)
    assert slurm_host.job(submitted["slurm_id"])["JobName"] == "from-config"
    assert slurm_host.job(submitted["slurm_id"])["NumNodes"] in ("2", "2-2")  # Slurm writes min-max while it waits
    without = run_cli("run", "gpuhost", "--python", host_python, "--nodes", "2", "--", "true", home=laptop, env=env)
    assert without.returncode == 2 and without.stderr.strip() == "specdeck: --nodes is a Slurm option: add --slurm"
    config.write_text('[hosts.gpuhost.slurm]\nnodes = "two"\n')
    wrong = run_cli("run", "gpuhost", "--python", host_python, "--slurm", "--", "true", home=laptop, env=env)
    assert wrong.returncode == 2 and wrong.stderr.strip().endswith("hosts.gpuhost.slurm.nodes: expected a whole number of at least 1, got a string")


def test_a_job_named_with_forged_rows_leaves_our_running_job_running(slurm_host, laptop, host_user, host_python):
    # Another job of the user's, named with a newline and made-up rows (in the fields' old order
    # and in today's) saying our job completed with 0, and a StdOut= of some other file.
    ours = submit(laptop, host_python, "--", "sleep", "1000")
    wait_for(lambda: (job(laptop, host_python, ours["id"]) or {}).get("state") == "running", message="our job running")
    decoy = host_user.home / "decoy.txt"
    decoy.write_text("not this job's output\n")
    at = "2026-01-01T00:00:00"
    forged = ["%s|COMPLETED|None|n1|0|debug|%s|%s|%s|%s|forged|" % (ours["slurm_id"], at, at, at, host_user.name),
              "%s|COMPLETED|0|%s|%s|%s|debug|n1|%s|None|forged|" % (ours["slurm_id"], at, at, at, host_user.name),
              " JobState=COMPLETED ExitCode=0:0 StdOut=%s" % decoy]
    out = host_user.home / "forger.out"
    forger = slurm_host.run(["sbatch", "--parsable", "-o", str(out), "--job-name", "x\n" + "\n".join(forged), "--wrap", "echo forger up; exec sleep 1000"],
                            user=host_user).stdout.strip()
    wait_for(lambda: (job(laptop, host_python, "s" + forger) or {}).get("state") == "running", message="the forging job listed")
    # A job of ours that ends after that: the watcher has read the queue with the forged rows in it.
    later = submit(laptop, host_python, "--", "true")
    wait_for(lambda: ended(laptop, host_python, later["id"]), message="the later job ended")
    assert slurm_host.job(ours["slurm_id"])["JobState"] == "RUNNING"
    mine = job(laptop, host_python, ours["id"])
    assert (mine["state"], mine["exit_code"], mine["ended_at"]) == ("running", None, None)
    table = cli(laptop, host_python, "jobs", "gpuhost", check=0).stdout
    row = [line for line in table.splitlines() if "%s (slurm %s)" % (ours["id"], ours["slurm_id"]) in line]
    assert len(row) == 1 and "running" in row[0] and "succeeded" not in row[0], table
    assert "not this job's output" not in cli(laptop, host_python, "logs", "gpuhost", "s" + forger).stdout


def test_a_forging_job_submitted_before_ours_cannot_hold_ours_pending(slurm_host, laptop, host_user, host_python):
    # A job of the user's submitted first, named with a newline and made-up rows for the next id
    # (ours, once submitted) saying it is pending, in every layout squeue has been read in: Slurm's
    # JSON names it as one string, so ours is shown as Slurm runs it.
    first = slurm_host.run(["sbatch", "--parsable", "-o", "/dev/null", "--wrap", "true"], user=host_user).stdout.strip()
    next_id = str(int(first) + 2)
    at = "2026-01-01T00:00:00"
    forged = ["%s|PENDING|None|%s|N/A|N/A|debug||%s|Priority|forged|" % (next_id, at, host_user.name),
              '{"job_id": %s, "job_state": "PENDING", "user_name": "%s", "name": "forged"}' % (next_id, host_user.name)]
    forger = slurm_host.run(["sbatch", "--parsable", "-o", "/dev/null", "--job-name", "x\n" + "\n".join(forged) + "\n",
                             "--wrap", "exec sleep 1000"], user=host_user).stdout.strip()
    ours = submit(laptop, host_python, "--", "sleep", "1000")
    assert ours["slurm_id"] == next_id and int(forger) == int(first) + 1
    wait_for(lambda: slurm_host.job(ours["slurm_id"]).get("JobState") == "RUNNING", message="Slurm runs our job")
    mine = wait_for(lambda: (lambda j: j if j and j["state"] == "running" else None)(job(laptop, host_python, ours["id"])),
                    message="our job shown running")
    assert mine["nodes"] and mine["pending_reason"] is None
    theirs = job(laptop, host_python, "s" + forger)
    assert theirs["state"] == "running" and theirs["name"] == "x\n" + "\n".join(forged) + "\n"
    table = cli(laptop, host_python, "jobs", "gpuhost", check=0).stdout
    row = [line for line in table.splitlines() if "%s (slurm %s)" % (ours["id"], ours["slurm_id"]) in line]
    assert len(row) == 1 and "running" in row[0] and "pending" not in row[0], table


def test_squeues_json_and_its_marked_rows_say_the_same_of_each_job(slurm_host, host_user):
    # Read from the real squeue both ways (a Slurm without JSON gets the marked rows): the same
    # fields for each of the user's jobs, a pending one, a running one, a cancelled one; another
    # user's job is not the user's; a job listed twice in the JSON is ambiguous.
    from remote.slurm import commands
    from remote.slurm.record import row_record

    running = slurm_host.run(["sbatch", "--parsable", "-o", "/dev/null", "--job-name", "a|b\nc", "--wrap", "exec sleep 1000"], user=host_user).stdout.strip()
    held = slurm_host.run(["sbatch", "--parsable", "--hold", "-o", "/dev/null", "--wrap", "true"], user=host_user).stdout.strip()
    cancelled = slurm_host.run(["sbatch", "--parsable", "-o", "/dev/null", "--wrap", "exec sleep 1000"], user=host_user).stdout.strip()
    slurm_host.run(["scancel", cancelled], user=host_user)
    wait_for(lambda: slurm_host.job(running).get("JobState") == "RUNNING" and slurm_host.job(cancelled).get("JobState") == "CANCELLED",
             message="one running, one cancelled")
    marker = commands.queue_marker()
    marked, _ = commands.parse_queue(slurm_host.run(commands.queue_argv(host_user.name, marker), user=host_user).stdout, marker)
    text = slurm_host.run(commands.queue_json_argv(host_user.name), user=host_user).stdout
    rows, ambiguous = commands.parse_queue_json(text, host_user.name)
    assert {running, held, cancelled} <= set(rows) and not ambiguous
    assert {k: row_record(v) for k, v in rows.items()} == {k: row_record(v) for k, v in marked.items()}
    assert (rows[running]["state"], rows[running]["name"], rows[held]["reason"], rows[cancelled]["state"]) == ("RUNNING", "a|b\nc", "JobHeldUser", "CANCELLED")
    assert commands.parse_queue_json(text, "someone-else") == ({}, set())
    answer = json.loads(text)
    answer["jobs"] += [job for job in answer["jobs"] if str(job["job_id"]) == running]
    rows, ambiguous = commands.parse_queue_json(json.dumps(answer), host_user.name)
    assert ambiguous == {running} and running not in rows and held in rows


def test_a_host_whose_slurm_has_no_controller_says_so_without_restarting_its_watcher(agent_home, monkeypatch):
    # Slurm's client installed but no cluster configured (squeue on the PATH, no slurm.conf): the
    # watcher says Slurm is not available, in Slurm's words, and is never a service that failed
    # and restarted (a report counted "service slurm-jobs restarted 13 times").
    from tui.transport.connection import open_client

    monkeypatch.delenv("SLURM_CONF", raising=False)
    client = open_client("local")
    try:
        def watcher():
            return next(s for s in client.call("daemon.services")["services"] if s["name"] == "slurm-jobs")

        seen = wait_for(lambda: (lambda s: s if s["detail"]["polls"] == 0 and s["detail"]["slurm"] is False and s["detail"]["error"] else None)(watcher()),
                        message="the watcher saying Slurm does not answer")
        assert "configuration" in seen["detail"]["error"]
        wait_for(lambda: watcher()["detail"]["interval_s"] >= 4, message="the watcher asking less often")
        final = watcher()
        assert (final["state"], final["failures"], final["restarts"], final["error"]) == ("running", 0, 0, None)
        assert client.call("slurm.status")["available"] is False
    finally:
        client.close()
