"""Checkpoint inspection as a user meets it: the K2 drafter, every layout, every corruption,
sharded checkpoints, compatibility verdicts, sha256, and the text the CLI prints."""

import builtins
import hashlib
import json
import os
import shutil
import subprocess
import sys

import pytest

from remote.checkpoints import report as ck
from tests.helpers.cli import python39
from tui.checkpoints.view import format_compare, format_inspect, format_size

sys.path.insert(0, os.path.dirname(__file__))
import checkpoint_fixtures as fx  # noqa: E402

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def errors(report):
    return [p["message"] for p in report["problems"] if p["level"] == "error"]


def warnings(report):
    return [p["message"] for p in report["problems"] if p["level"] == "warning"]


def tensor(report, name):
    return next(t for t in report["tensors"] if t["name"] == name)


def the_error(report, *words):
    """The one error message that contains all the words (fails listing what there was)."""
    found = [m for m in errors(report) if all(w in m for w in words)]
    assert found, "no error with %r among %r" % (words, errors(report))
    return found[0]


@pytest.fixture(scope="module")
def k2_dir(tmp_path_factory):
    return fx.write_k2_drafter(str(tmp_path_factory.mktemp("k2") / "Kimi-K2-Instruct-eagle3"))


@pytest.fixture(scope="module")
def k2(k2_dir):
    return ck.inspect(k2_dir)


# --------------------------------------------------------------------------- the published K2 drafter


def test_k2_file_has_the_published_size_and_inspects_clean(k2_dir, k2):
    path = os.path.join(k2_dir, "model.safetensors")
    assert os.path.getsize(path) == fx.K2_FILE_BYTES == 2382319104
    header, data_start, size = ck.read_header(path)
    assert data_start == 8 + fx.K2_HEADER_BYTES and size == 2382319104
    assert header["__metadata__"] == {"format": "pt"}
    assert k2["format"] == "specforge"
    assert k2["problems"] == []
    assert k2["total_bytes"] == 2382319104
    assert k2["files"] == [{"path": os.path.abspath(path), "bytes": 2382319104}]
    assert len(k2["tensors"]) == 15
    assert sum(t["bytes"] for t in k2["tensors"]) == 2382319104 - 8 - 1528


def test_k2_eagle3_fields_are_derived_right(k2):
    e = k2["eagle3"]
    assert {k: e[k] for k in ("hidden_size", "target_hidden_size", "draft_vocab_size", "target_vocab_size",
                              "intermediate_size", "num_attention_heads", "num_key_value_heads", "head_dim",
                              "aux_layer_ids")} == {
        "hidden_size": 7168, "target_hidden_size": 7168, "draft_vocab_size": 32000, "target_vocab_size": 163840,
        "intermediate_size": 18432, "num_attention_heads": 64, "num_key_value_heads": 64, "head_dim": 128,
        "aux_layer_ids": None}
    assert e["embed_tokens"] == "shared from the target at load time"
    assert e["norm_before_residual"] is False
    assert k2["config"]["architectures"] == ["LlamaForCausalLMEagle3"]


def test_k2_roles_say_what_the_notes_got_wrong(k2):
    fc = tensor(k2, "fc.weight")
    assert fc["shape"] == [7168, 21504]
    assert "3 auxiliary hidden states of the target" in fc["role"] and "3 x 7168 -> 7168" in fc["role"]
    assert "not QKV" in fc["role"]
    q = tensor(k2, "midlayer.self_attn.q_proj.weight")["role"]
    assert "embedding+hidden (2 x 7168)" in q and "64 heads x 128" in q
    d2t = tensor(k2, "d2t")
    assert d2t["shape"] == [32000] and d2t["dtype"] == "I64"
    assert "target = draft + d2t[draft]" in d2t["role"] and "32000 draft ids" in d2t["role"]
    t2d = tensor(k2, "t2d")
    assert t2d["shape"] == [163840] and t2d["dtype"] == "BOOL"
    assert "32000 target ids (of 163840)" in t2d["role"]
    assert "32000 draft-vocabulary logits" in tensor(k2, "lm_head.weight")["role"]
    assert all(t["role"] for t in k2["tensors"]), [t["name"] for t in k2["tensors"] if not t["role"]]


