"""Training and data-generation jobs over the real local agent, each a real process writing its
log as it runs: a daemon killed (SIGKILL) while a run writes records loses and repeats no step;
the loss-plateau alert (a loss that stops falling) and its absence while the loss falls; a data
generation's progress (samples done of total, rate, ETA) from its real tqdm bars."""

import json
import os
import signal

import pytest

from tests.helpers.cli import daemon_pid, run_cli
from tests.helpers.training import curves, start
from tests.helpers.waits import wait_for


def job_of(home, job_id):
    listed = run_cli("jobs", "local", "--json", home=home)
    if listed.returncode != 0:
        return None  # the daemon starting again: ask again
    return next(j for j in json.loads(listed.stdout) if j["id"] == job_id)


def ended(home, job_id):
    job = job_of(home, job_id)
    return job if job and job["process_state"] not in ("running", "starting") else None


STEPS = """
    import time
    for step in range({count}):
        print("step=%d loss=%.4f acc_0=%.3f" % (step, {loss}, 0.5), flush=True)
        time.sleep({pause_s})
"""


def test_daemon_killed_mid_run_keeps_every_step_once(agent_home, tmp_path):
    job_id = start(agent_home, tmp_path, "steps", STEPS.format(count=150, loss="10.0 / (step + 1)", pause_s=0.04))
    wait_for(lambda: (curves(agent_home, job_id) or {"steps": []})["steps"][10:], 60)
    pid = daemon_pid(agent_home)
    os.kill(pid, signal.SIGKILL)  # between two reads of the log, two writes of the store: anywhere
    wait_for(lambda: ended(agent_home, job_id), 60)  # the next command starts a daemon again
    assert daemon_pid(agent_home) not in (None, pid)

    def all_steps():
        reply = curves(agent_home, job_id)
        return reply if reply and len(reply["steps"]) >= 150 else None

    reply = wait_for(all_steps, 60)
    assert [s["step"] for s in reply["steps"]] == list(range(150))
    assert [s["loss"] for s in reply["steps"]] == pytest.approx([round(10.0 / (n + 1), 4) for n in range(150)])
    times = [s["time"] for s in reply["steps"]]
    assert times == sorted(times)  # in log order (the lines read together after the restart share their arrival)


def test_loss_plateau_alert(agent_home, tmp_path):
    # Falls for 1 s, then stays at 1.0 for 4 s: with a 2 s plateau time, an alert.
    flat = start(agent_home, tmp_path, "flat", STEPS.format(count=50, loss="max(1.0, 2.0 - 0.1 * step)", pause_s=0.1))
    falling = start(agent_home, tmp_path, "falling", STEPS.format(count=50, loss="2.0 - 0.02 * step", pause_s=0.1))
    for job_id in (flat, falling):
        wait_for(lambda: ended(agent_home, job_id), 60)
    replies = {}
    for job_id in (flat, falling):
        replies[job_id] = wait_for(lambda: (lambda r: r if r and len(r["steps"]) == 50 else None)(curves(agent_home, job_id, "--plateau-s", "2")), 30)
    assert replies[flat]["alerts"] == ["the loss has not fallen below 1 for 2 s"]
    assert replies[falling]["alerts"] == []
    # The default plateau time (30 min) does not fire on a 5 s run.
    assert curves(agent_home, flat)["alerts"] == []
    text = run_cli("curves", "local", flat, "--plateau-s", "2", home=agent_home).stdout
    assert "alert: the loss has not fallen below 1 for 2 s" in text


DATAGEN = """
    import sys, time
    from tqdm import tqdm
    print("Processing 200 samples", flush=True)
    for _ in tqdm(range(200), desc="Generating hidden states", mininterval=0.1, file=sys.stderr):
        time.sleep(0.03)
    print("saved 200 samples", flush=True)
"""


def test_datagen_progress_from_its_bars(agent_home, tmp_path):
    job_id = start(agent_home, tmp_path, "datagen", DATAGEN, "--datagen")

    def midway():
        job = job_of(agent_home, job_id)
        progress = (job or {}).get("progress") or {}
        return job if progress.get("done") and 20 <= progress["done"] < 180 else None

    job = wait_for(midway, 60, interval_s=0.2)
    progress = job["progress"]
    assert job["kind"] == "datagen" and job["state"] == "generating"
    assert progress["total"] == 200
    assert 5.0 < progress["rate"] < 40.0  # one sample per 30 ms, as tqdm measured it
    assert progress["eta_s"] == pytest.approx((200 - progress["done"]) / progress["rate"])
    job = wait_for(lambda: ended(agent_home, job_id), 60)
    final = wait_for(lambda: (lambda j: j if j["progress"].get("done") == 200 else None)(job_of(agent_home, job_id)), 30)
    assert final["progress"]["total"] == 200 and final["exit_code"] == 0


RICH_THEN_QUIET = """
    import time
    for step in range(30):
        print("[21:00:00] INFO     train/loss_0=%.3f, train/full_acc_0=0.500, global_step=%d   trainer.py:587" % (3.0 - step * 0.01, step), flush=True)
    time.sleep({quiet_s})
"""


def test_last_step_of_a_quiet_run_is_shown_while_it_stays_quiet(agent_home, tmp_path):
    # speculators' rich records may wrap onto the next line, so the parser holds the newest one
    # open; a run that prints steps 0..29 and goes quiet must show 29, not 28, while still running.
    job_id = start(agent_home, tmp_path, "quiet", RICH_THEN_QUIET.format(quiet_s=30))

    def last_step():
        steps = (curves(agent_home, job_id) or {"steps": []})["steps"]
        return steps if steps and steps[-1]["step"] == 29 else None

    steps = wait_for(last_step, 20)
    assert [s["step"] for s in steps] == list(range(30))
    assert ended(agent_home, job_id) is None  # shown during the silence, not only at the run's end
    run_cli("stop", "local", job_id, "--grace", "1", home=agent_home)


SAVES_THEN_EXITS = """
    import os, time
    def save(epoch):
        path = os.path.join({save!r}, str(epoch))
        os.makedirs(path)
        with open(os.path.join(path, "config.json"), "w") as f:
            f.write("{{}}")
        with open(os.path.join(path, "model.safetensors"), "wb") as f:
            f.write(b"x" * 64)
    save(0)
    time.sleep(5)
    save(1)  # the last epoch's checkpoint, and the run ends at once (as speculators and SpecForge do)
"""


def test_last_checkpoint_of_a_run_that_exits_right_after_saving_it_is_listed(agent_home, tmp_path):
    save = tmp_path / "save"
    save.mkdir()
    job_id = start(agent_home, tmp_path, "saves", SAVES_THEN_EXITS.format(save=str(save)), "--save-dir", str(save))
    wait_for(lambda: ended(agent_home, job_id), 30)

    def both():
        reply = curves(agent_home, job_id)
        return reply if reply and len(reply["checkpoints"]) == 2 else None

    reply = wait_for(both, 20)
    assert [c["name"] for c in reply["checkpoints"]] == ["0", "1"]
    listed = run_cli("checkpoints", "local", job_id, "--json", home=agent_home, check=0)
    assert [c["name"] for c in json.loads(listed.stdout)["checkpoints"]] == ["0", "1"]
