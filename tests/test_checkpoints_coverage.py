"""Draft-vocabulary coverage over the real sshd, the coverage job under the vLLM venv's python
(the host's ML interpreter, with transformers) and the tiny target of tests/serving_fixtures.py:
drafters whose d2t/t2d cover all, half and none of a text's tokens, and one with no vocabulary
maps at all, each checked against a count made here with the tokenizer and t2d directly; the
tokens a drafter cannot propose, decoded. (Two targets with different tokenizers:
test_checkpoints_coverage_compare.py, on the models built here.)"""

import json

import pytest

from tests import serving_fixtures
from tests.helpers.cli import run_cli
from tests.helpers.coverage import TEXT, coverage_of

pytestmark = pytest.mark.timeout(900)


@pytest.mark.parametrize("drafter", ["all", "half", "none"])
def test_coverage_equals_the_count_made_with_tokenizer_and_t2d(coverage_client, coverage_made, drafter):
    result = coverage_of(coverage_client, coverage_made["drafters"][drafter], coverage_made["models"]["target"], text=TEXT)
    counted = coverage_made["counts"][drafter]
    assert result["tokens"] == counted["tokens"] and result["inside"] == counted["inside"]
    assert result["coverage"] == counted["inside"] / counted["tokens"]
    assert result["full_vocabulary"] is False and result["source"] == "d2t"
    if drafter == "all":
        assert result["coverage"] == 1.0 and result["top_missing"] == []
        assert [row["accept_length"] for row in result["bound"][:3]] == pytest.approx([2.0, 3.0, 4.0], abs=0.1)
    if drafter == "none":
        # No token can ever be accepted: one token a cycle at every K.
        assert result["coverage"] == 0.0 and all(row["accept_length"] == 1.0 for row in result["bound"])
    if drafter == "half":
        assert 0.0 < result["coverage"] < 1.0
        # The tokens it cannot propose, most frequent first, decoded by the target's tokenizer.
        expected = counted["top_missing"][: len(result["top_missing"])]
        assert [(row["id"], row["text"], row["count"]) for row in result["top_missing"]] == [(r["id"], r["text"], r["count"]) for r in expected]
        assert result["bound"][0]["accept_length"] < 2.0


def test_a_drafter_without_vocabulary_maps_covers_everything(coverage_client, coverage_made):
    result = coverage_of(coverage_client, coverage_made["drafters"]["full"], coverage_made["models"]["target"], text=TEXT)
    assert result["coverage"] == 1.0 and result["full_vocabulary"] is True and "by construction" in result["note"]


def test_coverage_from_a_text_file_on_the_host_is_kept_as_the_drafters_last(coverage_client, coverage_made):
    result = coverage_of(coverage_client, coverage_made["drafters"]["half"], coverage_made["models"]["target"], text_path=coverage_made["text_path"])
    assert result["text"] == coverage_made["text_path"]
    last = coverage_client.call("checkpoint.coverage_last", {"drafter": coverage_made["drafters"]["half"]})
    assert last["result"]["coverage"] == result["coverage"] and last["result"]["time"] == result["time"]


def test_coverage_command_prints_the_jobs_result(coverage_home, coverage_made):
    """`specdeck coverage` sends a text of this machine, waits for the job and prints its result."""
    reply = run_cli("coverage", "gpuhost", coverage_made["drafters"]["half"], "--target", coverage_made["models"]["target"], "--text", coverage_made["text_path"],
                    "--python", serving_fixtures.vllm_python(), "--json", home=coverage_home, timeout=300, check=0)
    result = json.loads(reply.stdout)
    counted = coverage_made["counts"]["half"]
    assert result["tokens"] == counted["tokens"] and result["inside"] == counted["inside"]
    text = run_cli("coverage", "gpuhost", coverage_made["drafters"]["half"], "--target", coverage_made["models"]["target"], "--text", coverage_made["text_path"],
                   "--python", serving_fixtures.vllm_python(), home=coverage_home, timeout=300, check=0).stdout
    assert text.startswith("coverage      %.4f   %d of %d target tokens" % (result["coverage"], counted["inside"], counted["tokens"]))
    assert "never proposed" in text and repr(counted["top_missing"][0]["text"]) in text


async def test_tensors_pane_shows_the_drafters_last_coverage(coverage_client, coverage_made):
    """The EAGLE-3 summary of a drafter carries the coverage the host last measured for it (the
    text-file run above), and a drafter never measured says how to measure it."""
    from tests.helpers.pilot import TensorsHost, text_of
    from tests.helpers.waits import wait_until
    from textual.widgets import Static

    from tui.checkpoints.pane import TensorsPane

    last = coverage_client.call("checkpoint.coverage_last", {"drafter": coverage_made["drafters"]["half"]})["result"]
    app = TensorsHost(coverage_client)
    async with app.run_test(size=(160, 40)) as pilot:
        pane = app.query_one(TensorsPane)
        pane.open_path(coverage_made["drafters"]["half"])
        summary = pane.query_one("#tensors-summary", Static)
        await wait_until(pilot, lambda: "coverage " in text_of(summary))
        assert "coverage %.4f of target's tokens on %s" % (last["coverage"], coverage_made["text_path"]) in text_of(summary)
        pane.open_path(coverage_made["drafters"]["none"])
        await wait_until(pilot, lambda: "coverage not measured" in text_of(summary) or "coverage 0.0000" in text_of(summary))
