"""Fixture checkpoints for the checkpoint tests and benchmarks, written with the real safetensors.

Small drafters in every layout (SpecForge, speculators, original EAGLE, vLLM-native, plain HF),
sharded checkpoints, every corruption the inspector names, and the full-size layout of the
published K2 drafter (AQ-MedAI/Kimi-K2-Instruct-eagle3) as a sparse or a real 2.4 GB file.
"""

import json
import os
import random
import struct
import tempfile
import zlib
from pathlib import Path

import numpy as np
from safetensors import TensorSpec, serialize_file

# safetensors' header dtype codes -> the names its TensorSpec constructor takes.
_SPEC_NAMES = {
    "BOOL": "bool", "U8": "uint8", "I8": "int8", "I16": "int16", "U16": "uint16",
    "I32": "int32", "U32": "uint32", "I64": "int64", "U64": "uint64",
    "F16": "float16", "BF16": "bfloat16", "F32": "float32", "F64": "float64",
    "F8_E4M3": "float8_e4m3fn", "F8_E4M3FNUZ": "float8_e4m3fnuz", "F8_E5M2": "float8_e5m2",
    "F8_E5M2FNUZ": "float8_e5m2fnuz", "F8_E8M0": "float8_e8m0fnu", "F4": "float4_e2m1fn_x2",
    "C64": "complex64",
}
_BITS = {"BOOL": 8, "U8": 8, "I8": 8, "I16": 16, "U16": 16, "I32": 32, "U32": 32, "I64": 64,
         "U64": 64, "F16": 16, "BF16": 16, "F32": 32, "F64": 64, "F8_E4M3": 8, "F8_E4M3FNUZ": 8,
         "F8_E5M2": 8, "F8_E5M2FNUZ": 8, "F8_E8M0": 8, "F4": 4, "C64": 64}


class Tensor(object):
    """A tensor to write: safetensors dtype code, shape, and raw little-endian bytes."""

    def __init__(self, dtype, shape, data=None, values=0):
        self.dtype = dtype
        self.shape = list(shape)
        count = 1
        for d in self.shape:
            count *= d
        self.nbytes = count * _BITS[dtype] // 8
        if data is None:
            # The bytes follow from dtype and shape (and `values`, for weights of their own).
            key = (dtype, self.shape) if not values else (dtype, self.shape, values)
            rng = np.random.default_rng(zlib.crc32(repr(key).encode()))
            data = rng.integers(0, 256, self.nbytes, dtype=np.uint8).tobytes()
        self.data = bytes(data)
        assert len(self.data) == self.nbytes, (dtype, shape, len(self.data))


def save(path, tensors, metadata=None):
    """Write {name: Tensor} with safetensors' own serializer (header order, padding and all)."""
    buffers = []
    specs = {}
    for name, t in tensors.items():
        buf = np.frombuffer(t.data, dtype=np.uint8).copy() if t.nbytes else np.zeros(1, np.uint8)
        buffers.append(buf)
        shape = list(t.shape)
        if t.dtype == "F4":
            shape[-1] //= 2  # the constructor takes the packed storage shape and doubles it back
        specs[name] = TensorSpec(dtype=_SPEC_NAMES[t.dtype], shape=shape, data_ptr=buf.ctypes.data,
                                 data_len=t.nbytes)
    serialize_file(specs, str(path), metadata=metadata)
    return str(path)


def write_json(path, value):
    with open(str(path), "w") as f:
        json.dump(value, f, indent=2)
    return str(path)


# ---------------------------------------------------------------------------------------------
# Small drafters in each layout

SMALL = dict(hidden=64, target_hidden=64, draft_vocab=96, target_vocab=256, intermediate=128,
             heads=4, kv_heads=2, head_dim=16)


def vocab_maps(draft_vocab, target_vocab, seed=0):
    """(d2t bytes, t2d bytes, kept target ids): target = draft + d2t[draft], t2d marks the kept ids."""
    kept = sorted(random.Random(seed).sample(range(target_vocab), draft_vocab))
    d2t = struct.pack("<%dq" % draft_vocab, *[t - i for i, t in enumerate(kept)])
    flags = bytearray(target_vocab)
    for t in kept:
        flags[t] = 1
    return d2t, bytes(flags), kept


