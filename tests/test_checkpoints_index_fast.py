"""A shard index checked without parsing its weight_map (remote/checkpoints/index_fast.py), and a
summary made shard after shard without a listing (summary_stream.py), say exactly what the exact
path says: the same report, problems, files and pages, for the spellings
the common writers use (taken fast) and for every index that does not agree with its shards
(sent to the exact path, which words what is wrong)."""

import json
import os
import shutil
import sys

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from remote.checkpoints import collect, listing, locate, summary_stream

sys.path.insert(0, os.path.dirname(__file__))
import checkpoint_fixtures as fx  # noqa: E402

INDEX = "model.safetensors.index.json"


@pytest.fixture(scope="module")
def target(tmp_path_factory):
    """A small sharded MoE target (header-only shards), its index as the fixture writes it: shard
    after shard, each in its header's order."""
    facts = fx.write_moe_target(tmp_path_factory.mktemp("moe") / "target", layers=3, experts=6, shards=5)
    with open(os.path.join(facts["directory"], INDEX)) as f:
        facts["index"] = json.load(f)
    return facts


def variant(target, tmp_path, text=None, index=None):
    """A copy of the target with its index written as `text` (or `index` in the fixture's spelling)."""
    directory = str(tmp_path / "copy")
    os.mkdir(directory)
    for name in os.listdir(target["directory"]):  # linked: the header-only shards are sparse
        os.link(os.path.join(target["directory"], name), os.path.join(directory, name))
    os.remove(os.path.join(directory, INDEX))
    with open(os.path.join(directory, INDEX), "w") as f:
        f.write(text if text is not None else json.dumps(index, indent=2))
    return directory


def everything(directory):
    """What a user gets: the summary, every page, the name-filtered view's first tensors. The
    summary made shard after shard without a listing (what `inspect` prints here), where it
    answers, is the listing's."""
    kept = listing.open_listing(directory)
    summary = dict(kept.summary())
    summary.pop("handle")
    streamed = summary_stream.summary(directory)
    if streamed is not None:
        assert streamed.pop("handle") is None
        assert streamed == summary
    pages, offset = [], len(summary["tensors"])
    while offset < summary["tensor_count"]:
        page = kept.page(offset, 50)
        pages.append(page["tensors"])
        offset += len(page["tensors"])
    listing._KEPT.clear()
    return summary, pages, [kept.tensor(i) for i in kept.view("experts.1", "size")[:20]]


def exact(directory, monkeypatch):
    with monkeypatch.context() as m:
        m.setattr(collect, "agreeing_index", lambda *args: None)
        return everything(directory)


def taken_fast(directory):
    layout = locate.resolve(directory, [], read_index=False)
    return collect._agreeing_index(layout, {}) is not None


SPELLINGS = {
    "shard after shard, indent 2 (the fixture's)": lambda index: json.dumps(index, indent=2),
    "sorted, indent 2, newline (transformers' save_pretrained)": lambda index: json.dumps(index, indent=2, sort_keys=True) + "\n",
    "compact": lambda index: json.dumps(index, separators=(",", ":")),
    "json.dumps' default": lambda index: json.dumps(index),
    "sorted, tabs": lambda index: json.dumps(index, indent="\t", sort_keys=True),
}


@pytest.mark.parametrize("spelling", sorted(SPELLINGS))
def test_an_agreeing_index_in_a_common_spelling_is_taken_fast_with_the_same_report(target, tmp_path, monkeypatch, spelling):
    directory = variant(target, tmp_path, SPELLINGS[spelling](target["index"]))
    assert taken_fast(directory) and summary_stream.summary(directory) is not None
    fast = everything(directory)
    assert fast == exact(directory, monkeypatch)
    summary = fast[0]
    assert summary["tensor_count"] == target["tensors"] and summary["problems"] == []
    assert [f["path"] for f in summary["files"]] == [os.path.join(directory, s) for s in
                                                     dict.fromkeys(json.loads(SPELLINGS[spelling](target["index"]))["weight_map"].values())]


def _moved(index, to="model-00002-of-00005.safetensors", at=7):
    changed = json.loads(json.dumps(index))
    name = list(changed["weight_map"])[at]
    changed["weight_map"][name] = to
    return changed


def _without(index, at=3):
    changed = json.loads(json.dumps(index))
    del changed["weight_map"][list(changed["weight_map"])[at]]
    return changed


def _text_edit(old, new):
    return lambda index: json.dumps(index, indent=2).replace(old, new, 1)


