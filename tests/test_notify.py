"""Alerts delivered by the host's daemon while no console watches: to a real HTTP receiver on
loopback for each format (the bodies and headers each service documents), through a receiver
that is down and comes back, one that answers 500 and one that never answers, across a daemon
killed with alerts queued, in a storm, and to a command."""

import json
import os
import signal


from tests.helpers.cli import daemon_pid
from tests.helpers.notify import status
from tests.helpers.waits import wait_for
from tests.notify_receiver import Receiver


def add(client, url, **params):
    return client.call("notify.add", dict(params, url=url))["channel"]["id"]


def failing_job(client, code=3, name="finetune aq-k2", **params):
    return client.call("jobs.submit", dict(params, argv=["sh", "-c", "echo step 1840 loss 1.23; echo CUDA error: out of memory; exit %d" % code],
                                             name=name))


def test_each_format_gets_what_its_service_documents(client, receiver):
    ntfy = add(client, receiver.url + "/specdeck-alerts", format="ntfy")
    slack = add(client, receiver.url + "/hooks/slack", format="slack")
    discord = add(client, receiver.url + "/api/webhooks/1/discord", format="discord")
    plain = add(client, receiver.url + "/plain", format="json")
    gpu_only = add(client, receiver.url + "/gpu-only", format="json", on="gpu")
    job = failing_job(client)

    requests = {r["path"]: r for r in receiver.wait_for(4)}
    assert set(requests) == {"/specdeck-alerts", "/hooks/slack", "/api/webhooks/1/discord", "/plain"}
    ids = {r["headers"]["X-Specdeck-Alert-Id"] for r in requests.values()}
    assert len(ids) == 1 and ids.pop().startswith("job:%s:" % job["id"])

    ntfy_request = requests["/specdeck-alerts"]
    assert ntfy_request["headers"]["Title"].startswith("%s failed on " % job["id"])
    assert ntfy_request["headers"]["Priority"] == "high" and ntfy_request["headers"]["Tags"] == "rotating_light"
    text = ntfy_request["body"].decode()
    assert "%s (finetune aq-k2) exited 3" % job["id"] in text and "CUDA error: out of memory" in text

    slack_body = json.loads(requests["/hooks/slack"]["body"])
    assert "exited 3" in slack_body["text"] and "```step 1840 loss 1.23\nCUDA error: out of memory```" in slack_body["text"]
    discord_body = json.loads(requests["/api/webhooks/1/discord"]["body"])
    assert "exited 3" in discord_body["content"] and discord_body["allowed_mentions"] == {"parse": []}
    assert len(discord_body["content"]) <= 2000
    plain_body = json.loads(requests["/plain"]["body"])
    alert = plain_body["alerts"][0]
    assert plain_body["digest"] is False and plain_body["count"] == 1
    assert (alert["kind"], alert["job_id"], alert["job_name"], alert["urgent"]) == ("job_failed", job["id"], "finetune aq-k2", True)
    assert alert["log_tail"] == ["step 1840 loss 1.23", "CUDA error: out of memory"] and alert["time_text"]

    wait_for(lambda: all(status(client, c)["sent"] == 1 for c in (ntfy, slack, discord, plain)), message="each delivery recorded")
    assert status(client, gpu_only) == dict(status(client, gpu_only), pending=0, sent=0)  # it takes GPU alerts only
    assert len(receiver.requests) == 4


def test_a_receiver_down_then_up_gets_the_alert_once_late(client, receiver):
    channel = add(client, receiver.url + "/hook", format="json")
    receiver.down()
    failing_job(client)
    failed = wait_for(lambda: (lambda s: s if s["failures"] >= 1 else None)(status(client, channel)), message="a failed try")
    assert failed["state"] == "retrying" and failed["last_error"].startswith("cannot connect") and failed["pending"] == 1
    listed = client.call("notify.list")["channels"][0]
    assert listed["url"] == receiver.url + "/…"

    receiver.up()
    reply = client.call("notify.retry", {"id": channel}, timeout=30)
    # The reply (what `notify --retry` prints) says how the retry went, not the state before it.
    retried = next(c for c in reply["channels"] if c["id"] == channel)["status"]
    assert (retried["state"], retried["sent"], retried["pending"]) == ("ok", 1, 0), retried
    receiver.wait_for(1)
    wait_for(lambda: status(client, channel)["sent"] == 1, message="the delivery recorded")
    assert status(client, channel)["pending"] == 0 and len(receiver.requests) == 1


def test_500_and_a_receiver_that_never_answers_cost_one_bounded_try_each(client, receiver):
    broken, silent = Receiver(mode="500"), Receiver(mode="hang")
    try:
        erroring = add(client, broken.url + "/hook", format="json")
        hanging = add(client, silent.url + "/hook", format="json")
        healthy = add(client, receiver.url + "/hook", format="json")
        failing_job(client)
        receiver.wait_for(1)  # the healthy channel is not held up by the silent one
        silent.wait_for(1)
        assert client.call("ping")["time"]  # the daemon answers while a try hangs
        wait_for(lambda: (status(client, erroring)["last_error"] or "").startswith("HTTP 500"), message="the 500")
        after = wait_for(lambda: (lambda s: s if s["failures"] else None)(status(client, hanging)), message="the silent try to end")
        assert after["last_error"] == "no answer within 5 s" and after["pending"] == 1
        assert status(client, healthy)["sent"] == 1
        # Three failures in a row and the channel shows as failing, with its last error.
        for _ in range(2):
            before = status(client, erroring)["failures"]
            client.call("notify.retry", {"id": erroring})
            wait_for(lambda: status(client, erroring)["failures"] > before, message="another failed try")
        assert status(client, erroring)["state"] == "failing"
    finally:
        broken.close()
        silent.close()