def eagle3_tensors(hidden, target_hidden, draft_vocab, target_vocab, intermediate, heads, kv_heads,
                   head_dim, dtype="BF16", embed=False, seed=0, values=0):
    """A one-layer EAGLE-3 drafter in the speculators naming (layers.0.*). `seed` picks the
    vocabulary maps, `values` the weights (the same for drafters of one shape unless it differs)."""
    d2t, t2d, _ = vocab_maps(draft_vocab, target_vocab, seed)
    q, kv = heads * head_dim, kv_heads * head_dim

    def weight(shape):
        return Tensor(dtype, shape, values=values)

    t = {
        "d2t": Tensor("I64", [draft_vocab], d2t),
        "t2d": Tensor("BOOL", [target_vocab], t2d),
        "fc.weight": weight([hidden, 3 * target_hidden]),
        "lm_head.weight": weight([draft_vocab, hidden]),
        "norm.weight": weight([hidden]),
        "layers.0.hidden_norm.weight": weight([hidden]),
        "layers.0.input_layernorm.weight": weight([hidden]),
        "layers.0.post_attention_layernorm.weight": weight([hidden]),
        "layers.0.self_attn.q_proj.weight": weight([q, 2 * hidden]),
        "layers.0.self_attn.k_proj.weight": weight([kv, 2 * hidden]),
        "layers.0.self_attn.v_proj.weight": weight([kv, 2 * hidden]),
        "layers.0.self_attn.o_proj.weight": weight([hidden, q]),
        "layers.0.mlp.gate_proj.weight": weight([intermediate, hidden]),
        "layers.0.mlp.up_proj.weight": weight([intermediate, hidden]),
        "layers.0.mlp.down_proj.weight": weight([hidden, intermediate]),
    }
    if embed:
        t["embed_tokens.weight"] = weight([target_vocab, hidden])
    return t


def rename(tensors, layout, target_layers=32):
    """Speculators-named tensors under the names another layout gives them."""
    out = {}
    for name, t in tensors.items():
        if layout in ("specforge", "eagle") and name.startswith("layers.0."):
            name = "midlayer." + name[len("layers.0."):]
        elif layout == "vllm":
            if name == "d2t":
                name = "draft_id_to_target_id"
            elif name == "t2d":
                continue  # vLLM skips t2d
            elif name.startswith("layers.0."):
                name = "model.layers.%d.%s" % (target_layers, name[len("layers.0."):])
            elif name != "lm_head.weight":
                name = "model." + name
        out[name] = t
    return out


def drafter_config(layout, hidden, target_hidden, draft_vocab, target_vocab, intermediate, heads,
                   kv_heads, head_dim, aux_layer_ids=None, norm_before_residual=None):
    llama = {"hidden_size": hidden, "intermediate_size": intermediate, "num_attention_heads": heads,
             "num_key_value_heads": kv_heads, "head_dim": head_dim, "vocab_size": target_vocab,
             "num_hidden_layers": 1, "rms_norm_eps": 1e-05, "rope_theta": 10000.0, "hidden_act": "silu",
             "max_position_embeddings": 4096, "model_type": "llama"}
    if layout == "speculators":
        config = {"architectures": ["Eagle3Speculator"], "speculators_model_type": "eagle3",
                  "transformer_layer_config": llama, "draft_vocab_size": draft_vocab,
                  "norm_before_residual": True if norm_before_residual is None else norm_before_residual,
                  "target_hidden_size": target_hidden,
                  "speculators_config": {"algorithm": "eagle3", "default_proposal_method": "greedy",
                                         "proposal_methods": [{"proposal_type": "greedy", "speculative_tokens": 3}],
                                         "verifier": {"name_or_path": "example/target", "architectures": ["LlamaForCausalLM"]}}}
        if aux_layer_ids is not None:
            config["eagle_aux_hidden_state_layer_ids"] = aux_layer_ids
        return config
    config = dict(llama)
    config["draft_vocab_size"] = draft_vocab
    config["architectures"] = {"specforge": ["LlamaForCausalLMEagle3"], "eagle": ["LlamaForCausalLM"],
                               "vllm": ["Eagle3LlamaForCausalLM"]}[layout]
    if target_hidden != hidden:
        config["target_hidden_size"] = target_hidden
    if aux_layer_ids is not None:
        config["eagle_config"] = {"eagle_aux_hidden_state_layer_ids": aux_layer_ids, "use_aux_hidden_state": True}
    if norm_before_residual is not None:
        config["norm_before_residual"] = norm_before_residual
    return config


