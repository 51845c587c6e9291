"""The K advisor over a real vLLM (CPU) and the real sshd, with the tiny target and drafters of
tests/serving_fixtures.py: accept length at every K' <= K from one server's per-position counts
(an agreeing pair at K=3 gives 2, 3, 4 exactly; a random drafter 1, 1, 1), a K sweep benchmark
(the baseline once, one server per K) whose accept lengths equal those separate runs give, and
the advice drawn from both. One agreeing server is shared by the module's tests."""

import json
import os
import shutil
import subprocess
import tempfile
import time

import pytest
from textual.widgets import Static

from tests import serving_fixtures
from tests.helpers.cli import run_cli
from tests.helpers.pilot import OnePane
from tests.helpers.waits import wait_for
from tests.helpers.waits import wait_until
from tests.notify_receiver import Receiver
from tests.helpers.vllm import free_port
from tui.serving.advisor import advice_lines
from tui.serving.pane import SpeculationPane

pytestmark = pytest.mark.timeout(2400)  # a sweep starts three vLLM servers one after the other
K = 3
SWEEP_KS = [2, 4]  # the baseline and two servers: K=2 within the live K, K=4 beyond it
READY_TIMEOUT_S = 900
PLAIN_PROMPTS = [[5, 6, 7, 8], [9, 10, 11, 12, 13], [20, 21, 22]]  # no spoiler token: every draft agrees


def start_server(client, models, drafter):
    job = client.call("serving.start", {
        "target": models["target"], "drafter": drafter, "k": K, "port": free_port(),
        "python": serving_fixtures.vllm_python(), "env": serving_fixtures.SERVER_ENV, "engine_args": serving_fixtures.ENGINE_ARGS,
    }, timeout=120)
    status = wait_for(lambda: (lambda s: s["state"] != "starting" and s)(client.call("serving.status", {"id": job["id"]})),
                      READY_TIMEOUT_S, interval_s=1.0)
    assert status["state"] == "ready", "the server died while starting: %s" % status["reason"]
    return job


def stop_server(client, job):
    client.call("jobs.stop", {"id": job["id"], "grace_s": 5})
    wait_for(lambda: client.call("jobs.get", {"id": job["id"]})["process_state"] not in ("running", "starting"), 60)


def served_figures(client, job, models, prompts):
    """The server's figures over a window holding exactly `prompts`' requests."""
    wait_for(lambda: client.call("serving.stats", {"id": job["id"]}).get("window_s") is not None, 30)
    time.sleep(1.2)  # the sampler reads the idle server once more: the window opens after it
    start = time.time()
    for prompt in prompts:
        serving_fixtures.complete(job["meta"]["url"], models["target"], prompt, 32)
    ended = time.time()
    wait_for(lambda: (client.call("serving.stats", {"id": job["id"]}).get("time") or 0) > ended, 30)  # read after the burst
    return client.call("serving.stats", {"id": job["id"], "window_s": time.time() - start + 0.9})


@pytest.fixture(scope="module")
def pair_drafter(models):
    """The drafter path the agreeing server and the sweep serve: a copy of the agreeing drafter,
    whose files the regression test swaps for the random drafter's for a while (a drafter
    retrained in place: the same (target, drafter) pair, other weights)."""
    directory = tempfile.mkdtemp(prefix="specdeck-pair-")  # the host user reads it
    drafter = os.path.join(directory, "drafter")
    shutil.copytree(models["drafter_agree"], drafter)
    subprocess.run(["chmod", "-R", "a+rX", directory], check=True)
    yield drafter
    shutil.rmtree(directory, ignore_errors=True)


def put_files(source, drafter):
    for name in os.listdir(source):
        shutil.copyfile(os.path.join(source, name), os.path.join(drafter, name))


@pytest.fixture(scope="module")
def agreeing(gpuhost, models, pair_drafter):
    _home, client = gpuhost
    job = start_server(client, models, pair_drafter)
    try:
        yield job
    finally:
        stop_server(client, job)