def test_alerts_queued_when_the_daemon_is_killed_go_out_after_its_restart_once(agent_home, receiver):
    from tui.transport.connection import open_client

    client = open_client("local")
    try:
        channel = add(client, receiver.url + "/hook", format="json")
        receiver.down()
        job = failing_job(client)
        wait_for(lambda: status(client, channel)["failures"] >= 1, message="a failed try")
        pid = daemon_pid(agent_home)
        os.kill(pid, signal.SIGKILL)
        wait_for(lambda: daemon_pid(agent_home) is None, message="the daemon gone")
    finally:
        client.close()
    receiver.up()
    client = open_client("local")  # starts a new daemon
    try:
        assert daemon_pid(agent_home) != pid
        client.call("notify.retry", {"id": channel})  # its backoff survived the restart too
        received = receiver.wait_for(1)
        wait_for(lambda: status(client, channel)["sent"] == 1 and status(client, channel)["pending"] == 0, message="sent, nothing left")
        assert json.loads(received[0]["body"])["alerts"][0]["job_id"] == job["id"]
        keys = [a["id"] for a in client.call("notify.list")["recent"]]
        assert len(keys) == len(set(keys)) == 1  # the new daemon's catch-up found it queued already
        assert len(receiver.requests) == 1
    finally:
        client.close()


def test_a_storm_is_one_digest_not_fifty_messages(client, receiver):
    channel = add(client, receiver.url + "/hook", format="json")
    for number in range(50):
        client.call("notify.send", {"message": "storm alert %d" % number, "urgent": True})
    wait_for(lambda: status(client, channel)["sent"] == 50, message="all 50 delivered")
    bodies = receiver.json_bodies()
    delivered = [a["message"] for body in bodies for a in body["alerts"]]
    assert sorted(delivered) == sorted("storm alert %d" % n for n in range(50))  # each once
    # A handful of requests, most alerts in a digest (the first may go alone when the next ones
    # arrive after it left: the service gathers what is due when a channel's sender runs).
    assert len(bodies) <= 3, [b["count"] for b in bodies]
    [digest] = [b for b in bodies if b["count"] >= 40]
    assert digest["digest"] is True and digest["text"].startswith("- %s: storm alert " % digest["host"])


def test_a_command_channel_gets_the_alert_as_json_on_stdin(client, tmp_path):
    out = tmp_path / "alert.json"
    channel = client.call("notify.add", {"argv": ["sh", "-c", 'cat > "$0"; echo "$SPECDECK_ALERT_ID" > "$0.id"', str(out)],
                                         "on": "failed"})["channel"]
    assert channel["format"] == "command" and "url" not in channel
    job = failing_job(client, code=5)
    wait_for(lambda: status(client, channel["id"])["sent"] == 1, message="the command run")
    body = json.loads(out.read_text())
    assert body["alerts"][0]["message"].startswith("%s (finetune aq-k2) exited 5" % job["id"])
    assert (tmp_path / "alert.json.id").read_text().strip() == body["id"]


def test_a_command_that_fails_is_retried_with_its_last_words(client, tmp_path):
    channel = client.call("notify.add", {"argv": ["sh", "-c", "echo mail: no such user >&2; exit 2"]})["channel"]["id"]
    client.call("notify.send", {"message": "hello"})
    failed = wait_for(lambda: (lambda s: s if s["failures"] else None)(status(client, channel)), message="a failed try")
    assert failed["last_error"] == "the command exited 2: mail: no such user" and failed["pending"] == 1


def test_a_training_run_gone_nan_is_told(client, receiver, tmp_path):
    add(client, receiver.url + "/hook", format="json", on="training")
    job = client.call("training.start", {"argv": ["sh", "-c", "echo step=1 loss=2.5; echo step=2 loss=nan; sleep 60"],
                                         "name": "diverging"})
    try:
        body = json.loads(receiver.wait_for(1)[0]["body"])
        alert = body["alerts"][0]
        assert (alert["kind"], alert["job_id"], alert["urgent"]) == ("training_nan", job["id"], True)
        assert "the loss became nan at step 2" in alert["message"]
    finally:
        client.call("jobs.stop", {"id": job["id"], "grace_s": 1.0})


ALERT = {"kind": "test", "categories": [], "id": "t:1", "title": "a test", "message": "a test alert", "time_text": "now", "host": "gpu1"}


def test_a_receiver_trickling_its_answer_is_a_failed_try_within_the_deadline():
    from remote.notify import send

    found = Receiver(mode="trickle")
    try:
        reason = send.deliver({"format": "json", "url": found.url + "/hook"}, [ALERT], "gpu1")
    finally:
        found.close()
    assert reason == "no complete answer within %d s" % send.TRY_DEADLINE_S


def test_a_url_with_user_and_password_is_sent_as_basic_auth(receiver):
    import base64

    from remote.notify import send

    url = receiver.url.replace("http://", "http://alice:s3cret-pw@") + "/hook"
    reason = send.deliver({"format": "json", "url": url}, [ALERT], "gpu1")
    assert reason is None
    got = receiver.wait_for(1)[0]
    assert got["path"] == "/hook"
    assert got["headers"]["Authorization"] == "Basic " + base64.b64encode(b"alice:s3cret-pw").decode()