def write_drafter(directory, layout="specforge", config=True, embed=None, aux_layer_ids=None,
                  norm_before_residual=None, seed=0, dtype="BF16", values=0, **dims):
    """A small EAGLE-3 drafter directory (model.safetensors + config.json) in the given layout;
    drafters of one shape hold the same weights unless their `values` differ."""
    d = dict(SMALL)
    d.update(dims)
    os.makedirs(str(directory), exist_ok=True)
    tensors = eagle3_tensors(d["hidden"], d["target_hidden"], d["draft_vocab"], d["target_vocab"],
                             d["intermediate"], d["heads"], d["kv_heads"], d["head_dim"], dtype=dtype,
                             embed=(layout == "eagle") if embed is None else embed, seed=seed, values=values)
    save(os.path.join(str(directory), "model.safetensors"), rename(tensors, layout), metadata={"format": "pt"})
    if config:
        write_json(os.path.join(str(directory), "config.json"),
                   drafter_config(layout, d["hidden"], d["target_hidden"], d["draft_vocab"], d["target_vocab"],
                                  d["intermediate"], d["heads"], d["kv_heads"], d["head_dim"],
                                  aux_layer_ids=aux_layer_ids, norm_before_residual=norm_before_residual))
    return str(directory)


def build_drafter(directory, **dims):
    """A small SpecForge-layout drafter (midlayer.*, no embed_tokens) with aux layer ids 1, 3, 5."""
    return Path(write_drafter(directory, layout="specforge", aux_layer_ids=[1, 3, 5], **dims))


def small_drafter_files(tmp_path):
    """config.json and model.safetensors of a tiny SpecForge-layout drafter, as bytes (what a
    fake hub serves)."""
    directory = build_drafter(tmp_path / "upload")
    return {name: (directory / name).read_bytes() for name in ("config.json", "model.safetensors")}


def write_eagle12_drafter(directory, hidden=64, vocab=256, intermediate=128, heads=4):
    """An EAGLE-1/2 drafter: fc fuses embedding + last hidden state (2 x hidden), no d2t."""
    os.makedirs(str(directory), exist_ok=True)
    t = {
        "embed_tokens.weight": Tensor("F16", [vocab, hidden]),
        "fc.weight": Tensor("F16", [hidden, 2 * hidden]),
        "fc.bias": Tensor("F16", [hidden]),
        "layers.0.self_attn.q_proj.weight": Tensor("F16", [hidden, hidden]),
        "layers.0.self_attn.k_proj.weight": Tensor("F16", [hidden, hidden]),
        "layers.0.self_attn.v_proj.weight": Tensor("F16", [hidden, hidden]),
        "layers.0.self_attn.o_proj.weight": Tensor("F16", [hidden, hidden]),
        "layers.0.post_attention_layernorm.weight": Tensor("F16", [hidden]),
        "layers.0.mlp.gate_proj.weight": Tensor("F16", [intermediate, hidden]),
        "layers.0.mlp.up_proj.weight": Tensor("F16", [intermediate, hidden]),
        "layers.0.mlp.down_proj.weight": Tensor("F16", [hidden, intermediate]),
    }
    save(os.path.join(str(directory), "model.safetensors"), t)
    write_json(os.path.join(str(directory), "config.json"),
               {"architectures": ["LlamaForCausalLM"], "hidden_size": hidden, "vocab_size": vocab,
                "num_attention_heads": heads, "num_hidden_layers": 1, "intermediate_size": intermediate})
    return str(directory)


def hf_model_tensors(layers=2, hidden=32, vocab=128, intermediate=64):
    t = {"model.embed_tokens.weight": Tensor("BF16", [vocab, hidden]),
         "model.norm.weight": Tensor("BF16", [hidden]),
         "lm_head.weight": Tensor("BF16", [vocab, hidden])}
    for i in range(layers):
        p = "model.layers.%d." % i
        for proj in ("q_proj", "k_proj", "v_proj", "o_proj"):
            t[p + "self_attn.%s.weight" % proj] = Tensor("BF16", [hidden, hidden])
        t[p + "mlp.gate_proj.weight"] = Tensor("BF16", [intermediate, hidden])
        t[p + "mlp.up_proj.weight"] = Tensor("BF16", [intermediate, hidden])
        t[p + "mlp.down_proj.weight"] = Tensor("BF16", [hidden, intermediate])
        t[p + "input_layernorm.weight"] = Tensor("BF16", [hidden])
        t[p + "post_attention_layernorm.weight"] = Tensor("BF16", [hidden])
    return t


