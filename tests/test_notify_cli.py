"""`specdeck notify` and `specdeck run --notify` as a user runs them (separate processes, a
private laptop HOME), and the channel's URL kept secret: only the host's channel store (0600)
holds it, no log, no reply, no other file."""

import json
import os
import stat

import pytest

from tests.helpers.cli import run_cli
from tests.helpers.notify import status
from tests.helpers.waits import wait_for
from tests.notify_receiver import Receiver

SECRET = "tk_9f3e7a51c2d84b06"


@pytest.fixture
def laptop_home(tmp_path):
    home = tmp_path / "laptop"
    home.mkdir()
    return home


def test_add_list_test_and_remove(agent_home, receiver, laptop_home):
    url = "%s/alerts-%s" % (receiver.url, SECRET)
    added = run_cli("notify", "local", "--add", url, "--format", "ntfy", "--on", "failed,training", "--quiet", "22:00-07:00",
                    home=laptop_home, check=0)
    assert added.stdout.startswith("added c1  ntfy") and "%s/…" % receiver.url in added.stdout and SECRET not in added.stdout
    assert "on failed,training  quiet 22:00-07:00" in added.stdout

    tested = run_cli("notify", "local", "--test", home=laptop_home, check=0)
    assert tested.stdout.strip() == "c1 delivered"
    request = receiver.wait_for(1)[0]
    assert request["path"] == "/alerts-" + SECRET and request["headers"]["Tags"] == "bell"
    assert "this channel works" in request["body"].decode()

    listed = json.loads(run_cli("notify", "local", "--list", "--json", home=laptop_home, check=0).stdout)
    channel = listed["channels"][0]
    assert channel["url"] == receiver.url + "/…" and channel["on"] == ["failed", "training"] and channel["quiet"] == "22:00-07:00"
    assert channel["status"]["state"] == "ok"

    receiver.down()
    refused = run_cli("notify", "local", "--test", "c1", home=laptop_home, check=1)
    assert refused.stdout.startswith("c1 not delivered: cannot connect")
    listed = run_cli("notify", "local", home=laptop_home, check=0)
    assert "last error cannot connect" in listed.stdout and SECRET not in listed.stdout

    run_cli("notify", "local", "--remove", "c1", home=laptop_home, check=0)
    assert "no channels on local" in run_cli("notify", "local", home=laptop_home, check=0).stdout
    bad = run_cli("notify", "local", "--add", "ftp://example.org/x", home=laptop_home, check=2)
    assert "http:// or https://" in bad.stderr


def test_command_channel_from_the_cli(agent_home, laptop_home, tmp_path):
    out = tmp_path / "mail.json"
    added = run_cli("notify", "local", "--command", "--on", "failed", "--", "sh", "-c", 'cat > "$0"', str(out), home=laptop_home, check=0)
    assert "c1  command  sh -c" in added.stdout
    run_cli("notify", "local", "--test", home=laptop_home, check=0)
    assert json.loads(out.read_text())["alerts"][0]["kind"] == "test"


def test_run_notify_tells_of_a_job_that_finished_and_one_that_failed(agent_home, client, receiver, laptop_home):
    # A channel that takes failures only: a job whose submission asked is told everywhere.
    client.call("notify.add", {"url": receiver.url + "/hook", "format": "json", "on": "failed"})
    good = run_cli("run", "local", "--notify", "--name", "quick one", "--", "sh", "-c", "echo all done", home=laptop_home, check=0).stdout.strip()
    bad = run_cli("run", "local", "--notify", "--", "sh", "-c", "exit 3", home=laptop_home, check=0).stdout.strip()
    quiet = run_cli("run", "local", "--", "sh", "-c", "exit 0", home=laptop_home, check=0).stdout.strip()
    wait_for(lambda: status(client, "c1")["sent"] == 2, message="both ends delivered")
    alerts = {a["job_id"]: a for body in receiver.json_bodies() for a in body["alerts"]}
    assert set(alerts) == {good, bad}, "a job without --notify that succeeded is no news"
    assert alerts[good]["kind"] == "job_finished" and alerts[good]["watched"] is True
    assert alerts[good]["message"].startswith("%s (quick one) finished in " % good) and alerts[good]["log_tail"] == ["all done"]
    assert alerts[bad]["kind"] == "job_failed" and " exited 3 after " in alerts[bad]["message"]
    assert quiet not in alerts


def test_the_secret_url_is_only_in_the_channel_store(agent_home, client, receiver, laptop_home):
    broken = Receiver(mode="500")
    try:
        for url in ("%s/hook/%s" % (receiver.url, SECRET), "%s/hook/%s?token=%s" % (broken.url, SECRET, SECRET)):
            run_cli("notify", "local", "--add", url, "--format", "slack", "-v", home=laptop_home, check=0)
        run_cli("notify", "local", "--test", "-v", home=laptop_home, check=1)
        client.call("jobs.submit", {"argv": ["sh", "-c", "exit 4"]})
        wait_for(lambda: status(client, "c1")["sent"] == 1 and status(client, "c2")["failures"] >= 1, message="sent, and failed")
        shown = json.dumps(client.call("notify.list")) + json.dumps(client.call("daemon.info"))
        assert SECRET not in shown
    finally:
        broken.close()
    store = agent_home / "notify" / "channels.json"
    assert stat.S_IMODE(os.stat(store).st_mode) == 0o600 and SECRET in store.read_text()
    holding = []
    for root in (agent_home, laptop_home):
        for folder, _, files in os.walk(root):
            for name in files:
                path = os.path.join(folder, name)
                if path != str(store) and not os.path.islink(path) and os.path.isfile(path):
                    with open(path, "rb") as f:
                        if SECRET.encode() in f.read():
                            holding.append(path)
    assert holding == [], "the secret URL leaked into %s" % holding