def test_k2_inspect_reads_the_header_and_vocab_maps_only(k2_dir, monkeypatch):
    read = [0]

    class Counting(object):
        def __init__(self, f):
            self.f = f

        def read(self, *args):
            data = self.f.read(*args)
            read[0] += len(data)
            return data

        def readinto(self, buffer):
            n = self.f.readinto(buffer)
            read[0] += n or 0
            return n

        def __getattr__(self, name):
            return getattr(self.f, name)

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            self.f.close()

    from remote.checkpoints import header_json, locate, vocab_maps

    counting_open = lambda *a, **kw: Counting(builtins.open(*a, **kw))  # noqa: E731
    for module in (header_json, locate, vocab_maps):  # the modules that open the checkpoint's files
        monkeypatch.setattr(module, "open", counting_open, raising=False)
    report = ck.inspect(k2_dir)
    assert report["problems"] == []
    # header (1.5 KB) + d2t (256,000) + t2d (163,840) + config.json, out of 2.38 GB
    assert read[0] < 430000, read[0]


def test_k2_text_view_shows_bytes_gb_and_gib(k2):
    text = format_inspect(k2)
    assert "2,382,319,104 bytes (2.38 GB, 2.22 GiB)" in text
    assert text.index("No problems found.") < text.index("Tensors: 15")
    assert "fc.weight" in text and "not QKV" in text
    assert "embed_tokens          shared from the target at load time" in text
    assert "vLLM uses (2, L//2, L-3)" in text


def test_format_size_shows_both_units():
    assert format_size(2382319104) == "2,382,319,104 bytes (2.38 GB, 2.22 GiB)"
    assert format_size(256000) == "256,000 bytes (256.00 kB, 250.00 KiB)"
    assert format_size(512) == "512 bytes"


def test_k2_drafter_fits_kimi_k2_and_k25(k2):
    verdict = ck.check_against_target(k2, fx.KIMI_K2_TARGET_CONFIG)
    assert verdict["verdict"] == "compatible", verdict
    assert verdict["aux_layer_ids"] == [2, 30, 58]
    assert verdict["aux_layer_ids_source"].startswith("vllm default")
    assert any("vLLM's default for a 61-layer target" in r for r in verdict["reasons"])
    assert ck.check_against_target(k2, fx.KIMI_K25_TARGET_CONFIG)["verdict"] == "compatible"


def test_k2_drafter_against_a_different_target_says_why(k2):
    llama = {"hidden_size": 4096, "vocab_size": 128256, "num_hidden_layers": 32}
    verdict = ck.check_against_target(k2, llama)
    assert verdict["verdict"] == "incompatible"
    text = " | ".join(verdict["reasons"])
    assert "3 x 7168" in text and "4096" in text
    assert "163840" in text and "128256" in text


def test_aux_layer_ids_beyond_the_target_are_named(tmp_path):
    report = ck.inspect(fx.write_drafter(tmp_path / "d", "specforge", aux_layer_ids=[2, 30, 70]))
    assert report["eagle3"]["aux_layer_ids"] == [2, 30, 70]
    verdict = ck.check_against_target(report, {"hidden_size": 64, "vocab_size": 256, "num_hidden_layers": 61})
    assert verdict["verdict"] == "incompatible"
    assert any("[70]" in r and "61 layers" in r for r in verdict["reasons"]), verdict


# --------------------------------------------------------------------------- layouts


@pytest.mark.parametrize("layout", ["specforge", "speculators", "eagle", "vllm"])
def test_each_eagle3_layout_is_recognised_with_its_dimensions(tmp_path, layout):
    report = ck.inspect(fx.write_drafter(tmp_path / layout, layout, aux_layer_ids=[1, 2, 3]))
    assert report["format"] == layout
    assert errors(report) == []
    e = report["eagle3"]
    assert (e["hidden_size"], e["target_hidden_size"], e["draft_vocab_size"], e["intermediate_size"]) == (64, 64, 96, 128)
    assert (e["num_attention_heads"], e["num_key_value_heads"], e["head_dim"]) == (4, 2, 16)
    assert e["target_vocab_size"] == 256
    assert e["aux_layer_ids"] == [1, 2, 3]