def write_hf_model(directory, layers=2, hidden=32, vocab=128):
    os.makedirs(str(directory), exist_ok=True)
    save(os.path.join(str(directory), "model.safetensors"), hf_model_tensors(layers, hidden, vocab))
    write_json(os.path.join(str(directory), "config.json"),
               {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": hidden,
                "num_hidden_layers": layers, "vocab_size": vocab, "num_attention_heads": 4})
    return str(directory)


def write_sharded(directory, tensors, shards=2, config=None, index_name="model.safetensors.index.json"):
    """Tensors split over `shards` files plus the HF index naming which shard holds which tensor."""
    os.makedirs(str(directory), exist_ok=True)
    names = sorted(tensors)
    weight_map = {}
    for i in range(shards):
        shard = "model-%05d-of-%05d.safetensors" % (i + 1, shards)
        part = names[i::shards]
        save(os.path.join(str(directory), shard), dict((n, tensors[n]) for n in part), metadata={"format": "pt"})
        for n in part:
            weight_map[n] = shard
    total = sum(t.nbytes for t in tensors.values())
    write_json(os.path.join(str(directory), index_name), {"metadata": {"total_size": total}, "weight_map": weight_map})
    if config is not None:
        write_json(os.path.join(str(directory), "config.json"), config)
    return str(directory)


# ---------------------------------------------------------------------------------------------
# The published K2 drafter, full size

K2_FILE_BYTES = 2382319104
K2_HEADER_BYTES = 1528
K2_TENSORS = [
    ("d2t", "I64", [32000]),
    ("fc.weight", "BF16", [7168, 21504]),
    ("lm_head.weight", "BF16", [32000, 7168]),
    ("midlayer.hidden_norm.weight", "BF16", [7168]),
    ("midlayer.input_layernorm.weight", "BF16", [7168]),
    ("midlayer.mlp.down_proj.weight", "BF16", [7168, 18432]),
    ("midlayer.mlp.gate_proj.weight", "BF16", [18432, 7168]),
    ("midlayer.mlp.up_proj.weight", "BF16", [18432, 7168]),
    ("midlayer.post_attention_layernorm.weight", "BF16", [7168]),
    # 64 kv heads x 128: with 8 kv heads ([1024, 14336]) the file would be 411,041,792 bytes
    # smaller than the published 2,382,319,104; only 64 makes it add up, header included.
    ("midlayer.self_attn.k_proj.weight", "BF16", [8192, 14336]),
    ("midlayer.self_attn.o_proj.weight", "BF16", [7168, 8192]),
    ("midlayer.self_attn.q_proj.weight", "BF16", [8192, 14336]),
    ("midlayer.self_attn.v_proj.weight", "BF16", [8192, 14336]),
    ("norm.weight", "BF16", [7168]),
    ("t2d", "BOOL", [163840]),
]
K2_CONFIG = {
    "architectures": ["LlamaForCausalLMEagle3"],
    "bos_token_id": 163584,
    "eos_token_id": 163585,
    "hidden_act": "silu",
    "hidden_size": 7168,
    "intermediate_size": 18432,
    "max_position_embeddings": 131072,
    "model_type": "llama",
    "num_attention_heads": 64,
    "num_key_value_heads": 64,
    "head_dim": 128,
    "num_hidden_layers": 1,
    "rms_norm_eps": 1e-05,
    "rope_theta": 50000.0,
    "tie_word_embeddings": False,
    "torch_dtype": "bfloat16",
    "draft_vocab_size": 32000,
    "vocab_size": 163840,
}
KIMI_K2_TARGET_CONFIG = {
    "architectures": ["DeepseekV3ForCausalLM"],
    "model_type": "kimi_k2",
    "hidden_size": 7168,
    "num_hidden_layers": 61,
    "vocab_size": 163840,
    "num_attention_heads": 64,
}
# Kimi K2.5 wraps its language model's fields in text_config.
KIMI_K25_TARGET_CONFIG = {
    "architectures": ["KimiK25ForConditionalGeneration"],
    "text_config": dict(KIMI_K2_TARGET_CONFIG),
}


