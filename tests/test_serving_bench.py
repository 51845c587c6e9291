"""The A/B benchmark job over a real vLLM (CPU) and the real sshd: a baseline server, then one
with the random drafter, the same requests (a prompt file of two categories) through each. vLLM accepts none of a random drafter's
drafts, so its accept length is exactly 1.00, each cycle pays for K drafts and a K+1-token verify
to yield one token, and the benchmark must say it is slower, below break-even."""

import json

import pytest

from tests import serving_fixtures
from tests.helpers.cli import run_cli
from tests.helpers.vllm import free_port

pytestmark = pytest.mark.timeout(900)  # two vLLM start-ups on a 2-core machine (~55 s each when idle)


# Two categories of the user's own (bench --prompts), each request's figures filed under its prompt's.
PROMPT_FILE = '{"prompt": "Write a Python function that adds two numbers.", "category": "own code"}\n' \
              '{"prompt": "Tell me a story about a lighthouse.", "category": "own stories"}\n'


def test_bench_random_drafter_is_below_break_even(laptop, models, tmp_path):
    prompts = tmp_path / "prompts.jsonl"
    prompts.write_text(PROMPT_FILE)
    env_args = []
    for key, value in serving_fixtures.SERVER_ENV.items():
        env_args += ["--env", "%s=%s" % (key, value)]
    result = run_cli("bench", "gpuhost", models["target"], "--drafter", models["drafter_random"], "--k", "3",
                     "--requests", "4", "--max-tokens", "32", "--prompts", prompts, "--port", free_port(), "--python", serving_fixtures.vllm_python(),
                     *env_args, "--json", "--", *serving_fixtures.ENGINE_ARGS, home=laptop, timeout=900)
    assert result.returncode == 0, result.stderr
    reply = json.loads(result.stdout)
    assert set(reply) == {"baseline_tps", "spec_tps", "speedup", "accept_length", "cycle_ms", "break_even_accept_length", "noise",
                          "per_position", "per_position_conditional", "categories", "lengths", "worst", "flagged", "ks_used", "missing", "baseline",
                          "bad_replies"}
    assert reply["bad_replies"] == {"count": 0, "shown": []}  # a real vLLM's replies pass the checks
    assert reply["baseline"] is None  # none saved for the pair
    assert reply["accept_length"] == 1.0
    # Nothing accepted at position 0, so no draft reaches position 1: the conditional rate there is undefined, not 0/0.
    assert reply["per_position"] == [0.0] * 3 and reply["per_position_conditional"] == [0.0, None, None]
    # The prompt file's categories, two requests each (4 requests over its 2 prompts), from the server's own per-request metrics.
    assert [(group["category"], group["requests"]) for group in reply["categories"]] == [("own code", 2), ("own stories", 2)]
    assert reply["missing"] == 0
    assert all(group["accept_length"] == 1.0 and group["histogram"][1:] == [0, 0, 0] and group["speedup"] > 0 for group in reply["categories"])
    assert len(reply["flagged"]) == 4 and all(row["why"] == "acceptance near 0" for row in reply["flagged"])
    assert reply["baseline_tps"] > 0 and reply["spec_tps"] > 0
    assert reply["speedup"] == pytest.approx(reply["spec_tps"] / reply["baseline_tps"])
    assert reply["speedup"] < 1.0 and reply["break_even_accept_length"] > reply["accept_length"]
    # One cycle yields accept_length tokens: its time and the break-even follow from the rates.
    assert reply["cycle_ms"] == pytest.approx(1000.0 * reply["accept_length"] / reply["spec_tps"])
    assert reply["break_even_accept_length"] == pytest.approx(reply["cycle_ms"] / 1000.0 * reply["baseline_tps"])
