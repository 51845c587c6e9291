"""Draft-vocabulary coverage over the real sshd, the coverage job under the vLLM venv's python
(the host's ML interpreter, with transformers) and the tiny target of tests/serving_fixtures.py:
drafters whose d2t/t2d cover all, half and none of a text's tokens, and one with no vocabulary
maps at all, each checked against a count made here with the tokenizer and t2d directly; the
tokens a drafter cannot propose, decoded. (Two targets with different tokenizers:
test_coverage_compare.py, on the models built here.)"""

import json
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest

from tests import serving_fixtures
from tests.conftest import run_cli
from tests.sshd_fixtures import wait_for
from tui.connection import open_client

pytestmark = pytest.mark.timeout(900)
TEXT = (
    "The drafter proposes tokens and the target verifies them in one pass. When the drafter is right, "
    "several tokens come out of one cycle; when it is wrong, the target's own token is kept and the rest "
    "thrown away. A drafter can only propose what its vocabulary holds.\n"
) * 3

# Run under the venv's python: drafters with chosen draft vocabularies, a target whose tokenizer
# was trained on other text (the same ids then name other strings), and the counts to check.
BUILD = r'''
import collections, inspect, json, os, shutil, sys, textwrap, string
import torch
from safetensors.torch import load_file, save_file
from transformers import AutoTokenizer

models, out, text = sys.argv[1], sys.argv[2], open(sys.argv[3]).read()
target = os.path.join(models, "target")
tokenizer = AutoTokenizer.from_pretrained(target)
ids = tokenizer(text, add_special_tokens=False)["input_ids"]
vocab = len(tokenizer)
distinct = sorted(set(ids))
base = load_file(os.path.join(models, "drafter-random", "model.safetensors"))
draft_vocab = base["d2t"].shape[0]
assert len(distinct) <= draft_vocab and vocab - len(distinct) >= draft_vocab, (len(distinct), vocab)
others = [i for i in range(vocab) if i not in set(distinct)]

def drafter(name, target_ids):
    directory = os.path.join(out, name)
    os.makedirs(directory)
    shutil.copy(os.path.join(models, "drafter-random", "config.json"), directory)
    state = dict(base)
    if target_ids is None:
        del state["d2t"], state["t2d"]
        state["lm_head.weight"] = torch.zeros(vocab, base["lm_head.weight"].shape[1])
        config = json.load(open(os.path.join(directory, "config.json")))
        config["draft_vocab_size"] = vocab
        json.dump(config, open(os.path.join(directory, "config.json"), "w"))
    else:
        target_ids = sorted(target_ids)
        state["d2t"] = torch.tensor([t - d for d, t in enumerate(target_ids)], dtype=torch.int64)
        state["t2d"] = torch.tensor([i in set(target_ids) for i in range(vocab)], dtype=torch.bool)
    save_file(state, os.path.join(directory, "model.safetensors"), metadata={"format": "pt"})
    return directory

half = distinct[: len(distinct) // 2]
made = {
    "all": drafter("all", (distinct + others)[:draft_vocab]),
    "half": drafter("half", (half + others)[:draft_vocab]),
    "none": drafter("none", others[:draft_vocab]),
    "full": drafter("full", None),
}

def counted(directory, tok):
    """The count made directly: the text's ids under `tok`, each looked up in t2d."""
    ids = tok(text, add_special_tokens=False)["input_ids"]
    t2d = load_file(os.path.join(directory, "model.safetensors"))["t2d"].tolist()
    missing = collections.Counter(i for i in ids if not t2d[i])
    top = [{"id": i, "text": tok.decode([i]), "count": c} for i, c in sorted(missing.items(), key=lambda kv: (-kv[1], kv[0]))]
    return {"tokens": len(ids), "inside": len(ids) - sum(missing.values()), "top_missing": top}

# A second target: the same weights, a tokenizer trained on other text.
other = os.path.join(out, "target-other")
shutil.copytree(target, other)
for name in os.listdir(other):
    if name.startswith(("tokenizer", "special_tokens")):
        os.remove(os.path.join(other, name))
from tokenizers import Tokenizer, decoders, models as tmodels, pre_tokenizers, trainers
from transformers import PreTrainedTokenizerFast
source = inspect.getsource(textwrap) + inspect.getsource(string) + inspect.getsource(inspect)
bpe = Tokenizer(tmodels.BPE(unk_token="<unk>"))
bpe.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
bpe.decoder = decoders.ByteLevel()
bpe.train_from_iterator(source.splitlines(), trainers.BpeTrainer(vocab_size=vocab, special_tokens=["<unk>", "<s>", "</s>"],
                                                                 initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
PreTrainedTokenizerFast(tokenizer_object=bpe, bos_token="<s>", eos_token="</s>", unk_token="<unk>").save_pretrained(other)
other_tokenizer = AutoTokenizer.from_pretrained(other)
old_by_id = dict((i, s) for s, i in tokenizer.get_vocab().items())
new_by_id = dict((i, s) for s, i in other_tokenizer.get_vocab().items())
agree_ids = [d + o for d, o in enumerate(load_file(os.path.join(models, "drafter-agree", "model.safetensors"))["d2t"].tolist())]
json.dump({
    "drafters": made, "target_other": other,
    "counts": {name: counted(made[name], tokenizer) for name in ("all", "half", "none")},
    "half_on_other": counted(made["half"], other_tokenizer),
    "agree_ids_changed": sum(1 for i in agree_ids if old_by_id.get(i) != new_by_id.get(i)),
}, open(os.path.join(out, "made.json"), "w"))
'''