def k2_header(dtype_override=None):
    """(header bytes as safetensors writes them, {name: (begin, end)}) for the K2 drafter."""
    sizes = {"I64": 8, "BF16": 2, "F16": 2, "BOOL": 1}
    ranked = {"I64": 0, "BF16": 1, "F16": 1, "BOOL": 2}  # safetensors: by dtype, widest first, then name
    entries = sorted(K2_TENSORS, key=lambda e: (ranked[e[1]], e[0]))
    header = {"__metadata__": {"format": "pt"}}
    offsets = {}
    cursor = 0
    for name, dtype, shape in entries:
        dtype = dtype_override if (dtype_override and dtype == "BF16") else dtype
        count = 1
        for d in shape:
            count *= d
        end = cursor + count * sizes[dtype]
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [cursor, end]}
        offsets[name] = (cursor, end)
        cursor = end
    raw = json.dumps(header, separators=(",", ":")).encode()
    raw += b" " * ((8 - len(raw) % 8) % 8)
    if dtype_override:
        raw = raw.ljust(K2_HEADER_BYTES)  # keep the file exactly the published size
    return raw, offsets


def write_k2_drafter(directory, sparse=True, dtype_override=None, config=True, chunk_bytes=64 << 20):
    """The K2 drafter's exact file layout. Sparse: header, d2t and t2d written, the rest a hole
    (truncate to full size). Not sparse: every byte written (for benchmarks that must read)."""
    os.makedirs(str(directory), exist_ok=True)
    path = os.path.join(str(directory), "model.safetensors")
    raw, offsets = k2_header(dtype_override)
    data_start = 8 + len(raw)
    d2t, t2d, _ = vocab_maps(32000, 163840, seed=2)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(raw)))
        f.write(raw)
        if sparse:
            f.seek(data_start + offsets["d2t"][0])
            f.write(d2t)
            f.seek(data_start + offsets["t2d"][0])
            f.write(t2d)
            f.truncate(K2_FILE_BYTES)
        else:
            rng = np.random.default_rng(7)
            block = rng.integers(0, 256, chunk_bytes, dtype=np.uint8).tobytes()
            data_end = max(end for _, end in offsets.values())
            cursor = 0
            while cursor < data_end:
                f.seek(data_start + cursor)
                take = min(chunk_bytes, data_end - cursor)
                f.write(block[:take])
                cursor += take
            f.seek(data_start + offsets["d2t"][0])
            f.write(d2t)
            f.seek(data_start + offsets["t2d"][0])
            f.write(t2d)
    if config:
        write_json(os.path.join(str(directory), "config.json"), K2_CONFIG)
    return str(directory)


# ---------------------------------------------------------------------------------------------
# Corruptions: raw files the real safetensors refuses, with the words our message must contain


def raw_file(path, header, data=b"", header_length=None):
    """A file with an arbitrary header (dict, or bytes as is) and data section."""
    body = header if isinstance(header, bytes) else json.dumps(header).encode()
    with open(str(path), "wb") as f:
        f.write(struct.pack("<Q", len(body) if header_length is None else header_length))
        f.write(body)
        f.write(data)
    return str(path)


def _t(dtype, shape, begin, end):
    return {"dtype": dtype, "shape": shape, "data_offsets": [begin, end]}