def test_speculators_config_fields_are_read(tmp_path):
    report = ck.inspect(fx.write_drafter(tmp_path / "s", "speculators", target_hidden=96, aux_layer_ids=[2, 9, 13]))
    e = report["eagle3"]
    assert e["target_hidden_size"] == 96 and e["hidden_size"] == 64
    assert e["norm_before_residual"] is True
    assert "3 x 96 -> 64" in tensor(report, "fc.weight")["role"]
    assert tensor(report, "layers.0.self_attn.q_proj.weight")["role"].startswith("attention query: embedding+hidden (2 x 64)")


def test_midlayer_names_without_config_are_specforge_and_with_plain_llama_config_original_eagle(tmp_path):
    assert ck.inspect(fx.write_drafter(tmp_path / "a", "specforge", config=False))["format"] == "specforge"
    original = ck.inspect(fx.write_drafter(tmp_path / "b", "eagle"))
    assert original["format"] == "eagle" and original["eagle3"] is not None
    assert original["eagle3"]["embed_tokens"] == "present"
    assert "often shared from the target" in tensor(original, "embed_tokens.weight")["role"]


def test_vllm_names_map_to_layer_zero_and_d2t(tmp_path):
    report = ck.inspect(fx.write_drafter(tmp_path / "v", "vllm"))
    names = [t["name"] for t in report["tensors"]]
    assert "model.layers.32.self_attn.q_proj.weight" in names and "draft_id_to_target_id" in names
    assert "target = draft + d2t[draft]" in tensor(report, "draft_id_to_target_id")["role"]
    assert "2 x 64" in tensor(report, "model.layers.32.self_attn.q_proj.weight")["role"]


def test_mla_and_moe_drafters_are_not_called_broken(tmp_path):
    """SpecForge also trains DeepSeek-style drafters: latent attention, expert MLPs."""
    h = 64
    changes = dict(("layers.0.self_attn.%s.weight" % p, None) for p in ("q_proj", "k_proj", "v_proj"))
    changes.update(dict(("layers.0.mlp.%s.weight" % p, None) for p in ("gate_proj", "up_proj", "down_proj")))
    changes.update({
        "midlayer.self_attn.q_a_proj.weight": fx.Tensor("BF16", [32, 2 * h]),
        "midlayer.self_attn.q_a_layernorm.weight": fx.Tensor("BF16", [32]),
        "midlayer.self_attn.q_b_proj.weight": fx.Tensor("BF16", [4 * 24, 32]),
        "midlayer.self_attn.kv_a_proj_with_mqa.weight": fx.Tensor("BF16", [16 + 8, 2 * h]),
        "midlayer.self_attn.kv_a_layernorm.weight": fx.Tensor("BF16", [16]),
        "midlayer.self_attn.kv_b_proj.weight": fx.Tensor("BF16", [4 * (16 + 16), 16]),
        "midlayer.mlp.gate.weight": fx.Tensor("BF16", [4, h]),
        "midlayer.mlp.experts.0.gate_proj.weight": fx.Tensor("BF16", [32, h]),
        "midlayer.mlp.experts.0.up_proj.weight": fx.Tensor("BF16", [32, h]),
        "midlayer.mlp.experts.0.down_proj.weight": fx.Tensor("BF16", [h, 32]),
    })
    renamed = dict(("midlayer." + k[len("layers.0."):] if k.startswith("layers.0.") else k, v) for k, v in changes.items())
    report = _drafter_with(tmp_path, **renamed)
    assert report["format"] == "specforge"
    assert errors(report) == []
    assert tensor(report, "midlayer.self_attn.kv_a_proj_with_mqa.weight")["role"].startswith(
        "MLA key/value latent + shared rope key: embedding+hidden (2 x 64)")
    assert tensor(report, "midlayer.mlp.experts.0.down_proj.weight")["role"] == "MoE expert 0: MLP down"
    assert tensor(report, "midlayer.mlp.gate.weight")["role"].startswith("MoE router")


