"""Servers attached by URL, as `spec --url` and `baseline` show them: a page that answers 200 `ok`
(a health check, another service) is said to have no speculation figures rather than shown fresh
with every figure empty; an attached server's URL with a password in it is printed by `baseline`
with the password masked, in its text and its --json."""

import json

import pytest

from tests.helpers.cli import run_cli
from tests.helpers.waits import wait_for
from tests.hostile_servers import AFTER, AFTER_ACCEPT_LENGTH, _reply, healthy

PASSWORD = "s3cret-pw"


def ok_page(sock, server):
    _reply(sock, b"ok", headers="Content-Type: text/plain\r\n")


def test_a_page_that_answers_ok_has_no_speculation_figures(agent_home, servers):
    page = servers(ok_page)
    shown = run_cli("spec", "local", "--url", page.url, timeout=60)
    assert shown.returncode == 0, shown.stderr
    lines = shown.stdout.splitlines()
    assert "note              %s/metrics has no speculation figures: none of vLLM's or SGLang's series are in it" % page.url in lines
    assert lines[0].startswith("accept length     -") and "stale" in lines[0]
    figures = json.loads(run_cli("spec", "local", "--url", page.url, "--json", timeout=60).stdout)
    assert figures["stale"] is True and "has no speculation figures" in figures["error"]


def test_baseline_masks_an_attached_servers_password(client, servers, agent_home):
    server = servers(healthy)
    url = server.url.replace("http://", "http://alice:%s@" % PASSWORD)
    server_id = client.call("serving.attach", {"url": url})["id"]
    wait_for(lambda: client.call("serving.stats", {"id": server_id}).get("window_s") is not None, 30)
    server.text = AFTER
    wait_for(lambda: client.call("serving.stats", {"id": server_id})["num_drafts"] == 62, 30)
    masked = server.url.replace("http://", "http://…@")

    saved = run_cli("baseline", "local", server_id, "--save", timeout=60)
    assert saved.returncode == 0, saved.stderr
    assert "kept on the host for %s" % masked in saved.stdout and PASSWORD not in saved.stdout
    listed = run_cli("baseline", "local", timeout=60)
    assert listed.stdout.splitlines()[0] == masked and PASSWORD not in listed.stdout
    entries = json.loads(run_cli("baseline", "local", "--json", timeout=60).stdout)["baselines"]
    assert [entry["url"] for entry in entries] == [masked]
    assert entries[0]["accept_length"] == pytest.approx(AFTER_ACCEPT_LENGTH)
    # The URL as the user gave it still names the baseline to remove.
    assert run_cli("baseline", "local", "--remove", "--url", url, timeout=60).returncode == 0
    assert json.loads(run_cli("baseline", "local", "--json", timeout=60).stdout)["baselines"] == []
