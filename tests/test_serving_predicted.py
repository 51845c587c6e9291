"""Predicted beside measured: a server job of the real local agent serves a drafter with a
speculation profile beside it (as `specdeck score` writes it); its engine is a real HTTP server
replaying a real vLLM's /metrics (tests/replay_engine.py, tests/serving_data). `spec --json` and
the Speculation pane show the profile's accept length and per-position shares beside the live
ones with its age and conditions; a hostile profile (a FIFO, a huge file, wrong types, weights
newer than it) is refused and named; the host alerts through its real daemon when the live accept
length stays under the predicted one; an engine whose per-position counters do not add up to its
accept length is shown as disagreeing, in `spec --json`, its text and the pane."""

import json
import os
import socket
import sys
import time

import pytest
from textual.widgets import Static

from tests import replay_engine
from tests.checkpoint_fixtures import write_drafter, write_json
from tests.helpers.cli import run_cli
from tests.helpers.metrics import DATA
from tests.helpers.pilot import OnePane, text_of
from tests.helpers.waits import wait_for, wait_until
from tui.serving.pane import SpeculationPane
from tui.transport.connection import open_client

K = 3
# The recorded interval: 62 drafts, 180 accepted tokens, 60 at each of the 3 positions: 3.90 live.
PROFILE = {
    "method": "eagle3", "num_speculative_tokens": K, "verification_method": "longest_prefix", "accept_length_model": "chain_analytic",
    "conditional_accept_rates": [0.95, 0.947368, 0.888889], "marginal_accept_rates": [0.95, 0.9, 0.8], "mean_accept_length": 3.65,
    "acceptance_length_histogram": {"1": 5, "2": 5, "3": 10, "4": 80},
    "measurement_conditions": {"dataset": "/data/tiny-hs", "split": "val", "held_out": True, "target_model": None, "num_samples": 8,
                               "num_positions": 100, "temperature": 0.0},
}


def free_port():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture
def quick_client(agent_home, monkeypatch):
    """A client of a local daemon that tells a live accept length under the prediction after 3 s
    (the product waits 10 min): the environment it starts with says so."""
    monkeypatch.setenv("SPECDECK_UNDER_PREDICTED_S", "3")
    client = open_client("local")
    yield client
    client.close()


def models(tmp_path, name="drafter", profile=PROFILE):
    target = tmp_path / "target"
    if not target.exists():
        target.mkdir()
        write_json(target / "config.json", {"architectures": ["LlamaForCausalLM"], "hidden_size": 64, "vocab_size": 256,
                                            "num_hidden_layers": 8, "max_position_embeddings": 8192})
    drafter = write_drafter(tmp_path / name, aux_layer_ids=[1, 3, 5])
    if profile is not None:
        profile = dict(profile, measurement_conditions=dict(profile["measurement_conditions"], target_model=str(target)))
        (tmp_path / name / "speculation_profile.json").write_text(json.dumps(profile))
    return str(target), str(drafter)


def serve(client, tmp_path, drafter, target, metrics="vllm_metrics_after.txt", drafts_factor=1.0):
    """A server job whose engine replays `metrics` (a file of tests/serving_data, or a path), ready."""
    engine = tmp_path / "engine"
    if not engine.exists():
        replay_engine.install(engine)
    job = client.call("serving.start", {
        "target": target, "drafter": drafter, "k": K, "port": free_port(), "python": sys.executable,
        "env": {"PYTHONPATH": str(engine), "REPLAY_METRICS": str(DATA / metrics if "/" not in str(metrics) else metrics),
                "REPLAY_DRAFTS_FACTOR": str(drafts_factor)}}, timeout=60)
    wait_for(lambda: client.call("serving.status", {"id": job["id"]})["state"] == "ready", 30)
    return job["id"]


def spec(server_id):
    """`specdeck spec local SERVER --json` over the last 10 s, once the server has drafted in it."""
    return wait_for(lambda: (lambda r: r if r.get("num_drafts") else None)(
        json.loads(run_cli("spec", "local", server_id, "--window", "10s", "--json", check=0).stdout)), 30)


def test_spec_shows_the_profiles_prediction_beside_the_live_figures(client, tmp_path):
    target, drafter = models(tmp_path)
    server_id = serve(client, tmp_path, drafter, target)
    reply = spec(server_id)
    assert reply["accept_length"] == pytest.approx(1 + 180 / 62)
    predicted = reply["predicted"]
    assert predicted["accept_length"] == pytest.approx(3.65) and predicted["per_position"] == [0.95, 0.9, 0.8]
    assert predicted["per_position_conditional"] == pytest.approx([0.95, 0.947368, 0.888889])
    assert predicted["path"] == os.path.join(drafter, "speculation_profile.json") and predicted["error"] is None
    assert predicted["conditions"]["dataset"] == "/data/tiny-hs" and predicted["conditions"]["num_samples"] == 8
    assert time.time() - predicted["written_at"] < 600 and predicted["notes"] == []
    assert reply["identity"] == {"holds": True, "one_plus_shares": pytest.approx(1 + 180 / 62), "accept_length": pytest.approx(1 + 180 / 62),
                                 "message": None}
    text = run_cli("spec", "local", server_id, "--window", "10s", check=0).stdout
    assert "predicted         3.65 at K=3 (live 3.90: +7%)" in text
    assert "0.95 0.90 0.80  unconditional, the profile's" in text
    assert "scored on /data/tiny-hs (val, held out), 8 samples, temperature 0" in text