@pytest.fixture(scope="module")
def agreeing_figures(gpuhost, agreeing, models):
    return served_figures(gpuhost[1], agreeing, models, PLAIN_PROMPTS)


def test_agreeing_pair_gives_every_k_up_to_the_running_one(agreeing_figures):
    figures = agreeing_figures
    assert figures["num_drafts"] > 0 and figures["accept_length"] == K + 1
    # K'=1, 2, 3 of one run at K=3; nothing said of K' > 3, which was never drafted.
    assert figures["per_k"] == [{"k": 1, "accept_length": 2.0}, {"k": 2, "accept_length": 3.0}, {"k": 3, "accept_length": 4.0}]


def test_random_drafter_gives_one_at_every_k_and_regresses_from_the_pairs_baseline(gpuhost, models, agreeing, agreeing_figures,
                                                                                      pair_drafter):
    """A baseline saved from the agreeing pair; then the random drafter's files at the same
    drafter path, served: 1.00 at every K, shown against the baseline, and the host's
    acceptance_regression alert reaches a loopback webhook."""
    home, client = gpuhost
    saved = json.loads(run_cli("baseline", "gpuhost", agreeing["id"], "--save", "--margin", "10%", "--for", "1s", "--json",
                               home=home, check=0).stdout)
    assert saved["baseline"] == dict(saved["baseline"], accept_length=4.0, per_position=[1.0, 1.0, 1.0], margin=0.1, for_s=1.0)
    assert (saved["target"], saved["drafter"]) == (models["target"], pair_drafter)
    listed = run_cli("baseline", "gpuhost", home=home, check=0).stdout
    assert "%s + %s" % (models["target"], pair_drafter) in listed and "alert under 3.60 (10% margin) for 1 s" in listed
    receiver = Receiver()
    channel = client.call("notify.add", {"url": receiver.url + "/hook", "format": "json"})["channel"]["id"]
    put_files(models["drafter_random"], pair_drafter)
    try:
        job = start_server(client, models, pair_drafter)
        try:
            figures = served_figures(client, job, models, PLAIN_PROMPTS)
            spec = run_cli("spec", "gpuhost", job["id"], home=home, check=0).stdout
            alert = wait_for(lambda: next((a for r in list(receiver.requests) for a in json.loads(r["body"])["alerts"]
                                           if a["kind"] == "acceptance_regression"), None), 60, message="the regression alert")
        finally:
            stop_server(client, job)
    finally:
        put_files(models["drafter_agree"], pair_drafter)
        client.call("notify.remove", {"id": channel})
        receiver.close()
        run_cli("baseline", "gpuhost", agreeing["id"], "--remove", home=home, check=0)
    assert figures["num_drafts"] > 0 and figures["accept_length"] == 1.0
    assert [row["accept_length"] for row in figures["per_k"]] == [1.0, 1.0, 1.0]
    assert figures["baseline"]["accept_length"] == 4.0
    assert "accept length 1.00, baseline 4.00 (-75%)" in spec
    assert alert["server"] == job["id"] and alert["baseline"]["accept_length"] == 4.0
    assert "accept length 1.00, baseline 4.00 (-75%)" in alert["message"]


@pytest.fixture(scope="module")
def sweep(gpuhost, models, pair_drafter, agreeing_figures, tmp_path_factory):
    """A finished K sweep of the agreeing pair over K=2 and 4, run as a user runs it (`specdeck bench
    --k 2,4`), after the live server's figures were taken: three servers one after the other."""
    home, client = gpuhost
    prompts = tmp_path_factory.mktemp("prompts") / "prompts.txt"
    prompts.write_text("".join("%s\n" % text for text in ("5 6 7 8", "9 10 11 12 13", "20 21 22")))
    env_args = []
    for key, value in serving_fixtures.SERVER_ENV.items():
        env_args += ["--env", "%s=%s" % (key, value)]
    result = run_cli("bench", "gpuhost", models["target"], "--drafter", pair_drafter, "--k", ",".join(map(str, SWEEP_KS)),
                     "--prompts", prompts, "--requests", 3, "--max-tokens", 32, "--port", free_port(), "--python", serving_fixtures.vllm_python(),
                     *env_args, "--json", "--", *serving_fixtures.ENGINE_ARGS, home=home, timeout=5 * READY_TIMEOUT_S, check=0)
    printed = json.loads(result.stdout)
    job = [j for j in client.call("jobs.list", {"kind": "benchmark"})["jobs"] if j["meta"].get("ks") == SWEEP_KS][-1]
    return job["id"], dict(job["progress"]["result"], printed=printed)


