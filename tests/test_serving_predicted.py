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