# (key, header, data length, words the problem message must contain, header_length override)
CORRUPTIONS = [
    ("header length absurd (1 TB)", {"w": _t("U8", [4], 0, 4)}, 4, ["header length", "1,000,000,000,000", "100,000,000"], 10 ** 12),
    ("header length beyond the file", {"w": _t("U8", [4], 0, 4)}, 4, ["header length", "beyond the end of the file"], 4096),
    ("header not JSON", b"{not json at all}       ", 0, ["not valid JSON"], None),
    ("header not an object", b"[1, 2, 3]", 0, ["not an object", "an array"], None),
    ("header not UTF-8", b'{"\xff\xfe":{}}', 0, ["not valid UTF-8"], None),
    ("unknown dtype", {"lm_head.weight": _t("Q4_K", [4], 0, 4)}, 4, ["lm_head.weight", "unknown dtype", "Q4_K"], None),
    ("offsets out of order", {"norm.weight": _t("U8", [4], 4, 0)}, 4, ["norm.weight", "out of order"], None),
    ("offsets overlapping", {"fc.weight": _t("U8", [8], 0, 8), "norm.weight": _t("U8", [8], 4, 12)}, 12,
     ["norm.weight", "overlap", "fc.weight"], None),
    ("offsets leave a gap", {"fc.weight": _t("U8", [4], 0, 4), "norm.weight": _t("U8", [4], 8, 12)}, 12,
     ["norm.weight", "gap", "4..8"], None),
    ("offsets beyond the file", {"fc.weight": _t("U8", [4], 0, 4), "lm_head.weight": _t("U8", [8], 4, 12)}, 8,
     ["lm_head.weight", "beyond the end of the file"], None),
    ("byte length not shape x dtype", {"fc.weight": _t("BF16", [2, 3], 0, 8)}, 8,
     ["fc.weight", "8 bytes", "[2, 3]", "BF16", "12 bytes"], None),
    ("file longer than the header says", {"fc.weight": _t("F32", [2], 0, 8)}, 20,
     ["longer than its header says", "12 bytes"], None),
    ("file shorter than the header says", {"fc.weight": _t("F32", [4], 0, 16)}, 10,
     ["shorter than its header says", "6 bytes missing"], None),
    ("sub-byte dtype off a byte boundary", {"w": _t("F4", [3], 0, 2)}, 2, ["'w'", "F4", "byte boundary"], None),
    ("shape not integers", {"fc.weight": _t("U8", [4.0], 0, 4)}, 4, ["fc.weight", "shape"], None),
    ("missing data_offsets", {"fc.weight": {"dtype": "U8", "shape": [4]}}, 4, ["fc.weight", "data_offsets"], None),
    ("file too short for a header", None, 0, ["too short"], None),
]


def write_corruption(path, case):
    key, header, data_len, _, header_length = case
    if header is None:
        with open(str(path), "wb") as f:
            f.write(b"\x05\x00\x00")
        return str(path)
    return raw_file(path, header, bytes(data_len), header_length)


# ---------------------------------------------------------------------------------------------
# A 64-shard MoE target (Kimi K2 / DeepSeek-V3 layout): real headers, no data (sparse files)

MOE_DIMS = dict(hidden=7168, vocab=163840, dense_intermediate=18432, moe_intermediate=2048, q_lora=1536,
                kv_lora=512, heads=64, head_dim=128, rope_dim=64)


