"""Writes a tiny EAGLE-3 training set-up for speculators on the CPU (run under its venv):
a random 4-layer Llama target (hidden 64, vocabulary 256), a preprocessed dataset of random
token sequences with their hidden states (3 aux layers + the last), and token frequencies.
Usage: python make_tiny_run.py DIR [SAMPLES]"""

import json
import os
import sys

import torch
from datasets import Dataset
from safetensors.torch import save_file

root = sys.argv[1]
samples = int(sys.argv[2]) if len(sys.argv) > 2 else 24
hidden, layers, vocab, seq_len = 64, 4, 256, 48
torch.manual_seed(0)
target = os.path.join(root, "target")
data = os.path.join(root, "data")
os.makedirs(target, exist_ok=True)
os.makedirs(os.path.join(data, "hidden_states"), exist_ok=True)
config = {
    "architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": hidden, "intermediate_size": 128,
    "num_hidden_layers": layers, "num_attention_heads": 4, "num_key_value_heads": 4, "head_dim": 16,
    "vocab_size": vocab, "max_position_embeddings": 512, "rms_norm_eps": 1e-5, "hidden_act": "silu",
    "initializer_range": 0.02, "rope_theta": 10000.0, "tie_word_embeddings": False, "torch_dtype": "float32",
    "bos_token_id": 1, "eos_token_id": 2,
}
with open(os.path.join(target, "config.json"), "w") as f:
    json.dump(config, f)
save_file({"model.embed_tokens.weight": torch.randn(vocab, hidden) * 0.02,
           "lm_head.weight": torch.randn(vocab, hidden) * 0.02,
           "model.norm.weight": torch.ones(hidden)}, os.path.join(target, "model.safetensors"))
# A word-level tokenizer of the 256 ids ("t0".."t255"): speculators loads the target's processor.
from tokenizers import Tokenizer, models, pre_tokenizers
from transformers import PreTrainedTokenizerFast

words = {"t%d" % i: i for i in range(vocab)}
words.update({"<unk>": 0, "<s>": 1, "</s>": 2})
backend = Tokenizer(models.WordLevel(vocab={w: i for w, i in words.items()}, unk_token="<unk>"))
backend.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
PreTrainedTokenizerFast(tokenizer_object=backend, unk_token="<unk>", bos_token="<s>", eos_token="</s>").save_pretrained(target)
rows = {"input_ids": [], "loss_mask": [], "seq_len": []}
counts = {}
for index in range(samples):
    # A repeating pattern the drafter can learn a little of in a few steps.
    start = int(torch.randint(3, vocab - 8, (1,)))
    ids = torch.tensor([3 + (start + i * 7) % (vocab - 3) for i in range(seq_len)], dtype=torch.long)
    mask = torch.ones(seq_len, dtype=torch.long)
    rows["input_ids"].append(ids.tolist())
    rows["loss_mask"].append(mask.tolist())
    rows["seq_len"].append(seq_len)
    for token in ids.tolist():
        counts[token] = counts.get(token, 0) + 1
    states = torch.randn(seq_len, 4, hidden) * 0.5
    save_file({"hidden_states": states.contiguous(), "token_ids": ids}, os.path.join(data, "hidden_states", "hs_%d.safetensors" % index))
Dataset.from_dict(rows).with_format("torch").save_to_disk(data)
torch.save(counts, os.path.join(data, "token_freq.pt"))
print(json.dumps({"target": target, "data": data}))
