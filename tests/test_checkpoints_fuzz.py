"""Fuzzing the header reader: whatever the bytes, inspection answers with problems, never a crash,
and never allocates from a length the file merely claims."""

import json
import os
import struct
import sys
import tempfile
import tracemalloc

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from remote.checkpoints import report as ck
from tui.checkpoints.view import format_inspect

sys.path.insert(0, os.path.dirname(__file__))
import checkpoint_fixtures as fx  # noqa: E402

FUZZ = settings(max_examples=300, deadline=None,
                suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
# What reading a file of a few kilobytes may cost, whatever its header claims.
ALLOCATION_BUDGET_BYTES = 4 * 1024 * 1024


@pytest.fixture(scope="module")
def scratch():
    with tempfile.TemporaryDirectory() as d:
        yield d


def inspect_bounded(path):
    """inspect(path) with its peak allocation measured; returns (report, peak bytes)."""
    tracemalloc.start()
    try:
        report = ck.inspect(path)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    return report, peak


def assert_well_formed(report):
    assert report["format"] in ck.FORMATS
    for p in report["problems"]:
        assert p["level"] in ("error", "warning") and isinstance(p["message"], str) and p["message"]
        assert "\n" not in p["message"]
    json.dumps(report)  # it must cross the wire
    format_inspect(report)  # and render


@FUZZ
@given(data=st.binary(max_size=4096))
def test_random_files_never_crash(scratch, data):
    path = os.path.join(scratch, "random.safetensors")
    with open(path, "wb") as f:
        f.write(data)
    report, peak = inspect_bounded(path)
    assert_well_formed(report)
    assert peak < ALLOCATION_BUDGET_BYTES
    if len(data) < 8:
        assert any("too short" in p["message"] for p in report["problems"])


@FUZZ
@given(claimed=st.one_of(st.integers(0, 2 ** 64 - 1), st.sampled_from([2 ** 64 - 1, 10 ** 12, 10 ** 8, 10 ** 8 + 1])),
       body=st.binary(max_size=256))
def test_claimed_header_lengths_are_never_allocated(scratch, claimed, body):
    path = os.path.join(scratch, "claim.safetensors")
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", claimed) + body)
    tracemalloc.start()
    try:
        try:
            ck.read_header(path)
        except ck.HeaderError as exc:
            message = str(exc)
            if claimed > ck.MAX_HEADER_BYTES:
                assert "absurd" in message
            elif claimed > len(body):
                assert "beyond the end of the file" in message
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < ALLOCATION_BUDGET_BYTES


json_values = st.recursive(
    st.one_of(st.none(), st.booleans(), st.integers(-2 ** 70, 2 ** 70), st.floats(allow_nan=False),
              st.text(max_size=8), st.sampled_from(list(ck.DTYPE_BITS))),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(
        st.one_of(st.text(max_size=6), st.sampled_from(["dtype", "shape", "data_offsets", "__metadata__"])),
        children, max_size=4),
    max_leaves=30)


@FUZZ
@given(header=st.dictionaries(st.text(max_size=8), json_values, max_size=6), data_len=st.integers(0, 64))
def test_arbitrary_json_headers_never_crash(scratch, header, data_len):
    path = fx.raw_file(os.path.join(scratch, "json.safetensors"), header, bytes(data_len))
    report, peak = inspect_bounded(path)
    assert_well_formed(report)
    assert peak < ALLOCATION_BUDGET_BYTES


@pytest.fixture(scope="module")
def drafter_bytes(tmp_path_factory):
    directory = fx.write_drafter(tmp_path_factory.mktemp("seed"), "specforge")
    with open(os.path.join(directory, "model.safetensors"), "rb") as f:
        return f.read(), fx.drafter_config("specforge", 64, 64, 96, 256, 128, 4, 2, 16)


@FUZZ
@given(edits=st.lists(st.tuples(st.integers(0, 4000), st.integers(0, 255)), min_size=1, max_size=8),
       cut=st.one_of(st.none(), st.integers(0, 40000)), tail=st.binary(max_size=16))
def test_mutated_drafters_never_crash(scratch, drafter_bytes, edits, cut, tail):
    """Flipped header bytes, truncations and junk on a real drafter, config.json beside it,
    so that the EAGLE-3 checks and the d2t/t2d reads run on damaged input too."""
    original, config = drafter_bytes
    data = bytearray(original)
    for position, value in edits:
        if position < len(data):
            data[position] = value
    data = bytes(data[:cut] if cut is not None else data) + tail
    directory = os.path.join(scratch, "mutated")
    os.makedirs(directory, exist_ok=True)
    with open(os.path.join(directory, "model.safetensors"), "wb") as f:
        f.write(data)
    fx.write_json(os.path.join(directory, "config.json"), config)
    report, peak = inspect_bounded(directory)
    assert_well_formed(report)
    assert peak < ALLOCATION_BUDGET_BYTES
    header_end = 8 + struct.unpack("<Q", original[:8])[0]
    if data[:header_end] == original[:header_end] and len(data) != len(original):
        # Same header, different length: a truncated or padded download is always an error.
        assert any(p["level"] == "error" for p in report["problems"]), report["problems"]


@FUZZ
@given(shards=st.dictionaries(st.text(min_size=1, max_size=6), st.one_of(
    st.text(max_size=12), st.sampled_from(["model.safetensors", "../escape.safetensors", "/abs.safetensors", ""])),
    max_size=5), total=st.one_of(st.none(), st.integers(-5, 10 ** 6), st.text(max_size=3)))
@example(shards={"0": "/\x00"}, total=None)  # found by CI: absolute and no file name at all
def test_arbitrary_shard_indexes_never_crash(scratch, shards, total):
    directory = os.path.join(scratch, "index")
    os.makedirs(directory, exist_ok=True)
    for name in os.listdir(directory):
        os.remove(os.path.join(directory, name))
    fx.save(os.path.join(directory, "model.safetensors"), {"a": fx.Tensor("F32", [2])})
    fx.write_json(os.path.join(directory, "model.safetensors.index.json"),
                  {"metadata": {"total_size": total}, "weight_map": shards})
    report = ck.inspect(directory)
    assert_well_formed(report)
    # "..0" is a file name inside the directory; "../x" and "/x" leave it ("/\0" is no file name at all:
    # refused as such).
    escaping = [v for v in shards.values() if "\0" not in v and (os.path.isabs(v) or os.path.normpath(v).split(os.sep)[0] == "..")]
    if any("\0" in v for v in shards.values()):
        assert any("not a file name" in p["message"] for p in report["problems"])
    if escaping:
        assert any("outside the checkpoint directory" in p["message"] for p in report["problems"])


def test_a_header_nested_beyond_the_parsers_limit_is_an_error(scratch):
    deep = b'{"a": {"dtype": "U8", "shape": [1], "data_offsets": [0, 1], "x": ' + b"[" * 100000 + b"]" * 100000 + b"}}"
    path = fx.raw_file(os.path.join(scratch, "deep.safetensors"), deep, b"\0")
    report, peak = inspect_bounded(path)
    assert any("not valid JSON" in p["message"] or "nests" in p["message"] for p in report["problems"])
