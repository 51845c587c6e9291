"""A training record's time is when its line was written: two real trainers whose output is
block-buffered (a log file, no -u: their lines reach the log a few kilobytes at a time), stopped
with SIGSTOP for longer than their stall limit and continued, over the real local agent. One
prints speculators' rich lines (a time column when the second changes): each step's time in
`curves` is in the second its line says. One prints bare `step=N` lines: each step's time is
when its bytes reached the log, never before its line was written (records are not spread back
over the stall). In both the curves keep the stall as a gap, and the stall's follow-up says it
lasted as long as the process was stopped. The report over them (`specdeck report`, text and
--json) gives each run's first and last logged step and loss as printed, and says it stood still
once, when and for how long; the stall's alert line carries its message and the job."""

import json
import math
import os
import re
import signal
import sys
import textwrap
import time

from tests.helpers.cli import run_cli
from tests.helpers.training import curves
from tests.helpers.waits import wait_for

STOPPED_S = 6.0
TRAINER = """\
    import os, sys, time
    rich, done = sys.argv[1] == "rich", sys.argv[2]
    last, n = None, 0
    while not os.path.exists(done):
        now = time.time()
        if rich:
            second = time.strftime("%H:%M:%S", time.localtime(now))
            column = "[%s]" % second if second != last else " " * (len(second) + 2)
            last = second
            print("%s INFO     train/loss_0=0.025, train/full_acc_0=0.50, train/loss=%.3f, epoch=0, global_step=%d, "
                  "wall=%.3f   trainer.py:587" % (column, 1.0 / (n + 1), n, now))
        else:
            print("step=%d loss=%.3f wall=%.3f %s" % (n, 1.0 / (n + 1), now, "." * 600))
        n += 1
        time.sleep(0.05)
"""


def trainer_pid(client, job_id, script, form):
    """The trainer's own process (the job's, or the one running its script in its form), to stop and continue."""
    pid = wait_for(lambda: client.call("jobs.get", {"id": job_id}).get("pid"), message="the trainer's process")
    for candidate in [pid] + [int(p) for p in os.listdir("/proc") if p.isdigit()]:
        try:
            with open("/proc/%d/cmdline" % candidate, "rb") as f:
                argv = f.read().split(b"\0")
        except OSError:
            continue
        if str(script).encode() in argv and form.encode() in argv:
            return candidate
    raise AssertionError("no process runs %s %s" % (script, form))


def walls(job_id):
    """{step: when its line was printed} from the job's log."""
    log = run_cli("logs", "local", job_id, check=0).stdout
    found = re.findall(r"(?:global_step=|^step=)(\d+)[^\n]*?wall=([\d.]+)", log, re.M)
    return {int(step): float(wall) for step, wall in found}


def resumed_after_s(receiver, job_id):
    alerts = [a for body in receiver.json_bodies() for a in body["alerts"] if a["job_id"] == job_id and a["kind"] == "resumed"]
    if not alerts:
        return None
    found = re.match(r"%s resumed after (\d+) s" % job_id, alerts[0]["message"])
    assert found, alerts[0]["message"]
    return float(found.group(1))


def test_block_buffered_steps_keep_their_times_and_the_stall_between_them(client, receiver, tmp_path):
    client.call("notify.add", {"url": receiver.url + "/hook", "format": "json", "on": "stalled"})
    script = tmp_path / "trainer.py"
    script.write_text(textwrap.dedent(TRAINER))
    jobs = {}
    for form in ("rich", "plain"):
        done = tmp_path / ("done-" + form)
        jobs[form] = (run_cli("train", "local", "--name", "buffered " + form, "--stall-after", "3s", "--",
                              sys.executable, str(script), form, str(done), check=0).stdout.strip(), done)
    try:
        pids = {form: trainer_pid(client, job_id, script, form) for form, (job_id, _) in jobs.items()}
        for job_id, _ in jobs.values():
            wait_for(lambda: (curves(None, job_id) or {}).get("steps"), message="a first burst of steps")
        stopped_at = time.time()
        for pid in pids.values():
            os.kill(pid, signal.SIGSTOP)
        time.sleep(STOPPED_S)
        for pid in pids.values():
            os.kill(pid, signal.SIGCONT)
        for form, (job_id, _) in jobs.items():
            after = wait_for(lambda: resumed_after_s(receiver, job_id), message="%s's stall and its follow-up" % form)
            assert after >= STOPPED_S - 1, "%s: resumed after %s s, stopped for %s s" % (form, after, STOPPED_S)
            # two more bursts after the one that ended the stall
            wait_for(lambda: len([s for s in curves(None, job_id)["steps"] if s["time"] > stopped_at + STOPPED_S]) >= 60,
                     message="%s stepping again" % form)
    finally:
        for job_id, done in jobs.values():
            done.write_text("")
    for form, (job_id, _) in jobs.items():
        wait_for(lambda: client.call("jobs.get", {"id": job_id})["state"] == "succeeded", message="the run's end")
        written = walls(job_id)
        steps = wait_for(lambda: (lambda got: got if got and len(got) == len(written) else None)(curves(None, job_id)["steps"]),
                         message="every step in the curves")
        times = [s["time"] for s in steps]
        gaps = [later - earlier for earlier, later in zip(times, times[1:])]
        assert max(gaps) >= STOPPED_S - 0.5, "%s: the stall is not in the curves (largest gap %.2f s)" % (form, max(gaps))
        assert times == sorted(times)
        for step in steps:
            wall = written[step["step"]]
            if form == "rich":  # the line's own second
                assert math.floor(wall) <= step["time"] < math.floor(wall) + 1.0 + 1e-6, (step, wall)
            else:  # when its bytes reached the log: after it was printed, before the next read
                assert wall - 0.02 <= step["time"] <= wall + STOPPED_S + 5, (step, wall)  # a file's mtime lags by a clock tick
        if form == "plain":
            assert len(set(times)) < len(times) / 3  # a burst's records share its arrival: not spread

    # The report over them: ranges as logged, the stall with its start and length.
    report = json.loads(run_cli("report", "local", "--since", "1h", "--json").stdout)
    text = run_cli("report", "local", "--since", "1h").stdout
    for form, (job_id, _) in jobs.items():
        written = walls(job_id)
        last = max(written)
        run, = [r for r in report["training"] if r["id"] == job_id]
        assert run["steps"] == {"from": 0, "to": last} and run["loss"] == {"from": 1.0, "to": round(1.0 / (last + 1), 3)}, run
        stall, = run["stalls"]
        assert stopped_at - 3 <= stall["start"] <= stopped_at + 0.5 and stall["length_s"] >= STOPPED_S - 0.5, (stall, stopped_at)
        row, = [l for l in text.splitlines() if l.startswith("  %s buffered %s: " % (job_id, form))]
        assert "steps 0 -> %d, loss 1 -> %s" % (last, ("%.3f" % (1.0 / (last + 1))).rstrip("0")) in row, row
        found = re.search(r"stood still once: (\d\d:\d\d) for (\d+) s", row)
        assert found and int(found.group(2)) >= STOPPED_S - 1 and found.group(1) == time.strftime("%H:%M", time.localtime(stall["start"])), row
        alert = [a for a in report["alerts"] if a["job_id"] == job_id and a["kind"] == "training_stalled"][0]
        assert alert["message"].startswith("%s (buffered %s): no new step for" % (job_id, form))
        told = [l for l in text.splitlines() if "%s stalled on " % job_id in l]
        assert told and "%s (buffered %s): no new step for" % (job_id, form) in told[0] and "delivered" in told[0], told