def test_sweep_accept_lengths_equal_separate_runs_and_best_k_is_fastest(sweep, agreeing_figures):
    _job_id, result = sweep
    rows = result["sweep"]
    assert [row["k"] for row in rows] == SWEEP_KS
    # Each K on its own server gives K+1 (every draft agrees) ...
    assert [row["accept_length"] for row in rows] == [3.0, 5.0]
    # ... and K=2 is what the one live server at K=3 said of K'=2 from its per-position counts.
    assert rows[0]["accept_length"] == next(entry["accept_length"] for entry in agreeing_figures["per_k"] if entry["k"] == 2)
    fastest = max(rows, key=lambda row: row["tokens_per_s"])
    assert result["best_k"] == fastest["k"] and result["spec_tps"] == fastest["tokens_per_s"]
    for row in rows:
        assert row["cycle_ms"] == pytest.approx(1000.0 * row["accept_length"] / row["tokens_per_s"])
        assert row["speedup"] == pytest.approx(row["tokens_per_s"] / result["baseline_tps"])
    others = sorted((row["tokens_per_s"] for row in rows if row is not fastest), reverse=True)
    assert result["margin"]["over_next_k"] == pytest.approx(fastest["tokens_per_s"] / others[0] - 1.0)
    model = result["cost_model"]
    assert model["points"] == len(SWEEP_KS)
    # The least-squares line passes through the mean point of the measured cycle times.
    mean_k = sum(SWEEP_KS) / len(SWEEP_KS)
    assert model["intercept_ms"] + model["slope_ms_per_k"] * mean_k == pytest.approx(sum(r["cycle_ms"] for r in rows) / len(rows))
    # What `specdeck bench --k 2,4 --json` printed: the same rows and best K.
    printed = result["printed"]
    assert printed["best_k"] == result["best_k"] and [row["k"] for row in printed["per_k"]] == SWEEP_KS
    assert [row["tokens_per_s"] for row in printed["per_k"]] == [row["tokens_per_s"] for row in rows]


def test_advice_on_the_live_server_uses_the_sweep_cost_model(gpuhost, agreeing, sweep):
    _home, client = gpuhost
    sweep_id, result = sweep
    advice = client.call("serving.advise", {"id": agreeing["id"]}, timeout=30)
    assert advice["k_current"] == K and advice["sweep"] == sweep_id
    rows = advice["per_k"]
    assert [(row["k"], row["source"], row["measured"]) for row in rows] == [(1, "live", True), (2, "live", True), (3, "live", True), (4, "sweep", True)]
    assert [row["accept_length"] for row in rows] == [2.0, 3.0, 4.0, 5.0]
    model = result["cost_model"]
    swept = {row["k"]: row for row in result["sweep"]}
    for row in rows:
        # A K the sweep ran has its measured cycle (one speedup for one sweep); the others the cost model's.
        cycle_ms = swept[row["k"]]["cycle_ms"] if row["k"] in swept else model["intercept_ms"] + model["slope_ms_per_k"] * row["k"]
        assert row["cycle_ms"] == pytest.approx(cycle_ms)
        assert row["tokens_per_s"] == pytest.approx(1000.0 * row["accept_length"] / cycle_ms)
        assert row["speedup"] == pytest.approx(row["tokens_per_s"] / result["baseline_tps"])
    best = max(rows, key=lambda row: row["tokens_per_s"])
    assert advice["best_k"] == best["k"] and advice["reason"].startswith(("K=%d:" % best["k"], "no K pays off: the best is K=%d:" % best["k"]))