def test_eagle12_drafter_is_original_eagle_but_not_eagle3(tmp_path):
    report = ck.inspect(fx.write_eagle12_drafter(tmp_path / "e"))
    assert report["format"] == "eagle"
    assert report["eagle3"] is None
    assert any("EAGLE-1/2" in w and "not EAGLE-3" in w for w in warnings(report))
    assert "(2 x 64 -> 64)" in tensor(report, "fc.weight")["role"]


def test_plain_hf_model_is_not_a_drafter(tmp_path):
    report = ck.inspect(fx.write_hf_model(tmp_path / "m"))
    assert report["format"] == "hf" and report["eagle3"] is None and errors(report) == []
    assert tensor(report, "model.layers.1.self_attn.q_proj.weight")["role"] == "layer 1: attention query projection"
    assert "not a drafter" in format_inspect(report)


def test_unrecognised_tensors_are_unknown(tmp_path):
    path = fx.save(tmp_path / "x.safetensors", {"encoder.blob": fx.Tensor("F32", [3])})
    report = ck.inspect(path)
    assert report["format"] == "unknown" and report["eagle3"] is None and report["config"] is None


# --------------------------------------------------------------------------- corruptions


@pytest.mark.parametrize("case", fx.CORRUPTIONS, ids=[c[0] for c in fx.CORRUPTIONS])
def test_each_corruption_is_named_exactly(tmp_path, case):
    path = fx.write_corruption(tmp_path / "model.safetensors", case)
    report = ck.inspect(path)
    message = the_error(report, *case[3])
    assert message.startswith("model.safetensors: ")


def test_header_errors_raise_from_read_header(tmp_path):
    path = fx.raw_file(tmp_path / "x.safetensors", {"a": {"dtype": "U8", "shape": [1], "data_offsets": [0, 1]}},
                       b"\0", header_length=10 ** 12)
    with pytest.raises(ck.HeaderError, match="1,000,000,000,000 bytes is absurd"):
        ck.read_header(path)


def test_a_truncated_download_says_how_much_is_missing(tmp_path, k2_dir):
    shutil.copy(os.path.join(k2_dir, "config.json"), str(tmp_path / "config.json"))
    with open(os.path.join(k2_dir, "model.safetensors"), "rb") as src, open(str(tmp_path / "model.safetensors"), "wb") as dst:
        dst.write(src.read(1 << 20))
        dst.truncate(2000000000)
    report = ck.inspect(str(tmp_path))
    assert the_error(report, "shorter than its header says", "382,319,104 bytes missing")
    assert the_error(report, "t2d", "beyond the end of the file")


def test_file_too_long_by_one_byte(tmp_path):
    fx.write_drafter(tmp_path, "specforge")
    with open(str(tmp_path / "model.safetensors"), "ab") as f:
        f.write(b"\0")
    report = ck.inspect(str(tmp_path))
    assert errors(report) == [the_error(report, "1 bytes longer than its header says")]


# --------------------------------------------------------------------------- sharded checkpoints


def _sharded_drafter(directory):
    tensors = fx.rename(fx.eagle3_tensors(**{k: fx.SMALL[k] for k in ("hidden", "target_hidden", "draft_vocab",
                                                                        "target_vocab", "intermediate", "heads",
                                                                        "kv_heads", "head_dim")}), "specforge")
    config = fx.drafter_config("specforge", 64, 64, 96, 256, 128, 4, 2, 16)
    return fx.write_sharded(directory, tensors, shards=2, config=config)


def test_sharded_checkpoint_lists_every_tensor_with_its_shard(tmp_path):
    report = ck.inspect(_sharded_drafter(tmp_path / "s"))
    assert report["format"] == "specforge" and report["problems"] == []
    assert len(report["files"]) == 2 and len(report["tensors"]) == 15
    assert report["total_bytes"] == sum(os.path.getsize(f["path"]) for f in report["files"])
    assert tensor(report, "fc.weight")["file"] in ("model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors")
    via_index = ck.inspect(str(tmp_path / "s" / "model.safetensors.index.json"))
    assert via_index["tensors"] == report["tensors"]


