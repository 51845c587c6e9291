"""Differential test against the real safetensors: what it opens we accept with the same names,
shapes and dtypes; what it refuses we report as an error, and the other way round."""

import json
import os
import struct
import sys
import tempfile

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st
from safetensors import safe_open

from remote.checkpoints import header_fast
from remote.checkpoints import report as ck
from remote.checkpoints.safetensors_header import read_header_rows

sys.path.insert(0, os.path.dirname(__file__))
import checkpoint_fixtures as fx  # noqa: E402

DTYPES = sorted(ck.DTYPE_BITS)


def ours(path):
    """{name: (shape, dtype)} when we accept the file, None when we report an error."""
    try:
        header, data_start, size = ck.read_header(path)
    except ck.HeaderError:
        return None
    tensors, problems = ck.check_header(header, size - data_start)
    # The fast path inspect takes (C parser, tuples) must say exactly what the exact one says.
    rows, fast_problems, _, _ = read_header_rows(path)
    assert fast_problems == problems
    assert [(r[0], list(r[2]) if r[2] is not None else None, r[1], r[3]) for r in rows] == \
        [(t["name"], t["shape"], t["dtype"], t["bytes"]) for t in tensors]
    if any(p["level"] == "error" for p in problems):
        return None
    return dict((t["name"], (t["shape"], t["dtype"])) for t in tensors)


def theirs(path):
    """{name: (shape, dtype)} when safetensors opens the file, None when it refuses it."""
    try:
        with safe_open(path, framework="np") as f:
            return dict((k, (list(f.get_slice(k).get_shape()), f.get_slice(k).get_dtype())) for k in f.keys())
    except Exception:  # SafetensorError, and whatever a refusal surfaces as
        return None


@pytest.fixture(scope="module")
def scratch():
    with tempfile.TemporaryDirectory() as d:
        yield d


def write(directory, header_text, data_len, header_length=None):
    path = os.path.join(directory, "case.safetensors")
    raw = header_text.encode("utf-8", "surrogatepass") if isinstance(header_text, str) else header_text
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(raw) if header_length is None else header_length))
        f.write(raw)
        f.write(b"\0" * data_len)
    return path


# --------------------------------------------------------------------------- header generator

names = st.one_of(st.sampled_from(["fc.weight", "d2t", "t2d", "lm_head.weight", "a", "", "__metadata__x"]),
                  st.text(max_size=6))
dims = st.one_of(st.integers(0, 6), st.integers(0, 6), st.integers(0, 6),
                 st.sampled_from([2 ** 32, 2 ** 63, 2 ** 64 - 1]))
odd_numbers = st.sampled_from(["-1", "-0", "4.0", "4e0", "true", "null", '"4"', "18446744073709551616", "1e400"])
unknown_values = st.one_of(st.integers(-10 ** 30, 10 ** 30).map(str), st.sampled_from(
    ["null", "true", '"x"', "1.5", "1e-400", "1e400", "NaN", '"\\u0000"', '"\\ud800"', '"\\ud83d\\ude00"',
     "[" * 125 + "]" * 125, "[" * 126 + "]" * 126, '{"a": {"b": [1, 2, {}]}}', "12345678901234567890123"]))


