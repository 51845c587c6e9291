"""The serving feed against hostile inference servers, through a real daemon: each beside a
healthy server whose figures stay fresh and exact while the hostile one is marked with its
reason, and the service never leaves `running`. Then a figure that turns stale is shown as
stale on the wire, in the follow stream and by `specdeck spec`."""

import json

import pytest

from remote.serving.sampler import RECORDED
from tests.helpers.cli import run_cli
from tests.helpers.waits import wait_for
from tests.hostile_servers import AFTER, AFTER_ACCEPT_LENGTH, BEHAVIOURS, healthy, trickle


def service(client, name="serving"):
    return next(s for s in client.call("daemon.services")["services"] if s["name"] == name)


def source_status(client, key):
    return next((s for s in service(client)["detail"].get("source_list", ()) if s["key"] == key), None)


def healthy_accept_length(client, server):
    """Attach `server`, let the feed read it idle, then give it AFTER's counters: its figures."""
    server_id = client.call("serving.attach", {"url": server.url})["id"]
    wait_for(lambda: client.call("serving.stats", {"id": server_id}).get("window_s") is not None, 30)
    server.text = AFTER
    figures = wait_for(lambda: (lambda f: f if f["num_drafts"] == 62 else None)(client.call("serving.stats", {"id": server_id})), 30)
    return server_id, figures


@pytest.mark.parametrize("kind, reason", [
    ("trickle", "deadline"),
    ("huge", "cap"),
    ("nan", "not a count"),
    ("redirect", "another host"),
    ("html", "not Prometheus text"),
    ("gzip_bomb", "MiB after decompression"),
    ("empty", "empty answer"),
])
def test_a_hostile_server_never_holds_up_a_healthy_one(client, servers, kind, reason):
    bad = servers(BEHAVIOURS[kind])
    bad_id = client.call("serving.attach", {"url": bad.url})["id"]
    good_id, figures = healthy_accept_length(client, servers(healthy))
    assert figures["accept_length"] == pytest.approx(AFTER_ACCEPT_LENGTH) and figures["stale"] is False
    # The hostile one is marked with its reason, on the wire and in the service's status ...
    marked = wait_for(lambda: (lambda s: s if s and s["failures"] >= 2 and reason in (s["error"] or "") else None)(source_status(client, bad_id)), 60)
    assert marked["state"] in ("retrying", "running") and marked["age_s"] is None  # never a good figure from it
    bad_figures = client.call("serving.stats", {"id": bad_id})
    assert bad_figures["stale"] is True and reason in bad_figures["error"]
    # ... while the healthy one was read all along, fresh, and the service itself is running.
    good = client.call("serving.stats", {"id": good_id})
    assert good["stale"] is False and good["accept_length"] == pytest.approx(AFTER_ACCEPT_LENGTH)
    assert source_status(client, good_id)["failures"] == 0
    assert service(client)["state"] == "running"
    assert client.call("ping")["time"] > 0


def test_a_flooding_server_cannot_grow_the_store(client, servers):
    flood = servers(BEHAVIOURS["flood"])
    flood_id = client.call("serving.attach", {"url": flood.url})["id"]
    good_id, figures = healthy_accept_length(client, servers(healthy))
    assert figures["accept_length"] == pytest.approx(AFTER_ACCEPT_LENGTH)
    # 40,000 positions and 2,000 label sets offered; 32 positions kept, the rest said so.
    flooded = wait_for(lambda: (lambda f: f if f.get("per_position") else None)(client.call("serving.stats", {"id": flood_id})), 60)
    assert len(flooded["per_position"]) == 32
    assert any("position 32" in note for note in flooded["notes"]) and any("label sets" in note for note in flooded["notes"])
    wait_for(lambda: source_status(client, flood_id)["reads"] >= 4, 60)
    recorded = client.call("history.series", {"source": "serving"})["series"]
    of_flood = [s for s in recorded if s["labels"].get("job") == flood_id]
    assert 0 < len(of_flood) <= len(RECORDED) + 32
    assert {s["labels"]["position"] for s in of_flood if s["name"] == "per_position"} <= {str(p) for p in range(32)}
    assert service(client)["state"] == "running"


def test_a_figure_that_turns_stale_is_shown_stale_everywhere(client, servers, agent_home):
    server = servers(healthy)
    records = []
    client.subscribe("serving.follow", {}, lambda data, seq: records.extend(data.get("records", [])))
    server_id, figures = healthy_accept_length(client, server)
    assert figures["stale"] is False and figures["age_s"] < 2.0
    server.behaviour = trickle  # from now on each scrape stops at its deadline
    stale = wait_for(lambda: (lambda f: f if f["stale"] and f["age_s"] > 3 else None)(client.call("serving.stats", {"id": server_id})), 60)
    assert stale["accept_length"] == pytest.approx(AFTER_ACCEPT_LENGTH)  # the last good figures, said to be old
    assert "deadline" in stale["error"]
    marker = wait_for(lambda: [r for r in records if r.get("server") == server_id and r.get("stale")], 30)
    assert marker[-1]["error"] and marker[-1]["age_s"] is not None
    shown = run_cli("spec", "local", server_id, check=0)
    assert "(stale, " in shown.stdout and " s old)" in shown.stdout, shown.stdout
    as_json = json.loads(run_cli("spec", "local", server_id, "--json", check=0).stdout)
    assert as_json["stale"] is True and as_json["age_s"] > 3 and "deadline" in as_json["error"]
    # A window given the way `gpus --since` takes one.
    assert run_cli("spec", "local", server_id, "--window", "1d", "--json", check=0).returncode == 0