def test_index_naming_a_missing_shard(tmp_path):
    directory = _sharded_drafter(tmp_path / "s")
    os.remove(os.path.join(directory, "model-00002-of-00002.safetensors"))
    report = ck.inspect(directory)
    assert the_error(report, "model.safetensors.index.json", "model-00002-of-00002.safetensors", "missing")


def test_index_naming_a_tensor_its_shard_lacks(tmp_path):
    directory = _sharded_drafter(tmp_path / "s")
    index_path = os.path.join(directory, "model.safetensors.index.json")
    with open(index_path) as f:
        index = json.load(f)
    index["weight_map"]["midlayer.extra.weight"] = "model-00001-of-00002.safetensors"
    fx.write_json(index_path, index)
    report = ck.inspect(directory)
    assert the_error(report, "'midlayer.extra.weight'", "model-00001-of-00002.safetensors", "has no tensor")


def test_shard_holding_a_tensor_the_index_does_not_list(tmp_path):
    directory = _sharded_drafter(tmp_path / "s")
    index_path = os.path.join(directory, "model.safetensors.index.json")
    with open(index_path) as f:
        index = json.load(f)
    del index["weight_map"]["norm.weight"]
    fx.write_json(index_path, index)
    report = ck.inspect(directory)
    assert any("'norm.weight'" in w and "does not list" in w for w in warnings(report))
    assert the_error(report, "needs norm.weight")


# --------------------------------------------------------------------------- EAGLE-3 consistency


def _drafter_with(tmp_path, layout="specforge", **changes):
    """A small drafter whose tensors are replaced/removed per `changes` (None removes)."""
    d = fx.SMALL
    tensors = fx.rename(fx.eagle3_tensors(d["hidden"], d["target_hidden"], d["draft_vocab"], d["target_vocab"],
                                          d["intermediate"], d["heads"], d["kv_heads"], d["head_dim"]), layout)
    for name, value in changes.items():
        if value is None:
            tensors.pop(name)
        else:
            tensors[name] = value
    os.makedirs(str(tmp_path), exist_ok=True)
    fx.save(tmp_path / "model.safetensors", tensors)
    fx.write_json(tmp_path / "config.json", fx.drafter_config(layout, 64, 64, 96, 256, 128, 4, 2, 16))
    return ck.inspect(str(tmp_path))


def test_t2d_with_one_true_entry_too_many(tmp_path):
    d2t, t2d, kept = fx.vocab_maps(96, 256)
    flags = bytearray(t2d)
    flags[next(i for i in range(256) if i not in kept)] = 1
    report = _drafter_with(tmp_path, t2d=fx.Tensor("BOOL", [256], bytes(flags)))
    assert the_error(report, "t2d has 97 true entries", "draft vocabulary has 96")


def test_d2t_pointing_outside_the_target_vocabulary(tmp_path):
    offsets = [0] * 96
    offsets[5] = 1000
    d2t = fx.Tensor("I64", [96], b"".join(o.to_bytes(8, "little", signed=True) for o in offsets))
    report = _drafter_with(tmp_path, d2t=d2t)
    assert the_error(report, "d2t", "outside the target vocabulary of 256", "draft id 5 -> target id 1005")


def test_t2d_false_where_d2t_points(tmp_path):
    d2t, t2d, kept = fx.vocab_maps(96, 256)
    flags = bytearray(t2d)
    flags[kept[10]] = 0
    flags[next(i for i in range(256) if i not in kept)] = 1
    report = _drafter_with(tmp_path, t2d=fx.Tensor("BOOL", [256], bytes(flags)))
    assert the_error(report, "t2d is false at 1 target ids", "draft id 10 -> target id %d" % kept[10])


def test_q_proj_that_does_not_take_embedding_plus_hidden(tmp_path):
    report = _drafter_with(tmp_path, **{"midlayer.self_attn.q_proj.weight": fx.Tensor("BF16", [64, 64])})
    assert the_error(report, "midlayer.self_attn.q_proj.weight", "[64, 64]", "2 x 64 = 128")