@st.composite
def headers(draw):
    """(header text, data length): half of them clean, the rest with a few odd spellings and faults."""
    odd = draw(st.booleans())
    # Half of them in safetensors' own compact spelling (the canonical fast path), half spaced.
    comma, colon = (",", ":") if draw(st.booleans()) else (", ", ": ")

    def rare(n):
        return odd and draw(st.integers(0, n)) == 0

    count = draw(st.integers(0, 5))
    entries = []
    cursor = 0
    for _ in range(count):
        dtype = draw(st.sampled_from(["f32", "Q4_K", "", "bf16"])) if rare(8) else draw(st.sampled_from(DTYPES))
        shape = draw(st.lists(dims if odd else st.integers(0, 6), max_size=3))
        bits = ck.DTYPE_BITS.get(dtype, 8)
        elements = 1
        for d in shape:
            elements *= d
        size = elements * bits // 8 if elements < 10 ** 6 else 8
        begin, end = cursor, cursor + size
        cursor = end
        entries.append({"name": draw(names), "dtype": dtype, "shape": shape, "offsets": [begin, end]})
    order = draw(st.permutations(range(len(entries))))
    data_len = cursor
    perturbation = draw(st.sampled_from(["data+", "data-", "gap", "overlap", "swap", "end+", "begin-"])) if rare(1) else "none"
    if perturbation == "data+":
        data_len += draw(st.integers(1, 3))
    elif perturbation == "data-" and data_len:
        data_len -= draw(st.integers(1, data_len))
    elif entries and perturbation in ("gap", "overlap", "swap", "end+", "begin-"):
        e = entries[draw(st.integers(0, len(entries) - 1))]
        if perturbation == "gap":
            e["offsets"] = [e["offsets"][0] + 1, e["offsets"][1] + 1]
        elif perturbation == "overlap":
            e["offsets"] = [max(0, e["offsets"][0] - 1), e["offsets"][1]]
        elif perturbation == "swap":
            e["offsets"] = e["offsets"][::-1]
        elif perturbation == "end+":
            e["offsets"][1] += 1
        else:
            e["offsets"][0] = max(0, e["offsets"][0] - 1)
    parts = []
    metadata = draw(st.sampled_from([None, '{"format": "pt"}', '{"a": "1", "a": "2"}'] + (["null", '{"k": 1}', "[]"] if odd else [])))
    if metadata is not None:
        parts.append('"__metadata__"' + colon + metadata.replace(": ", colon).replace(", ", comma))
    ascii_only = draw(st.booleans())
    for i in order:
        e = entries[i]
        dtype_text = json.dumps(e["dtype"])
        spelling = draw(st.sampled_from(["unit-map", "bad-map", "number"])) if rare(6) else "plain"
        if spelling == "unit-map":
            dtype_text = '{%s%snull}' % (dtype_text, colon)
        elif spelling == "bad-map":
            dtype_text = '{%s%s[]}' % (dtype_text, colon)
        elif spelling == "number":
            dtype_text = "1"
        shape_items = [str(d) for d in e["shape"]]
        if shape_items and rare(6):
            shape_items[draw(st.integers(0, len(shape_items) - 1))] = draw(odd_numbers)
        shape_text = "[" + comma.join(shape_items) + "]"
        offsets = [str(o) for o in e["offsets"]]
        if rare(10):
            offsets.append("0")
        if rare(10):
            offsets[0] = draw(odd_numbers)
        offsets_text = "[" + comma.join(offsets) + "]"
        form = draw(st.sampled_from(["array", "short-array", "missing", "dup-field"])) if rare(6) else "object"
        if form == "array":
            body = "[" + comma.join([dtype_text, shape_text, offsets_text]) + "]"
        elif form == "short-array":
            body = "[" + comma.join([dtype_text, shape_text]) + "]"
        else:
            fields = [('"dtype"', dtype_text), ('"shape"', shape_text), ('"data_offsets"', offsets_text)]
            if form == "missing":
                fields.pop(draw(st.integers(0, 2)))
            if form == "dup-field":
                fields.append(fields[draw(st.integers(0, 2))])
            if rare(2):
                fields.append(('"extra"', draw(unknown_values)))
                if draw(st.booleans()):
                    fields.append(('"extra"', draw(unknown_values)))
            if comma == ", " or rare(2):  # safetensors writes dtype, shape, data_offsets in that order
                fields = draw(st.permutations(fields))
            body = "{" + comma.join(key + colon + value for key, value in fields) + "}"
        parts.append(json.dumps(e["name"], ensure_ascii=ascii_only) + colon + body)
    if parts and rare(8):
        parts.append(parts[draw(st.integers(0, len(parts) - 1))])  # a duplicated key
    text = "{" + comma.join(parts) + "}"
    leading = draw(st.sampled_from(["", " ", "\n", "\t "])) if comma == ", " or rare(4) else ""
    text = leading + text + draw(st.sampled_from(["", "  ", " \n"]))
    if rare(10):
        text += draw(st.sampled_from(["\x00", "x", "}"]))
    return text, data_len


@settings(max_examples=600, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                                   HealthCheck.too_slow])
@given(case=headers())
def test_we_accept_exactly_what_safetensors_accepts(scratch, case):
    text, data_len = case
    path = write(scratch, text, data_len)
    mine, lib = ours(path), theirs(path)
    assert (mine is None) == (lib is None), (text, data_len, mine, lib)
    assert mine == lib


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(header_length=st.one_of(st.integers(0, 64), st.integers(0, 2 ** 64 - 1)), body=st.binary(max_size=64))
def test_header_lengths_agree(scratch, header_length, body):
    assume(header_length != len(body) or True)
    path = write(scratch, body, 0, header_length=header_length)
    assert (ours(path) is None) == (theirs(path) is None), (header_length, body)


# --------------------------------------------------------------------------- named files


ENTRY = '{"dtype": "U8", "shape": [1], "data_offsets": [0, 1]'


@pytest.mark.parametrize("text", [
    '{"a": {"dtype": "Q4", "shape": [1], "data_offsets": [0, 1]}, "a": ' + ENTRY + '}}',  # bad entry overridden
    '{"a": ' + ENTRY + ', "x": "\\ud800", "x": 1}}',  # lone surrogate in an overridden value
    '{"a": ' + ENTRY + ', "x": ' + "[" * 126 + "]" * 126 + ', "x": 1}}',  # too deep, then overridden
    '{"a": ' + ENTRY + ', "x": 1, "x": 2}}',  # harmless duplicate extra field
    '{"a": {"dtype": "U8", "shape": [9], "data_offsets": [0, 9]}, "a": ' + ENTRY + '}}',  # consistent override
], ids=["bad-entry-overridden", "surrogate-overridden", "deep-overridden", "dup-extra", "good-override"])
def test_overridden_duplicates_are_judged_like_safetensors(tmp_path, text):
    path = write(str(tmp_path), text, 1)
    assert (ours(path) is None) == (theirs(path) is None)
    assert ours(path) == theirs(path)


