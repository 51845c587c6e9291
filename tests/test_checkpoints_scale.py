"""A 64-shard MoE target with 139,583 tensors through the real daemon: the summary and the
first page come in one reply, every tensor arrives page by page, and no frame comes near the
16 MiB bound although the whole listing is larger than that."""

import json
import os

import pytest

from remote.checkpoints import listing, roles
from remote.core.protocol import MAX_FRAME_BYTES, RemoteError
from tests import checkpoint_fixtures as fx

FIXTURE_CACHE = fx.FIXTURE_CACHE
LAYERS, EXPERTS, DENSE_LAYERS = 61, 384, 1
MOE_LAYERS = LAYERS - DENSE_LAYERS


@pytest.fixture(scope="module")
def moe():
    return fx.cached_moe_target(FIXTURE_CACHE, layers=LAYERS, experts=EXPERTS, shards=64, dense_layers=DENSE_LAYERS)


def frame_bytes(reply):
    return len(json.dumps(reply, separators=(",", ":"), ensure_ascii=False).encode("utf-8"))


def test_the_moe_fixture_is_what_safetensors_reads(moe):
    from safetensors import safe_open

    assert moe["tensors"] == 139583
    first = os.path.join(moe["directory"], "model-00001-of-00064.safetensors")
    with safe_open(first, framework="np") as f:
        keys = list(f.keys())
        assert len(keys) == -(-moe["tensors"] // 64)
        assert f.get_slice("model.layers.0.self_attn.o_proj.weight").get_shape() == [7168, 8192]


def test_inspect_through_the_daemon_pages_every_tensor(client, moe):
    summary = client.call("checkpoint.inspect", {"path": moe["directory"]}, timeout=300)
    assert summary["problems"] == []
    assert summary["format"] == "hf" and summary["eagle3"] is None
    assert summary["tensor_count"] == moe["tensors"] and summary["tensor_bytes"] == moe["tensor_bytes"]
    assert summary["total_bytes"] == moe["file_bytes"] and len(summary["files"]) == 64
    assert not summary["complete"] and len(summary["tensors"]) == listing.FIRST_PAGE_TENSORS
    assert frame_bytes(summary) < MAX_FRAME_BYTES
    groups = dict((g["pattern"], g) for g in summary["groups"])
    experts = groups["model.layers.{N}.mlp.experts.{E}.down_proj.weight"]
    assert experts["count"] == MOE_LAYERS * EXPERTS and experts["dtypes"] == ["F8_E4M3"]
    assert experts["shapes"] == [[7168, 2048]] and experts["role"] == "layer {N}: expert {E} MLP down projection"
    assert sum(g["count"] for g in summary["groups"]) == moe["tensors"] == sum(g["count"] for g in groups.values())
    assert sum(g["bytes"] for g in summary["groups"]) == moe["tensor_bytes"]

    names, total_bytes, largest_frame, pages, wire_bytes = [], 0, 0, 0, 0
    offset = 0
    while True:
        page = client.call("checkpoint.tensors", {"handle": summary["handle"], "offset": offset, "limit": 5000}, timeout=120)
        largest_frame = max(largest_frame, frame_bytes(page))
        wire_bytes += frame_bytes(page)
        assert page["total"] == moe["tensors"]
        if not page["tensors"]:
            break
        pages += 1
        names += [t["name"] for t in page["tensors"]]
        total_bytes += sum(t["bytes"] for t in page["tensors"])
        offset += len(page["tensors"])
    assert pages == -(-moe["tensors"] // 5000)
    assert len(names) == len(set(names)) == moe["tensors"] and names == sorted(names)
    assert total_bytes == moe["tensor_bytes"]
    # The whole listing would not fit one frame; its pages are a fraction of one.
    assert wire_bytes > MAX_FRAME_BYTES and largest_frame < MAX_FRAME_BYTES // 8
    assert names[:2] == [t["name"] for t in summary["tensors"][:2]]


def test_pages_filter_and_sort_on_the_host(client, moe):
    summary = client.call("checkpoint.inspect", {"path": moe["directory"], "limit": 10}, timeout=300)
    assert len(summary["tensors"]) == 10
    page = client.call("checkpoint.tensors", {"handle": summary["handle"], "filter": "experts.17.", "limit": 5000})
    assert page["total"] == MOE_LAYERS * 6  # gate, up and down, each with its scale
    assert all(".experts.17." in t["name"] for t in page["tensors"])
    page = client.call("checkpoint.tensors", {"handle": summary["handle"], "filter": "EXPERT 17 MLP down", "limit": 5000})
    assert page["total"] == MOE_LAYERS  # the role matched, any case (the scales' roles say nothing of it)
    assert {t["role"] for t in page["tensors"]} == {"layer %d: expert 17 MLP down projection" % n for n in range(1, LAYERS)}
    biggest = client.call("checkpoint.tensors", {"handle": summary["handle"], "sort": "size", "limit": 3})["tensors"]
    assert [t["name"] for t in biggest] == ["lm_head.weight", "model.embed_tokens.weight", "model.layers.0.mlp.down_proj.weight"]
    # By path, the kept listing answers; an unknown handle says to inspect again.
    by_path = client.call("checkpoint.tensors", {"path": moe["directory"], "offset": 139580, "limit": 10})
    assert by_path["handle"] == summary["handle"] and len(by_path["tensors"]) == 3
    with pytest.raises(RemoteError) as caught:
        client.call("checkpoint.tensors", {"handle": "0123456789abcdef"})
    assert caught.value.type == "NotFound" and "inspect the checkpoint again" in caught.value.message


def test_roles_worded_per_pattern_are_the_roles_worded_one_by_one(moe):
    namer = roles.RoleNamer("hf", {})
    names = [spec[0] for spec in fx.moe_tensor_specs(layers=3, experts=4, dense_layers=1)]
    assert [namer.role(n) for n in names] == [roles.role(n, "hf", {}) for n in names]
    assert roles.name_pattern("model.layers.3.mlp.experts.17.w1.weight") == "model.layers.{N}.mlp.experts.{E}.w1.weight"


def run_cli(*args):
    import subprocess
    import sys

    return subprocess.run([sys.executable, "-m", "tui.cli"] + list(args), capture_output=True, text=True,
                          cwd=os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def test_cli_summarises_a_huge_checkpoint_and_lists_it_all_on_request(moe):
    out = run_cli("inspect", moe["directory"])
    assert out.returncode == 0, out.stderr
    assert "Tensors: 139,583 in 37 name patterns (--all lists every tensor)" in out.stdout
    line = next(l for l in out.stdout.splitlines() if "model.layers.{N}.mlp.experts.{E}.down_proj.weight " in l)
    assert "23,040" in line and "F8_E4M3" in line and "[7168, 2048]" in line
    assert len(out.stdout.splitlines()) < 100  # a summary, not 139,583 lines
    every = run_cli("inspect", "--all", "--json", moe["directory"])
    assert every.returncode == 0, every.stderr
    report = json.loads(every.stdout)
    assert report["complete"] and len(report["tensors"]) == moe["tensors"]
    assert sum(t["bytes"] for t in report["tensors"]) == moe["tensor_bytes"]
    text = run_cli("inspect", "--all", moe["directory"])
    assert sum(1 for l in text.stdout.splitlines() if l.startswith("  model.layers.")) == moe["tensors"] - 3  # all but embed_tokens, norm and lm_head


def test_compare_checks_a_drafter_against_a_target_model(tmp_path):
    drafter = fx.write_drafter(tmp_path / "drafter", "specforge", aux_layer_ids=[1, 3, 5])
    fits = fx.write_hf_model(tmp_path / "target", layers=8, hidden=64, vocab=256)
    out = run_cli("compare", drafter, fits)
    assert out.returncode == 0, out.stdout + out.stderr
    assert out.stdout.startswith("Verdict: COMPATIBLE: the drafter can serve the target")
    assert "aux layer ids [1, 3, 5] (from the drafter's config) lie within the target's 8 layers" in out.stdout
    small = fx.write_hf_model(tmp_path / "small", layers=4, hidden=32, vocab=128)
    out = run_cli("compare", "--json", small, drafter)
    assert out.returncode == 1
    result = json.loads(out.stdout)
    assert result["verdict"]["status"] == "incompatible" and result["target"] == "A"
    assert result["verdict"]["message"] == result["reasons"][0]
    failed = {c["check"] for c in result["checks"] if not c["ok"]}
    assert failed == {"hidden_size", "embedding", "vocab_size", "aux_layer_ids"}
    assert result["reasons"][0].startswith("B's drafter cannot serve the target A: fc.weight fuses 3 x 64")