def test_config_disagreeing_with_the_tensors(tmp_path):
    fx.write_drafter(tmp_path, "specforge")
    config = fx.drafter_config("specforge", 128, 128, 96, 256, 128, 4, 2, 16)
    fx.write_json(tmp_path / "config.json", config)
    report = ck.inspect(str(tmp_path))
    assert the_error(report, "config.json says hidden_size 128", "say 64")


def test_missing_lm_head_is_named(tmp_path):
    report = _drafter_with(tmp_path, **{"lm_head.weight": None})
    assert the_error(report, "needs lm_head.weight")


def test_config_without_draft_vocab_size_warns_about_vllm(tmp_path):
    fx.write_drafter(tmp_path, "specforge")
    config = fx.drafter_config("specforge", 64, 64, 96, 256, 128, 4, 2, 16)
    del config["draft_vocab_size"]
    fx.write_json(tmp_path / "config.json", config)
    report = ck.inspect(str(tmp_path))
    assert any("no draft_vocab_size" in w and "256" in w and "96 rows" in w for w in warnings(report))


# --------------------------------------------------------------------------- compare


def test_same_drafter_twice_is_a_drop_in_initialisation(tmp_path):
    a = ck.inspect(fx.write_drafter(tmp_path / "a", "specforge"))
    b = ck.inspect(fx.write_drafter(tmp_path / "b", "specforge"))
    result = ck.compare(a, b)
    assert result["verdict"] == "compatible"
    assert result["reasons"][0].startswith("drop-in initialisation")
    # Reports hold no values: the rows match in shape and dtype, and say no more than that.
    assert {r["status"] for r in result["rows"]} == {"same shape and dtype"} and len(result["rows"]) == 15
    assert result["config_diff"] == []


def test_specforge_and_speculators_match_by_role_and_name_the_pitfall(tmp_path):
    a = ck.inspect(fx.write_drafter(tmp_path / "a", "specforge"))
    b = ck.inspect(fx.write_drafter(tmp_path / "b", "speculators"))
    result = ck.compare(a, b)
    assert result["verdict"] == "compatible"
    row = next(r for r in result["rows"] if r["a"]["name"] == "midlayer.self_attn.q_proj.weight")
    assert row["b"]["name"] == "layers.0.self_attn.q_proj.weight" and row["status"] == "same shape and dtype"
    reasons = " | ".join(result["reasons"])
    assert "layouts differ: A is specforge (midlayer.*), B is speculators (layers.0.*)" in reasons
    assert "pitfall: norm_before_residual: A runs false, B runs true" in reasons
    assert any(d["field"] == "norm_before_residual" and d["b"] is True for d in result["config_diff"])


def test_different_hidden_size_is_not_a_drop_in(tmp_path):
    a = ck.inspect(fx.write_drafter(tmp_path / "a", "specforge"))
    b = ck.inspect(fx.write_drafter(tmp_path / "b", "specforge", hidden=32, target_hidden=64))
    result = ck.compare(a, b)
    assert result["verdict"] == "incompatible"
    assert result["reasons"][0] == "not a drop-in initialisation: hidden size differs: A 64, B 32"
    fc = next(r for r in result["rows"] if r["name"] == "fc.weight")
    assert fc["status"] == "shape differs" and fc["a"]["shape"] == [64, 192] and fc["b"]["shape"] == [32, 192]
    assert any("more tensors differ in shape" in r for r in result["reasons"])
    assert {"field": "hidden_size", "a": 64, "b": 32, "in": "both"} in result["config_diff"]


