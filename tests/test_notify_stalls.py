"""Stalls told while no console watches, to a real loopback webhook: a real training job that
prints speculators' step lines and then hangs with its process alive (started with `train
--stall-after 3s`), and one follow-up when it steps again; `run` jobs under the host's default
from `config HOST --stall-after` and one with `--stall-after off`; a download from the test hub
throttled to a halt and let go; an attached server whose /metrics says requests wait while its
generated-tokens counter stands still."""

import re
import sys
import textwrap
from pathlib import Path


from tests.helpers.cli import run_cli
from tests.helpers.training import STEP_LINE
from tests.helpers.metrics import MetricsServer
from tests.helpers.waits import wait_for

METRICS = (Path(__file__).parent / "serving_data" / "vllm_metrics_full.txt").read_text()
TRAINER = """\
    import os, sys, time
    def step(n):
        print(%r %% (1.0 / (n + 1), n), flush=True)
        time.sleep(0.2)
    for n in range(15):
        step(n)
    print("loading shard 3 of 8", flush=True)
    while not os.path.exists(sys.argv[1]):  # hung, its process alive, until the test lets it go
        time.sleep(0.05)
    n = 15
    while not os.path.exists(sys.argv[2]):  # stepping again, until the test ends it
        step(n)
        n += 1
""" % STEP_LINE
# Hung, then its last steps in one burst as it exits (a block-buffered trainer's output).
ENDS_WHILE_STALLED = """\
    import os, sys, time
    for n in range(15):
        print(%r %% (1.0 / (n + 1), n), flush=True)
        time.sleep(0.2)
    while not os.path.exists(sys.argv[1]):
        time.sleep(0.05)
    for n in range(15, 20):
        print(%r %% (1.0 / (n + 1), n))
""" % (STEP_LINE, STEP_LINE)


def stall_channel(client, receiver):
    return client.call("notify.add", {"url": receiver.url + "/hook", "format": "json", "on": "stalled"})["channel"]["id"]


def alerts_of(receiver, job_id):
    """Every alert the receiver got about `job_id`, in the order sent (digests opened)."""
    return [a for body in receiver.json_bodies() for a in body["alerts"] if a["job_id"] == job_id]


def wait_alerts(receiver, job_id, count):
    return wait_for(lambda: (lambda found: found if len(found) >= count else None)(alerts_of(receiver, job_id)),
                    message="%d alert(s) about %s" % (count, job_id))


def raised_for(client, job_id):
    return [a["kind"] for a in client.call("notify.list")["recent"] if a["job_id"] == job_id]


def test_a_hung_training_run_is_told_once_with_its_last_lines_and_once_when_it_steps_again(client, receiver, tmp_path):
    stall_channel(client, receiver)
    run_cli("config", "local", "--stall-after", "3s", check=0)  # the host's default: `run` sends it
    quiet = run_cli("run", "local", "--stall-after", "off", "--", "sh", "-c", "echo waiting for input; sleep 600", check=0).stdout.strip()
    told = run_cli("run", "local", "--", "sh", "-c", "echo waiting for input; sleep 600", check=0).stdout.strip()
    script, go, end = tmp_path / "trainer.py", tmp_path / "go", tmp_path / "end"
    script.write_text(textwrap.dedent(TRAINER))
    job_id = run_cli("train", "local", "--name", "eagle3 hang", "--stall-after", "3s", "--",
                     sys.executable, "-u", str(script), str(go), str(end), check=0).stdout.strip()
    try:
        assert [client.call("jobs.get", {"id": j})["meta"]["stall_after_s"] for j in (quiet, told, job_id)] == [0.0, 3.0, 3.0]

        stalled, = wait_alerts(receiver, job_id, 1)
        assert stalled["kind"] == "training_stalled" and stalled["categories"] == ["stalled", "training"] and stalled["urgent"]
        assert stalled["title"].startswith("%s stalled on " % job_id)
        assert re.match(r"%s \(eagle3 hang\): no new step for \d+ s \(stall limit 3 s\); before: step 14, loss 0\.067" % job_id,
                        stalled["message"]), stalled["message"]
        assert stalled["log_tail"][-1] == "loading shard 3 of 8" and "global_step=14" in stalled["log_tail"][-2]
        assert client.call("jobs.get", {"id": job_id})["process_state"] == "running"

        go.write_text("")
        _, resumed = wait_alerts(receiver, job_id, 2)
        assert resumed["kind"] == "resumed" and not resumed["urgent"]
        assert re.match(r"%s resumed after \d+ s \(step 15" % job_id, resumed["message"]), resumed["message"]
        end.write_text("")
        wait_for(lambda: client.call("jobs.get", {"id": job_id})["state"] == "succeeded", message="the run's end")
        assert raised_for(client, job_id) == ["resumed", "training_stalled"]  # newest first: each once
        assert len(alerts_of(receiver, job_id)) == 2

        # A plain command under the host's default: its log stood still.
        ran, = wait_alerts(receiver, told, 1)
        assert ran["kind"] == "job_stalled" and ran["categories"] == ["stalled"]
        assert "no new output for" in ran["message"] and ran["log_tail"] == ["waiting for input"]
        # The older, as silent, job was looked at in the same checks: never told.
        assert raised_for(client, quiet) == [] and alerts_of(receiver, quiet) == []
    finally:
        for one in (quiet, told):
            client.call("jobs.stop", {"id": one, "grace_s": 0})
    bad = run_cli("run", "local", "--stall-after", "soon", "--", "true", check=2)
    assert "--stall-after: a duration is a number" in bad.stderr