DISAGREEING = {
    "a tensor mapped to another shard": (lambda index: json.dumps(_moved(index), indent=2), "which has no tensor"),
    "a shard that is not there": (lambda index: json.dumps(_moved(index, "model-00009-of-00005.safetensors"), indent=2),
                                  "but the file is missing"),
    "a tensor the index leaves out": (lambda index: json.dumps(_without(index), indent=2), "does not list"),
    "a key written twice, the first to another shard (JSON keeps the last)": (
        _text_edit('"weight_map": {\n', '"weight_map": {\n    "model.norm.weight": "model-00001-of-00005.safetensors",\n'), None),
    "a name spelled with an escape": (_text_edit('"model.norm.weight"', '"model.norm.weigh\\u0074"'), None),
    "a second weight_map after the first": (lambda index: json.dumps(index, indent=2)[:-1] + ', "weight_map": {}}',
                                            "the shard index does not name it"),
    "metadata with an escape and a wrong total_size": (
        lambda index: json.dumps(dict(index, metadata={"total_size": 5, "note": 'a "b"'}), indent=2), "says total_size"),
    "not JSON after the weight_map": (lambda index: json.dumps(index, indent=2) + " ,", "is not valid JSON"),
}


@pytest.mark.parametrize("case", sorted(DISAGREEING))
def test_an_index_that_disagrees_goes_to_the_exact_path_which_words_it(target, tmp_path, monkeypatch, case):
    write, words = DISAGREEING[case]
    directory = variant(target, tmp_path, write(target["index"]))
    assert not taken_fast(directory) and summary_stream.summary(directory) is None
    fast = everything(directory)
    assert fast == exact(directory, monkeypatch)
    messages = " | ".join(p["message"] for p in fast[0]["problems"])
    if words is None:
        assert fast[0]["tensor_count"] == target["tensors"] and "error" not in [p["level"] for p in fast[0]["problems"]]
    else:
        assert words in messages, messages


def test_a_shard_the_index_does_not_name_or_one_without_tensors_goes_to_the_exact_path(target, tmp_path, monkeypatch):
    directory = variant(target, tmp_path, index=target["index"])
    os.link(os.path.join(directory, "model-00001-of-00005.safetensors"), os.path.join(directory, "zz-copy.safetensors"))
    assert not taken_fast(directory) and summary_stream.summary(directory) is None
    fast = everything(directory)
    assert fast == exact(directory, monkeypatch)
    assert any("zz-copy.safetensors is in the directory but the shard index does not name it" in p["message"]
               for p in fast[0]["problems"])
    os.remove(os.path.join(directory, "zz-copy.safetensors"))
    fx.write_header_only_shard(os.path.join(directory, "empty.safetensors"), [])
    assert not taken_fast(directory) and summary_stream.summary(directory) is None
    assert everything(directory) == exact(directory, monkeypatch)


def test_a_shard_linked_from_outside_the_directory_goes_to_the_exact_path(target, tmp_path, monkeypatch):
    directory = variant(target, tmp_path, index=target["index"])
    shard = os.path.join(directory, "model-00003-of-00005.safetensors")
    outside = str(tmp_path / "outside.safetensors")
    shutil.move(shard, outside)
    os.symlink(outside, shard)
    assert not taken_fast(directory) and summary_stream.summary(directory) is None
    fast = everything(directory)
    assert fast == exact(directory, monkeypatch)
    assert any("outside the checkpoint directory" in p["message"] for p in fast[0]["problems"])


_NAME_PIECES = ["midlayer.", "layers.0.", "model.layers.1.", "model.", "fc.weight", "d2t", "t2d", "hidden_norm.", ".hidden_norm.",
                "model.embed_tokens.", "transformer.", "model.decoder.", "draft_id_to_target_id", "model.fc.weight", "weight",
                "lm_head.", "norm.", "x"]


@settings(max_examples=300, deadline=None)
@given(names=st.lists(st.lists(st.sampled_from(_NAME_PIECES), min_size=1, max_size=4).map("".join), max_size=12, unique=True),
       config=st.sampled_from([None, {}, {"architectures": ["LlamaForCausalLM"]}, {"architectures": ["LlamaForCausalLMEagle3"]},
                               {"speculators_config": {}}]))
@example(names=["d2t.hidden_norm.weight", "model.layers.1.hidden_norm.weight"], config=None)  # the second decides
@example(names=["layers.0.x", "fc.weight", "midlayer.x"], config={"architectures": ["LlamaForCausalLM"]})
def test_the_format_told_from_the_decisive_names_alone_is_the_format_of_all(names, config):
    """The one-pass summary keeps only the names the format is told by (a witness of each thing
    detect_format asks); over them it must answer as over every name."""
    from remote.checkpoints.formats import decisive_names, detect_format

    shapes = dict((name, [8, 16] if name.endswith("fc.weight") else [8]) for name in names)
    kept = dict((name, shapes[name]) for name in decisive_names(sorted(names)))
    assert detect_format(kept, config) == detect_format(shapes, config)