def test_only_in_a_only_in_b_and_dtype_rows(tmp_path):
    with_embed = ck.inspect(fx.write_drafter(tmp_path / "a", "specforge", embed=True))
    plain = ck.inspect(fx.write_drafter(tmp_path / "b", "specforge"))
    result = ck.compare(with_embed, plain)
    assert dict((r["name"], r["status"]) for r in result["rows"])["embed_tokens.weight"] == "only in A"
    assert result["verdict"] == "compatible"  # A has more than B needs
    result = ck.compare(plain, with_embed)
    assert result["verdict"] == "compatible"
    assert any("embed_tokens.weight only in B" in r and "shared from the target" in r for r in result["reasons"])
    lacking = _drafter_with(tmp_path / "c", **{"midlayer.mlp.down_proj.weight": None})
    result = ck.compare(lacking, plain)
    assert dict((r["name"], r["status"]) for r in result["rows"])["midlayer.mlp.down_proj.weight"] == "only in B"
    assert result["verdict"] == "incompatible"
    assert any("B has midlayer.mlp.down_proj.weight, A has none" in r for r in result["reasons"])
    f32 = ck.inspect(fx.write_drafter(tmp_path / "d", "specforge", dtype="F32"))
    result = ck.compare(plain, f32)
    assert result["verdict"] == "compatible"
    assert next(r for r in result["rows"] if r["name"] == "fc.weight")["status"] == "dtype differs"
    assert any("dtype BF16 in A, F32 in B: cast when loading" in r for r in result["reasons"])


def test_different_vocabulary_maps_are_a_pitfall(tmp_path):
    a = ck.inspect(fx.write_drafter(tmp_path / "a", "specforge", seed=1))
    b = ck.inspect(fx.write_drafter(tmp_path / "b", "specforge", seed=2))
    result = ck.compare(a, b)
    assert result["verdict"] == "compatible"
    assert any(r.startswith("pitfall: d2t/t2d differ") for r in result["reasons"])


def test_a_corrupt_checkpoint_is_no_initialisation(tmp_path):
    a = ck.inspect(fx.write_drafter(tmp_path / "a", "specforge"))
    with open(str(tmp_path / "a" / "model.safetensors"), "ab") as f:
        f.write(b"junk")
    broken = ck.inspect(str(tmp_path / "a"))
    result = ck.compare(broken, a)
    assert result["verdict"] == "incompatible"
    assert result["reasons"][0].startswith("not a drop-in initialisation: A has 1 error in its files")


def test_compare_text_puts_the_verdict_first(tmp_path):
    a = ck.inspect(fx.write_drafter(tmp_path / "a", "specforge"))
    b = ck.inspect(fx.write_drafter(tmp_path / "b", "specforge", hidden=32, target_hidden=64))
    text = format_compare(ck.compare(a, b))
    assert text.startswith("Verdict: INCOMPATIBLE: not a drop-in initialisation\n  - not a drop-in initialisation: hidden size")
    assert any(line.split()[:3] == ["shape", "differs", "fc.weight"] for line in text.splitlines())
    assert text.index("Tensors:") < text.index("Config fields that differ: 2")


def test_compare_works_on_reports_that_crossed_the_wire(tmp_path):
    a = json.loads(json.dumps(ck.inspect(fx.write_drafter(tmp_path / "a", "vllm"))))
    b = json.loads(json.dumps(ck.inspect(fx.write_drafter(tmp_path / "b", "specforge"))))
    result = ck.compare(a, b)
    row = next(r for r in result["rows"] if r["b"] and r["b"]["name"] == "midlayer.hidden_norm.weight")
    assert row["a"]["name"] == "model.layers.32.hidden_norm.weight" and row["status"] == "same shape and dtype"
    assert any(r["status"] == "only in B" and r["b"]["name"] == "t2d" for r in result["rows"])
    assert result["verdict"] == "compatible"


# --------------------------------------------------------------------------- sha256


def test_sha256_file_matches_hashlib_and_reports_progress(tmp_path):
    path = str(tmp_path / "blob")
    data = os.urandom(3 * 1024 * 1024 + 17)
    with open(path, "wb") as f:
        f.write(data)
    calls = []
    digest = ck.sha256_file(path, progress=lambda done, total, p: calls.append((done, total, p)), block_bytes=1 << 20)
    assert digest == hashlib.sha256(data).hexdigest()
    assert calls[-1] == (len(data), len(data), path)
    assert [c[0] for c in calls] == sorted(c[0] for c in calls)


