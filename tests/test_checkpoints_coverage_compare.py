"""compare of a drafter with a new target, over the real sshd: whether the target it was trained
for and the new one share a tokenizer (the same ids for the same strings), how many of the
drafter's draft tokens land on ids that name other strings when they do not, and what coverage
says that costs, on the targets and drafters test_checkpoints_coverage.py builds."""

import pytest

from tests.helpers.cli import run_cli
from tests.helpers.coverage import TEXT, coverage_of

pytestmark = pytest.mark.timeout(900)


def test_targets_with_different_tokenizers_are_told_apart(coverage_client, coverage_made):
    models = coverage_made["models"]
    same = coverage_client.call("checkpoint.compare", {"a": models["target"], "b": models["target"]}, timeout=120)
    assert same["tokenizer"]["same"] is True
    # The agreeing drafter was trained for `target`; served with the other target, its d2t ids mean other strings.
    moved = coverage_client.call("checkpoint.compare", {"a": models["drafter_agree"], "b": coverage_made["target_other"], "trained_target": models["target"]}, timeout=120)
    tokenizer = moved["tokenizer"]
    assert tokenizer["same"] is False and tokenizer["draft_ids_changed"] == coverage_made["agree_ids_changed"] > 0
    assert "another string in the new target" in tokenizer["message"]
    # Not said which target it was trained for: the message names the command's flag, not a wire field.
    unsaid = coverage_client.call("checkpoint.compare", {"a": models["drafter_agree"], "b": coverage_made["target_other"]}, timeout=120)["tokenizer"]
    assert unsaid["same"] is None and "--trained-for TARGET" in unsaid["message"] and "trained_target" not in unsaid["message"]
    kept = coverage_client.call("checkpoint.compare", {"a": models["drafter_agree"], "b": models["target"], "trained_target": models["target"]}, timeout=120)
    assert kept["tokenizer"]["same"] is True and kept["tokenizer"]["draft_ids_changed"] == 0
    # What the change costs: the same drafter's coverage of the same text under the new target's tokenizer.
    on_other = coverage_of(coverage_client, coverage_made["drafters"]["half"], coverage_made["target_other"], text=TEXT)
    assert on_other["tokens"] == coverage_made["half_on_other"]["tokens"] and on_other["inside"] == coverage_made["half_on_other"]["inside"]
    assert on_other["coverage"] != coverage_made["counts"]["half"]["inside"] / coverage_made["counts"]["half"]["tokens"]


def test_compare_command_says_the_tokenizers_differ(coverage_home, coverage_made):
    models = coverage_made["models"]
    reply = run_cli("compare", "gpuhost:%s" % models["drafter_agree"], "gpuhost:%s" % coverage_made["target_other"], "--trained-for", models["target"],
                    home=coverage_home, timeout=300)
    assert "Tokenizer: DIFFERENT" in reply.stdout
    assert "the drafter's d2t maps %d of its" % coverage_made["agree_ids_changed"] in reply.stdout