def test_a_hostile_profile_is_refused_and_named_never_trusted(client, tmp_path):
    target, drafter = models(tmp_path)
    path = os.path.join(drafter, "speculation_profile.json")
    server_id = serve(client, tmp_path, drafter, target)

    def refused(expected):
        reply = wait_for(lambda: (lambda r: r if expected in str((r.get("predicted") or {}).get("error")) else None)(spec(server_id)), 30)
        assert reply["predicted"]["accept_length"] is None and reply["predicted"]["per_position"] == []
        assert reply["accept_length"] == pytest.approx(1 + 180 / 62)  # the live figures go on
        return reply

    os.remove(path)
    os.mkfifo(path)
    refused("speculation_profile.json refused: cannot read speculation_profile.json: it is a FIFO, not a regular file")
    os.remove(path)
    with open(path, "w") as f:
        f.write(json.dumps(PROFILE) + " " * (2 << 20))
    refused("speculation_profile.json refused: speculation_profile.json is 2,097,")
    with open(path, "w") as f:
        json.dump(dict(PROFILE, marginal_accept_rates=["0.95", 0.9, 0.8]), f)
    refused("marginal_accept_rates[0] is '0.95', not a number in 0..1")
    with open(path, "w") as f:
        json.dump(dict(PROFILE, mean_accept_length=3.9), f)
    refused("its figures disagree: mean_accept_length 3.900, 1 + the sum of marginal_accept_rates 3.650")
    with open(path, "w") as f:
        json.dump(PROFILE, f)
    past = time.time() - 3600
    os.utime(path, (past, past))  # scored an hour ago; the weights written since
    refused("the drafter's weights changed after it was scored")
    text = run_cli("spec", "local", server_id, "--window", "10s", check=0).stdout
    assert "predicted         none: speculation_profile.json refused: the drafter's weights changed after it was scored" in text
    assert "3.65" not in text


async def test_an_engine_whose_per_position_counters_do_not_add_up_is_shown_disagreeing(client, tmp_path):
    """The recorded /metrics with position 2's counter halved (30 of 62 drafts, not 60): the
    accepted-tokens counter says 3.90, the positions 1 + 0.97 + 0.97 + 0.48 = 3.42."""
    target, drafter = models(tmp_path, profile=None)
    edited = tmp_path / "disagreeing_metrics.txt"
    edited.write_text((DATA / "vllm_metrics_after.txt").read_text().replace('position="2"} 60.0', 'position="2"} 30.0'))
    server_id = serve(client, tmp_path, drafter, target, metrics=edited)
    reply = spec(server_id)
    said = "the engine's figures disagree: 1 + \u03a3 shares = 3.42, accept length = 3.90"
    assert reply["identity"]["holds"] is False and reply["identity"]["message"] == said
    assert reply["accept_length"] == pytest.approx(1 + 180 / 62)  # each figure as the engine gave it
    assert reply["per_position"] == pytest.approx([60 / 62, 60 / 62, 30 / 62]) and reply["predicted"] is None
    assert said in run_cli("spec", "local", server_id, "--window", "10s", check=0).stdout.splitlines()[1]
    app = OnePane(SpeculationPane(), client=client)
    async with app.run_test(size=(120, 40)) as pilot:
        summary = app.query_one(SpeculationPane).query_one("#spec-summary", Static)
        await wait_until(pilot, lambda: said in text_of(summary), message="the disagreement in the pane")
        assert "accept length now 3.90" in text_of(summary)


async def test_the_pane_shows_the_prediction_beside_the_live_figures(client, tmp_path):
    target, drafter = models(tmp_path)
    server_id = serve(client, tmp_path, drafter, target)
    app = OnePane(SpeculationPane(), client=client)
    async with app.run_test(size=(120, 40)) as pilot:
        pane = app.query_one(SpeculationPane)
        summary, bars = pane.query_one("#spec-summary", Static), pane.query_one("#spec-bars", Static)
        await wait_until(pilot, lambda: "accept length now 3.90" in text_of(summary), message="the live figures")
        await wait_until(pilot, lambda: "predicted 3.65 at K=3 (live 3.90: +7%)" in text_of(summary), message="the profile's line")
        assert server_id in text_of(summary) and "scored on /data/tiny-hs (val, held out), 8 samples" in text_of(summary)
        assert "profile written" in text_of(summary) and "disagree" not in text_of(summary)
        await wait_until(pilot, lambda: "the profile's share (predicted): 0.95 0.90 0.80" in text_of(bars) and "96.8%" in text_of(bars),
                         message="the profile's shares beside the live bars")


def test_the_host_alerts_when_live_acceptance_stays_under_the_prediction(quick_client, tmp_path):
    """Two servers of drafters scored at 3.65: one serves at 3.90, the other at 2.45 (twice the
    drafts for the same accepted tokens). The host's daemon tells the second, naming it and both
    figures and why it may be; the first is within its prediction."""
    client = quick_client
    target, good = models(tmp_path, "good")
    _target, slow = models(tmp_path, "slow")
    good_id = serve(client, tmp_path, good, target)
    slow_id = serve(client, tmp_path, slow, target, drafts_factor=2.0)

    def told(server_id):
        return [a for a in client.call("notify.list")["recent"] if a["kind"] == "under_predicted" and a.get("server") == server_id]

    [alert] = wait_for(lambda: told(slow_id), 60)
    assert alert["categories"] == ["speculation"] and alert["job_id"] == slow_id
    assert "accept length 2.45, its drafter's profile predicts 3.65 (-33%, more than the 15% margin)" in alert["message"]
    assert "the method mistaken, a drafter served against another target, or prompts unlike the scored data" in alert["message"]
    assert alert["predicted"]["accept_length"] == pytest.approx(3.65) and alert["accept_length"] == pytest.approx(2.45, abs=0.01)
    assert alert["predicted"]["path"] == os.path.join(slow, "speculation_profile.json")
    assert told(good_id) == []  # served as long, within its prediction