def test_inspect_with_sha256_gives_every_file_its_digest(tmp_path):
    directory = _sharded_drafter(tmp_path / "s")
    calls = []
    report = ck.inspect(directory, sha256=True, progress=lambda done, total, p: calls.append((done, total, p)))
    for f in report["files"]:
        with open(f["path"], "rb") as fh:
            assert f["sha256"] == hashlib.sha256(fh.read()).hexdigest()
    assert calls[-1][0] == calls[-1][1] == report["total_bytes"]
    assert {c[2] for c in calls} == {f["path"] for f in report["files"]}
    assert "sha256 " + report["files"][0]["sha256"] in format_inspect(report)


def test_without_sha256_no_digest_is_reported(k2):
    assert "sha256" not in k2["files"][0]


# --------------------------------------------------------------------------- the path itself


def test_missing_path_raises_one_clear_line(tmp_path):
    with pytest.raises(ck.CheckpointIOError) as info:
        ck.inspect(str(tmp_path / "nope"))
    assert not isinstance(info.value, OSError)
    assert str(info.value) == "%s does not exist" % (tmp_path / "nope")


@pytest.mark.skipif(hasattr(os, "geteuid") and os.geteuid() == 0, reason="root reads unreadable files")
def test_unreadable_file_raises(tmp_path):
    path = fx.save(tmp_path / "x.safetensors", {"a": fx.Tensor("F32", [1])})
    os.chmod(path, 0)
    with pytest.raises(ck.CheckpointIOError, match="Permission denied"):
        ck.inspect(path)


def test_directory_without_safetensors_is_a_problem_not_a_crash(tmp_path):
    (tmp_path / "pytorch_model.bin").write_bytes(b"pickle")
    report = ck.inspect(str(tmp_path))
    assert the_error(report, "no .safetensors file", "pytorch_model.bin")
    assert report["tensors"] == [] and report["total_bytes"] == 0


def test_read_header_of_a_directory_raises_io_error(tmp_path):
    with pytest.raises(ck.CheckpointIOError):
        ck.read_header(str(tmp_path))


def test_broken_config_json_is_reported(tmp_path):
    fx.write_drafter(tmp_path, "specforge")
    (tmp_path / "config.json").write_text("{oops")
    report = ck.inspect(str(tmp_path))
    assert the_error(report, "config.json is not valid JSON")
    assert report["config"] is None and report["format"] == "specforge"


# --------------------------------------------------------------------------- runs on the host's Python


def test_host_module_imports_only_the_standard_library():
    code = ("import sys; sys.path.insert(0, %r); import remote.checkpoints.report, tui.checkpoints.view; "
            "bad = [m for m in ('numpy', 'safetensors', 'textual', 'paramiko', 'rich') if m in sys.modules]; "
            "print(bad)" % REPO_ROOT)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


@pytest.mark.skipif(python39() is None, reason="no python3.9 here")
def test_inspect_runs_on_python_3_9(k2_dir):
    code = ("import sys, json; sys.path.insert(0, %r); from remote.checkpoints import report as checkpoint; "
            "r = checkpoint.inspect(%r); print(json.dumps([r['format'], r['total_bytes'], r['eagle3']['draft_vocab_size'], r['problems']]))"
            % (REPO_ROOT, k2_dir))
    out = subprocess.run([python39(), "-I", "-c", code], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout) == ["specforge", 2382319104, 32000, []]


@pytest.mark.parametrize("layout, missing", [("specforge", "midlayer.mlp.up_proj.weight"), ("speculators", "layers.0.mlp.up_proj.weight")])
def test_missing_tensor_is_named_as_the_layout_spells_it(tmp_path, layout, missing):
    from safetensors.numpy import load_file, save_file

    directory = fx.write_drafter(tmp_path / layout, layout=layout, dtype="F32")
    path = os.path.join(directory, "model.safetensors")
    tensors = load_file(path)
    del tensors[missing]
    save_file(tensors, path)
    report = ck.inspect(directory)
    errors = [p["message"] for p in report["problems"] if p["level"] == "error"]
    assert "an EAGLE-3 drafter needs %s, this checkpoint has none" % missing in errors