@pytest.fixture(scope="module")
def made():
    python = serving_fixtures.require_vllm()
    models = serving_fixtures.models(os.path.dirname(serving_fixtures.VLLM_VENV), python)
    out = Path(tempfile.mkdtemp(prefix="specdeck-coverage-"))  # the host's user reads it: not under root's pytest dir
    os.chmod(str(out), 0o755)
    text_path = out / "text.txt"
    text_path.write_text(TEXT)
    subprocess.run([python, "-c", BUILD, os.path.dirname(models["target"]), str(out), str(text_path)], check=True, timeout=600)
    subprocess.run(["chmod", "-R", "a+rX", str(out)], check=True)
    found = json.loads((out / "made.json").read_text())
    found.update(models=models, text_path=str(text_path))
    yield found
    shutil.rmtree(str(out), ignore_errors=True)


@pytest.fixture(scope="module")
def home(sshd, tmp_path_factory):
    """The laptop's HOME, which knows the test sshd as `gpuhost`."""
    return sshd.client_home(tmp_path_factory.mktemp("laptop"))


@pytest.fixture(scope="module")
def client(home):
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("HOME", str(home))
        patch.delenv("SSH_AUTH_SOCK", raising=False)
        connected = open_client("gpuhost")
        try:
            yield connected
        finally:
            connected.close()


def coverage_of(client, drafter, target, **params):
    job = client.call("checkpoint.coverage", dict({"drafter": drafter, "target": target, "python": serving_fixtures.vllm_python()}, **params))
    assert job["kind"] == "coverage"
    job = wait_for(lambda: (lambda j: j["process_state"] not in ("running", "starting") and j)(client.call("jobs.get", {"id": job["id"]})),
                   300, interval_s=0.5)
    result = (job.get("progress") or {}).get("result")
    assert result, "the coverage job failed: %s" % (job.get("progress") or {}).get("error")
    return result


@pytest.mark.parametrize("drafter", ["all", "half", "none"])
def test_coverage_equals_the_count_made_with_tokenizer_and_t2d(client, made, drafter):
    result = coverage_of(client, made["drafters"][drafter], made["models"]["target"], text=TEXT)
    counted = made["counts"][drafter]
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


def test_a_drafter_without_vocabulary_maps_covers_everything(client, made):
    result = coverage_of(client, made["drafters"]["full"], made["models"]["target"], text=TEXT)
    assert result["coverage"] == 1.0 and result["full_vocabulary"] is True and "by construction" in result["note"]


def test_coverage_from_a_text_file_on_the_host_is_kept_as_the_drafters_last(client, made):
    result = coverage_of(client, made["drafters"]["half"], made["models"]["target"], text_path=made["text_path"])
    assert result["text"] == made["text_path"]
    last = client.call("checkpoint.coverage_last", {"drafter": made["drafters"]["half"]})
    assert last["result"]["coverage"] == result["coverage"] and last["result"]["time"] == result["time"]


def test_coverage_command_prints_the_jobs_result(home, made):
    """`specdeck coverage` sends a text of this machine, waits for the job and prints its result."""
    reply = run_cli("coverage", "gpuhost", made["drafters"]["half"], "--target", made["models"]["target"], "--text", made["text_path"],
                    "--python", serving_fixtures.vllm_python(), "--json", home=home, timeout=300, check=0)
    result = json.loads(reply.stdout)
    counted = made["counts"]["half"]
    assert result["tokens"] == counted["tokens"] and result["inside"] == counted["inside"]
    text = run_cli("coverage", "gpuhost", made["drafters"]["half"], "--target", made["models"]["target"], "--text", made["text_path"],
                   "--python", serving_fixtures.vllm_python(), home=home, timeout=300, check=0).stdout
    assert text.startswith("coverage      %.4f   %d of %d target tokens" % (result["coverage"], counted["inside"], counted["tokens"]))
    assert "never proposed" in text and repr(counted["top_missing"][0]["text"]) in text


async def test_tensors_pane_shows_the_drafters_last_coverage(client, made):
    """The EAGLE-3 summary of a drafter carries the coverage the host last measured for it (the
    text-file run above), and a drafter never measured says how to measure it."""
    from tests.test_app_tensors import TensorsHost, text_of, wait_until
    from textual.widgets import Static

    from tui.checkpoints.pane import TensorsPane

    last = client.call("checkpoint.coverage_last", {"drafter": made["drafters"]["half"]})["result"]
    app = TensorsHost(client)
    async with app.run_test(size=(160, 40)) as pilot:
        pane = app.query_one(TensorsPane)
        pane.open_path(made["drafters"]["half"])
        summary = pane.query_one("#tensors-summary", Static)
        await wait_until(pilot, lambda: "coverage " in text_of(summary))
        assert "coverage %.4f of target's tokens on %s" % (last["coverage"], made["text_path"]) in text_of(summary)
        pane.open_path(made["drafters"]["none"])
        await wait_until(pilot, lambda: "coverage not measured" in text_of(summary) or "coverage 0.0000" in text_of(summary))