def test_advice_on_the_sweep_alone_picks_its_fastest_k(gpuhost, sweep):
    _home, client = gpuhost
    sweep_id, result = sweep
    advice = client.call("serving.advise", {"id": sweep_id}, timeout=30)
    assert advice["k_current"] is None and advice["best_k"] == result["best_k"]
    assert [row["tokens_per_s"] for row in advice["per_k"]] == [row["tokens_per_s"] for row in result["sweep"]]


def test_coverage_of_the_tokens_a_running_server_generates(gpuhost, agreeing, models):
    """The coverage job on a server's own output: the agreeing target only ever emits AGREE_TOKEN,
    which the drafter's vocabulary holds; the ids are the server's, one sequence per request."""
    _home, client = gpuhost
    job = client.call("checkpoint.coverage", {"drafter": models["drafter_agree"], "server": agreeing["id"], "prompts": PLAIN_PROMPTS,
                                              "max_tokens": 16, "python": serving_fixtures.vllm_python()})
    job = wait_for(lambda: (lambda j: j["process_state"] not in ("running", "starting") and j)(client.call("jobs.get", {"id": job["id"]})),
                   300, interval_s=0.5)
    result = (job.get("progress") or {}).get("result")
    assert result, "the coverage job failed: %s" % (job.get("progress") or {}).get("error")
    assert result["server"] == agreeing["id"] and result["target"] == models["target"]
    assert result["tokens"] == len(PLAIN_PROMPTS) * 16 and result["coverage"] == 1.0 and result["top_missing"] == []
    assert "tokenized again" not in result["note"]  # the engine's own token ids, not its text re-read


def test_spec_and_advise_commands_say_what_the_wire_says(gpuhost, agreeing, sweep):
    home, client = gpuhost
    spec = json.loads(run_cli("spec", "gpuhost", agreeing["id"], "--json", home=home, check=0).stdout)
    assert spec["per_k"] == [{"k": 1, "accept_length": 2.0}, {"k": 2, "accept_length": 3.0}, {"k": 3, "accept_length": 4.0}]
    printed = json.loads(run_cli("advise", "gpuhost", agreeing["id"], "--json", home=home, check=0).stdout)
    assert set(printed) == {"k_current", "per_k", "best_k", "reason", "break_even", "per_position", "per_position_conditional",
                            "sweep_command"}
    assert printed["sweep_command"] is None  # the pair's sweep is there: none to run
    assert [set(row) for row in printed["per_k"]] == [{"k", "accept_length", "cycle_ms", "tokens_per_s", "speedup", "measured"}] * 4
    wire = client.call("serving.advise", {"id": agreeing["id"]})
    assert printed["best_k"] == wire["best_k"] and printed["reason"] == wire["reason"]
    text = run_cli("advise", "gpuhost", agreeing["id"], home=home, check=0).stdout
    assert "K' > 3: beyond what this server measured" in text and "sweep %s (its prompts)" % sweep[0] in text


async def test_speculation_pane_shows_a_row_per_k_as_advise_does(gpuhost, agreeing, sweep):
    """The pane's K rows: the live K'=1..3, the sweep's K=4, break-even and pays-off for each,
    and the advice, the lines `specdeck advise` prints for the same window."""
    _home, client = gpuhost
    app = OnePane(SpeculationPane(), client=client)
    async with app.run_test(size=(160, 50)) as pilot:
        pane = app.query_one(SpeculationPane)
        pane.focus()
        await wait_until(pilot, lambda: pane.selected == agreeing["id"], message="the running server")
        rows = pane.query_one("#spec-k", Static)
        # The sweep's rows may come first (the pane asks serving.advise before the window has drafts): the live ones then.
        await wait_until(pilot, lambda: "advice:" in str(rows.render()) and "live (running K)" in str(rows.render()), timeout_s=60,
                         message="the K rows")
        shown = str(rows.render())
        advice = client.call("serving.advise", {"id": agreeing["id"], "window_s": float(pane.window_s)})
        assert shown.splitlines()[1:] == advice_lines(advice)
        assert "sweep %s (its prompts)" % sweep[0] in shown and "live (running K)" in shown