def _fp8_with_scale(name, rows, cols):
    """An FP8 matrix and its block-wise (128 x 128) inverse scale, as DeepSeek-V3 stores them."""
    return [(name + ".weight", "F8_E4M3", [rows, cols]),
            (name + ".weight_scale_inv", "F32", [-(-rows // 128), -(-cols // 128)])]


def moe_tensor_specs(layers=61, experts=384, dense_layers=1):
    """(name, dtype, shape) of every tensor of a Kimi-K2-like MoE target, in checkpoint order.

    61 layers x 384 experts x 3 FP8 matrices, each with its scale, plus attention, norms,
    routers and shared experts: 139,583 tensors at the defaults.
    """
    d = MOE_DIMS
    h = d["hidden"]
    specs = [("model.embed_tokens.weight", "BF16", [d["vocab"], h])]
    for layer in range(layers):
        p = "model.layers.%d." % layer
        specs += [(p + "input_layernorm.weight", "BF16", [h]), (p + "post_attention_layernorm.weight", "BF16", [h])]
        specs += _fp8_with_scale(p + "self_attn.q_a_proj", d["q_lora"], h)
        specs.append((p + "self_attn.q_a_layernorm.weight", "BF16", [d["q_lora"]]))
        specs += _fp8_with_scale(p + "self_attn.q_b_proj", d["heads"] * (d["head_dim"] + d["rope_dim"]), d["q_lora"])
        specs += _fp8_with_scale(p + "self_attn.kv_a_proj_with_mqa", d["kv_lora"] + d["rope_dim"], h)
        specs.append((p + "self_attn.kv_a_layernorm.weight", "BF16", [d["kv_lora"]]))
        specs += _fp8_with_scale(p + "self_attn.kv_b_proj", d["heads"] * 2 * d["head_dim"], d["kv_lora"])
        specs += _fp8_with_scale(p + "self_attn.o_proj", h, d["heads"] * d["head_dim"])
        if layer < dense_layers:
            for proj, rows, cols in (("gate_proj", d["dense_intermediate"], h), ("up_proj", d["dense_intermediate"], h),
                                     ("down_proj", h, d["dense_intermediate"])):
                specs += _fp8_with_scale(p + "mlp." + proj, rows, cols)
            continue
        specs += [(p + "mlp.gate.weight", "BF16", [experts, h]), (p + "mlp.gate.e_score_correction_bias", "F32", [experts])]
        for prefix in ["mlp.shared_experts"] + ["mlp.experts.%d" % e for e in range(experts)]:
            i = d["moe_intermediate"]
            for proj, rows, cols in (("gate_proj", i, h), ("up_proj", i, h), ("down_proj", h, i)):
                specs += _fp8_with_scale(p + prefix + "." + proj, rows, cols)
    specs += [("model.norm.weight", "BF16", [h]), ("lm_head.weight", "BF16", [d["vocab"], h])]
    return specs


def _spec_bytes(dtype, shape):
    count = 1
    for dim in shape:
        count *= dim
    return count * _BITS[dtype] // 8


def write_header_only_shard(path, specs, metadata=None):
    """A safetensors file with a real header and its data section a hole (truncated to size)."""
    header = {"__metadata__": metadata or {"format": "pt"}}
    cursor = 0
    for name, dtype, shape in specs:
        end = cursor + _spec_bytes(dtype, shape)
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [cursor, end]}
        cursor = end
    raw = json.dumps(header, separators=(",", ":")).encode()
    raw += b" " * ((8 - len(raw) % 8) % 8)
    with open(str(path), "wb") as f:
        f.write(struct.pack("<Q", len(raw)))
        f.write(raw)
        f.truncate(8 + len(raw) + cursor)
    return cursor


def write_moe_target(directory, layers=61, experts=384, shards=64, dense_layers=1):
    """A sharded MoE target: model.safetensors.index.json, `shards` header-only files, config.json.

    Returns {"tensors": count, "tensor_bytes": sum of the tensors' bytes, "file_bytes": sum of
    the file sizes, "directory": directory}.
    """
    directory = str(directory)
    os.makedirs(directory, exist_ok=True)
    specs = moe_tensor_specs(layers, experts, dense_layers)
    per_shard = -(-len(specs) // shards)
    weight_map = {}
    tensor_bytes = file_bytes = 0
    for i in range(shards):
        shard = "model-%05d-of-%05d.safetensors" % (i + 1, shards)
        part = specs[i * per_shard:(i + 1) * per_shard]
        tensor_bytes += write_header_only_shard(os.path.join(directory, shard), part)
        file_bytes += os.path.getsize(os.path.join(directory, shard))
        for name, _, _ in part:
            weight_map[name] = shard
    write_json(os.path.join(directory, "model.safetensors.index.json"),
               {"metadata": {"total_size": tensor_bytes}, "weight_map": weight_map})
    d = MOE_DIMS
    write_json(os.path.join(directory, "config.json"),
               {"architectures": ["DeepseekV3ForCausalLM"], "model_type": "kimi_k2", "hidden_size": d["hidden"],
                "num_hidden_layers": layers, "vocab_size": d["vocab"], "num_attention_heads": d["heads"],
                "n_routed_experts": experts, "moe_intermediate_size": d["moe_intermediate"],
                "first_k_dense_replace": dense_layers})
    return {"tensors": len(specs), "tensor_bytes": tensor_bytes, "file_bytes": file_bytes, "directory": directory}


# Where the big targets are built once and kept between runs.
FIXTURE_CACHE = os.path.join(tempfile.gettempdir(), "specdeck-fixtures")


def cached_moe_target(cache_root, layers=61, experts=384, shards=64, dense_layers=1):
    """write_moe_target once per parameter set under cache_root, reused by later runs and tests.

    Built in a temporary sibling and renamed into place, so a run cut short leaves nothing
    that looks finished.
    """
    import shutil
    import tempfile

    key = "moe-%dl-%de-%ds-%dd-v1" % (layers, experts, shards, dense_layers)
    directory = os.path.join(str(cache_root), key)
    done = os.path.join(directory, "built.json")
    if os.path.exists(done):
        with open(done) as f:
            return json.load(f)
    os.makedirs(str(cache_root), exist_ok=True)
    scratch = tempfile.mkdtemp(prefix=key + ".", dir=str(cache_root))
    facts = write_moe_target(scratch, layers, experts, shards, dense_layers)
    facts["directory"] = directory
    write_json(os.path.join(scratch, "built.json"), facts)
    try:
        os.rename(scratch, directory)
    except OSError:  # another process finished first
        shutil.rmtree(scratch, ignore_errors=True)
    with open(done) as f:
        return json.load(f)