@pytest.mark.parametrize("case", fx.CORRUPTIONS, ids=[c[0] for c in fx.CORRUPTIONS])
def test_every_named_corruption_is_refused_by_safetensors_too(tmp_path, case):
    path = fx.write_corruption(tmp_path / "x.safetensors", case)
    assert theirs(path) is None
    assert ours(path) is None


@pytest.mark.parametrize("layout", ["specforge", "speculators", "eagle", "vllm"])
def test_fixture_drafters_open_the_same_in_both(tmp_path, layout):
    path = os.path.join(fx.write_drafter(tmp_path / layout, layout), "model.safetensors")
    mine = ours(path)
    assert mine is not None and mine == theirs(path)
    assert len(mine) >= 14


def test_k2_layout_opens_the_same_in_both(tmp_path):
    path = os.path.join(fx.write_k2_drafter(tmp_path / "k2"), "model.safetensors")
    mine = ours(path)
    assert mine == theirs(path)
    assert mine["fc.weight"] == ([7168, 21504], "BF16") and mine["t2d"] == ([163840], "BOOL")


def test_every_dtype_safetensors_writes_is_known(tmp_path):
    tensors = dict(("t_" + code, fx.Tensor(code, [4])) for code in fx._SPEC_NAMES)
    path = fx.save(tmp_path / "all.safetensors", tensors)
    mine = ours(path)
    assert mine is not None and mine == theirs(path)
    assert set(d for _, d in mine.values()) == set(fx._SPEC_NAMES)


def test_safetensors_own_spelling_takes_the_canonical_path(tmp_path):
    """A file safetensors itself wrote is read by the one-regex path, with what the exact parser reads."""
    import numpy as np
    from safetensors.numpy import save_file

    path = str(tmp_path / "own.safetensors")
    save_file({"model.layers.0.w": np.zeros((4, 8), np.float32), "model.layers.1.w": np.ones((3,), np.int64),
               "b": np.zeros((0, 2), np.uint8), "\u00e9t\u00e9 \u2603": np.zeros((2,), np.float16)}, path,
              metadata={"format": "np", "note": "a, b: c"})
    header, data_start, size = ck.read_header(path)
    with open(path, "rb") as f:
        text = f.read(data_start)[8:].decode("utf-8")
    columns, problems = header_fast.parse_canonical(text, size - data_start)
    tensors, exact_problems = ck.check_header(header, size - data_start)
    assert problems == exact_problems == []
    assert [(n, d, list(s), b) for n, d, s, b in zip(columns.names, columns.dtypes, columns.shapes, columns.bytes)] == \
        [(t["name"], t["dtype"], t["shape"], t["bytes"]) for t in tensors]
    assert ours(path) == theirs(path) and len(ours(path)) == 4


_PIECES = ('":{"dtype":"', '],"data_offsets":[', ']},"', '","shape":[', ",", '"', "\x00", "\x01", "\n", "\\", "]", "}")


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_a_compact_header_spliced_is_read_fast_only_as_the_exact_parser_reads_it(data):
    """The compact path cuts a header at its fixed strings: pieces of one moved, doubled, dropped
    or swapped for another, or a control character put in, and it either declines (the exact
    parser reads it) or reads exactly what the exact parser reads."""
    from remote.checkpoints.safetensors_header import check_header_rows, parse_header_json

    sizes = data.draw(st.lists(st.sampled_from([(("F32", [2]), 8), (("BF16", [3, 1]), 6), (("U8", []), 1)]),
                               min_size=1, max_size=4))
    header, at = {"__metadata__": {"format": "pt"}} if data.draw(st.booleans()) else {}, 0
    for i, ((dtype, shape), size) in enumerate(sizes):
        header["t.%d.w" % i] = {"dtype": dtype, "shape": shape, "data_offsets": [at, at + size]}
        at += size
    text = json.dumps(header, separators=(",", ":"))
    for _ in range(data.draw(st.integers(0, 3))):  # none: the spelling as written
        start = data.draw(st.integers(0, len(text)))
        end = data.draw(st.integers(start, min(len(text), start + 24)))
        move = data.draw(st.sampled_from(["drop", "double", "insert", "move"]))
        if move == "drop":
            text = text[:start] + text[end:]
        elif move == "double":
            text = text[:end] + text[start:end] + text[end:]
        elif move == "insert":
            text = text[:start] + data.draw(st.sampled_from(_PIECES)) + text[start:]
        else:
            piece, rest = text[start:end], text[:start] + text[end:]
            where = data.draw(st.integers(0, len(rest)))
            text = rest[:where] + piece + rest[where:]
    fast = header_fast.parse_canonical(text, at)
    if fast is None:
        return
    try:
        rows, problems = check_header_rows(parse_header_json(text.encode("utf-8")), at)
    except ck.HeaderError as exc:
        raise AssertionError("read fast, refused by the exact parser (%s): %r" % (exc, text))
    columns, fast_problems = fast
    assert fast_problems == problems, text
    assert columns.rows() == [tuple(tuple(v) if isinstance(v, list) else v for v in row) for row in rows], text
