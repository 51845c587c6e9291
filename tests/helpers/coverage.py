"""The coverage tests' models and text: a tiny target, drafters whose draft vocabularies cover
all, half and none of a text's tokens, a host to run the coverage job on, and the count made
with the tokenizer and t2d directly."""

import json
import os
import shutil
import subprocess
import tempfile
from pathlib import Path
from tests.helpers.cli import use_home

import pytest

from tests import serving_fixtures
from tests.helpers.waits import wait_for
from tui.transport.connection import open_client

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
def coverage_made():
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
def coverage_home(sshd, tmp_path_factory):
    """The laptop's HOME, which knows the test sshd as `gpuhost`."""
    return sshd.client_home(tmp_path_factory.mktemp("laptop"))


@pytest.fixture(scope="module")
def coverage_client(coverage_home):
    with pytest.MonkeyPatch.context() as patch:
        use_home(patch, coverage_home)
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