def test_a_download_throttled_to_a_halt_is_told_and_its_moving_again(client, receiver, hub, tmp_path):
    stall_channel(client, receiver)
    hub.add_repo("team/slow-weights", {"config.json": b"{}", "weights.bin": bytes(range(256)) * 8192})
    hub.throttle(1000 * 1000)  # its bytes move a read slice (256 KiB) at a time
    job = client.call("download.start", {"repo": "team/slow-weights", "local_dir": str(tmp_path / "w"), "endpoint": hub.url,
                                         "stall_after_s": 2}, timeout=120)
    progress = lambda: client.call("jobs.get", {"id": job["id"]}).get("progress") or {}  # noqa: E731
    wait_for(lambda: progress().get("bytes_done", 0) > 1000, message="the first bytes of the weights")
    hub.throttle(0)
    stalled, = wait_alerts(receiver, job["id"], 1)
    assert stalled["kind"] == "download_stalled" and stalled["categories"] == ["stalled", "downloads"]
    assert re.search(r": no byte downloaded for \d+ s \(stall limit 2 s\); before: [\d.]+ kB of 2\.10 MB", stalled["message"]), stalled["message"]
    hub.throttle(None)
    _, resumed = wait_alerts(receiver, job["id"], 2)
    assert resumed["kind"] == "resumed" and resumed["message"].startswith("%s resumed after" % job["id"])
    wait_for(lambda: client.call("jobs.get", {"id": job["id"]})["state"] == "verified", message="the download verified")
    assert len(alerts_of(receiver, job["id"])) == 2


def exposition(waiting, generated):
    """A real vLLM's /metrics text with `waiting` requests queued and `generated` its generation-tokens counter."""
    text = METRICS.replace('vllm:num_requests_waiting{engine="0",model_name="tiny-target"} 0.0',
                           'vllm:num_requests_waiting{engine="0",model_name="tiny-target"} %.1f' % waiting)
    return text.replace('vllm:generation_tokens_total{engine="0",model_name="tiny-target"} 240.0',
                        'vllm:generation_tokens_total{engine="0",model_name="tiny-target"} %.1f' % generated)


def test_a_server_with_requests_waiting_and_no_token_generated_is_told(client, receiver):
    stall_channel(client, receiver)
    metrics = MetricsServer()
    metrics.text = exposition(waiting=3, generated=240.0)
    try:
        server_id = client.call("serving.attach", {"url": metrics.url, "stall_after_s": 3})["id"]
        found = wait_for(lambda: [a for body in receiver.json_bodies() for a in body["alerts"] if a["kind"] == "server_stalled"],
                         message="the server's stall")
        assert len(found) == 1 and found[0]["categories"] == ["stalled", "speculation"]
        assert re.match(r"attached server %s: 3 request\(s\) waiting and no token generated for \d+ s" % server_id, found[0]["message"])
        metrics.text = exposition(waiting=0, generated=740.0)
        resumed = wait_for(lambda: [a for body in receiver.json_bodies() for a in body["alerts"] if a["kind"] == "resumed"],
                           message="the follow-up")
        assert resumed[0]["message"].startswith("%s resumed after" % server_id)
        client.call("serving.detach", {"id": server_id})
    finally:
        metrics.close()
    assert [a["kind"] for a in client.call("notify.list")["recent"]] == ["resumed", "server_stalled"]


def test_a_run_that_ends_while_stalled_is_told_once_finished_after_standing_still(client, receiver, tmp_path):
    client.call("notify.add", {"url": receiver.url + "/hook", "format": "json"})  # every alert
    script, go = tmp_path / "trainer.py", tmp_path / "go"
    script.write_text(textwrap.dedent(ENDS_WHILE_STALLED))
    # Asked to be told when it ends (--notify): without the stall, its end is told on its own.
    job_id = run_cli("run", "local", "--kind", "training", "--notify", "--name", "eagle3 burst", "--stall-after", "3s", "--",
                     sys.executable, str(script), str(go), check=0).stdout.strip()
    stalled, = wait_alerts(receiver, job_id, 1)
    assert stalled["kind"] == "training_stalled"
    go.write_text("")
    wait_for(lambda: client.call("jobs.get", {"id": job_id})["state"] == "succeeded", message="the run's end")
    _, ended = wait_alerts(receiver, job_id, 2)
    assert re.match(r"%s \(eagle3 burst\) finished after standing still \d+ s \(ran \d+ s in all\)$" % job_id, ended["message"]), \
        ended["message"]
    assert ended["title"].startswith("%s finished on " % job_id) and ended["id"] == stalled["id"] + ":resumed"
    assert "finished" in ended["categories"] and "stalled" in ended["categories"]
    # Once: the host raised nothing else about the run, and the receiver got the two.
    assert raised_for(client, job_id) == ["resumed", "training_stalled"]
    assert [a["message"] for a in alerts_of(receiver, job_id)] == [stalled["message"], ended["message"]]
