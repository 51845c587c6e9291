"""compare of a drafter with a new target, over the real sshd: whether the target it was trained
for and the new one share a tokenizer (the same ids for the same strings), how many of the
drafter's draft tokens land on ids that name other strings when they do not, and what coverage
says that costs, on the targets and drafters test_checkpoints_coverage.py builds."""

import pytest

from tests.helpers.cli import run_cli
from tests.helpers.coverage import TEXT, client, coverage_of, home, made  # noqa: F401 (fixtures)

pytestmark = pytest.mark.timeout(900)


def test_targets_with_different_tokenizers_are_told_apart(client, made):
    models = made["models"]
    same = client.call("checkpoint.compare", {"a": models["target"], "b": models["target"]}, timeout=120)
    assert same["tokenizer"]["same"] is True
    # The agreeing drafter was trained for `target`; served with the other target, its d2t ids mean other strings.
    moved = client.call("checkpoint.compare", {"a": models["drafter_agree"], "b": made["target_other"], "trained_target": models["target"]}, timeout=120)
    tokenizer = moved["tokenizer"]
    assert tokenizer["same"] is False and tokenizer["draft_ids_changed"] == made["agree_ids_changed"] > 0
    assert "another string in the new target" in tokenizer["message"]
    # Not said which target it was trained for: the message names the command's flag, not a wire field.
    unsaid = client.call("checkpoint.compare", {"a": models["drafter_agree"], "b": made["target_other"]}, timeout=120)["tokenizer"]
    assert unsaid["same"] is None and "--trained-for TARGET" in unsaid["message"] and "trained_target" not in unsaid["message"]
    kept = client.call("checkpoint.compare", {"a": models["drafter_agree"], "b": models["target"], "trained_target": models["target"]}, timeout=120)
    assert kept["tokenizer"]["same"] is True and kept["tokenizer"]["draft_ids_changed"] == 0
    # What the change costs: the same drafter's coverage of the same text under the new target's tokenizer.
    on_other = coverage_of(client, made["drafters"]["half"], made["target_other"], text=TEXT)
    assert on_other["tokens"] == made["half_on_other"]["tokens"] and on_other["inside"] == made["half_on_other"]["inside"]
    assert on_other["coverage"] != made["counts"]["half"]["inside"] / made["counts"]["half"]["tokens"]


def test_compare_command_says_the_tokenizers_differ(home, made):
    models = made["models"]
    reply = run_cli("compare", "gpuhost:%s" % models["drafter_agree"], "gpuhost:%s" % made["target_other"], "--trained-for", models["target"],
                    home=home, timeout=300)
    assert "Tokenizer: DIFFERENT" in reply.stdout
    assert "the drafter's d2t maps %d of its" % made["agree_ids_changed"] in reply.stdout
