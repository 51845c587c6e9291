"""Safetensors headers read and checked without touching tensor data: the dtype table, the
header parser that refuses what safetensors refuses, and per-tensor dtype/shape/offset checks.

Also home to the checkpoint error classes and the problem/message helpers the other checkpoint
modules share. Standard library only, Python 3.9+.
"""

import json
import os
import re
import struct

# safetensors refuses headers above this size; so do we, before allocating anything.
MAX_HEADER_BYTES = 100000000
U64_MAX = 2 ** 64 - 1
# serde_json (which safetensors uses) stops at 128 levels of nesting; a value inside a
# tensor entry sits two levels down already.
MAX_UNKNOWN_FIELD_DEPTH = 125

# Every dtype safetensors defines, with its size in bits (F4 and F6 pack below a byte).
DTYPE_BITS = {
    "BOOL": 8, "F4": 4, "F6_E2M3": 6, "F6_E3M2": 6,
    "U8": 8, "I8": 8, "F8_E5M2": 8, "F8_E4M3": 8, "F8_E8M0": 8,
    "F8_E4M3FNUZ": 8, "F8_E5M2FNUZ": 8,
    "I16": 16, "U16": 16, "F16": 16, "BF16": 16,
    "I32": 32, "U32": 32, "F32": 32,
    "C64": 64, "F64": 64, "I64": 64, "U64": 64,
}
_INT_FORMATS = {"I8": "b", "U8": "B", "I16": "h", "U16": "H", "I32": "i", "U32": "I",
                "I64": "q", "U64": "Q", "BOOL": "B"}


class CheckpointError(Exception):
    """Base of the errors this module raises; the message is one human line."""


class CheckpointIOError(CheckpointError):
    """The path itself cannot be read: it does not exist, or permission is denied."""


class HeaderError(CheckpointError):
    """A file whose safetensors header cannot be read at all."""


# ---------------------------------------------------------------------------------------------
# Problems, and the words in them (shared by the checkpoint modules)


def _err(message):
    return {"level": "error", "message": message}


def _warn(message):
    return {"level": "warning", "message": message}


def _n(value):
    """A byte count or other large count, with thousands separators."""
    return "{:,}".format(value)


def _q(name):
    """A file or shard name for a one-line message: as is when printable, else quoted."""
    return name if name.isprintable() and name.strip() == name and name else repr(name)


def _d(value):
    """A dimension (hidden size, vocabulary, ...), written as config.json and shapes write it."""
    return str(value)


# ---------------------------------------------------------------------------------------------
# Reading one header


class _JsonObject(dict):
    """A JSON object that keeps the (key, value) pairs a later duplicate key overrode.

    The last value counts, as in safetensors, but safetensors' parser still type-checks the
    earlier ones, so we must see them too.
    """

    __slots__ = ("overridden",)


def _object_pairs(pairs):
    obj = _JsonObject(pairs)
    obj.overridden = ()
    if len(obj) != len(pairs):
        last = dict((k, i) for i, (k, _) in enumerate(pairs))
        obj.overridden = tuple(pair for i, pair in enumerate(pairs) if last[pair[0]] != i)
    return obj


def _duplicate_keys(obj):
    return [k for k, _ in getattr(obj, "overridden", ())]


def _refuse_constant(name):
    raise ValueError("%s is not JSON" % name)


def _parse_int(text):
    # serde_json reads -0 as a float and integers beyond 64 bits as floats, which may
    # overflow; keep the same distinctions so that we refuse what safetensors refuses.
    if text == "-0":
        return -0.0
    if len(text) > 20 and float(text) in (float("inf"), float("-inf")):
        raise ValueError("number out of range")
    return int(text)


def _parse_float(text):
    value = float(text)
    if value in (float("inf"), float("-inf")):
        raise ValueError("number out of range")
    return value


_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F]")


def _has_surrogate(value):
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            if any("\ud800" <= ch <= "\udfff" for ch in item):
                return True
        elif isinstance(item, dict):
            stack.extend(item.keys())
            stack.extend(item.values())
            stack.extend(v for _, v in getattr(item, "overridden", ()))
        elif isinstance(item, list):
            stack.extend(item)
    return False


def _depth(value):
    """Nesting depth of a JSON value (0 for a scalar), without recursion."""
    deepest = 0
    stack = [(value, 0)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, (dict, list)):
            depth += 1
            deepest = max(deepest, depth)
            if isinstance(item, dict):
                children = list(item.values()) + [v for _, v in getattr(item, "overridden", ())]
            else:
                children = item
            stack.extend((child, depth) for child in children)
    return deepest


# Byte sequences after which the plain (C) JSON parser could read a header differently from
# serde_json: -0 (a float to serde, refused as a dimension), and whitespace before a colon or an
# escaped quote before one (either would upset the key count that finds duplicate keys).
_PLAIN_PARSE_DOUBTS = (b"-0", b'\\":', b" :", b"\t:", b"\n:", b"\r:")


def _parse_plain(raw):
    """The header through the C parser alone, or None when only the exact parser can tell.

    Every key is followed by `":` when no whitespace or escaped quote comes before a colon
    (_PLAIN_PARSE_DOUBTS), so when the text holds as many `":` as the parsed objects have
    keys, no key was a duplicate that a later one hid. Numbers the plain parser reads
    differently (huge integers, overflowing floats) are never part of a well-formed entry,
    and anything else sends the whole header back to the exact parser (see read_header_rows).
    """
    if any(doubt in raw for doubt in _PLAIN_PARSE_DOUBTS):
        return None
    try:
        text = raw.decode("utf-8")
        if _SURROGATE_ESCAPE.search(text):
            return None
        header = json.loads(text, parse_constant=_refuse_constant)
    except (ValueError, RecursionError):
        return None  # the exact parser words the error
    if type(header) is not dict:
        return None
    keys = len(header)
    for value in header.values():
        if type(value) is dict:
            keys += len(value)
            for inner in value.values():
                if type(inner) is dict:
                    return None  # an object deeper down: its keys are not counted here
    if raw.count(b'":') != keys:
        return None
    return header


def parse_header_json(raw):
    """The header bytes as a dict, refusing what safetensors' JSON parser refuses."""
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise HeaderError("header is not valid UTF-8 (bad byte at offset %d of the header)" % exc.start)
    try:
        header = json.loads(text, object_pairs_hook=_object_pairs, parse_constant=_refuse_constant,
                            parse_int=_parse_int, parse_float=_parse_float)
    except RecursionError:
        raise HeaderError("header is not valid JSON: it nests too deeply")
    except ValueError as exc:
        raise HeaderError("header is not valid JSON: %s" % exc)
    if not isinstance(header, dict):
        raise HeaderError("header is JSON but not an object (it is %s); a safetensors header maps "
                          "tensor names to their dtype, shape and data_offsets" % _json_kind(header))
    if _SURROGATE_ESCAPE.search(text) and _has_surrogate(header):
        raise HeaderError("header is not valid JSON: it contains a lone UTF-16 surrogate escape")
    return header


def _json_kind(value):
    if isinstance(value, bool):
        return "a boolean"
    if value is None:
        return "null"
    if isinstance(value, (int, float)):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "an array"
    return "an object"


def _read_exact(f, size):
    chunks = []
    remaining = size
    while remaining > 0:
        chunk = f.read(min(remaining, 16 * 1024 * 1024))
        if not chunk:
            break
        chunks.append(chunk)
        remaining -= len(chunk)
    return b"".join(chunks)


def read_header(path):
    """(header dict, byte offset where tensor data starts, file size) of one safetensors file.

    Raises HeaderError when the header cannot be read (length absurd or beyond the file, not
    UTF-8, not JSON, not an object) and CheckpointIOError when the file cannot be opened.
    Allocates at most min(header length, file size, 100,000,000) bytes.
    """
    raw, data_start, file_size = _read_raw_header(path)
    return parse_header_json(raw), data_start, file_size


def read_header_rows(path):
    """(rows, problems, data start, file size) of one file: check_header_rows(read_header(path)),
    the same answer, fast for a header of many well-formed entries.

    Such a header is parsed by the C parser alone and each entry checked in a few operations;
    a header with anything unusual in it is read again by the exact parser and checked in full.
    """
    raw, data_start, file_size = _read_raw_header(path)
    header = _parse_plain(raw)
    if header is not None:
        rows = _well_formed_rows(header)
        if rows is not None:
            del header
            return rows, _check_offsets(rows, file_size - data_start), data_start, file_size
    rows, problems = check_header_rows(parse_header_json(raw), file_size - data_start)
    return rows, problems, data_start, file_size


def _well_formed_rows(header):
    """Rows of a header whose every entry is well-formed and whose __metadata__ maps strings
    to strings; None as soon as something is not."""
    metadata = header.get("__metadata__")
    if metadata is not None and not (type(metadata) is dict and all(type(v) is str for v in metadata.values())):
        return None
    shapes = {}
    rows = []
    for name, entry in header.items():
        if name == "__metadata__":
            continue
        row = _entry_row(name, entry, shapes)
        if row is None:
            return None
        rows.append(row)
    return rows


def _read_raw_header(path):
    """(header bytes, data start, file size), refusing absurd lengths before allocating."""
    try:
        with open(path, "rb") as f:
            file_size = os.fstat(f.fileno()).st_size
            prefix = f.read(8)
            if len(prefix) < 8:
                raise HeaderError("file is %s bytes long, too short to hold the 8-byte header length"
                                  % _n(file_size))
            (header_bytes,) = struct.unpack("<Q", prefix)
            if header_bytes > MAX_HEADER_BYTES:
                raise HeaderError("header length %s bytes is absurd: safetensors refuses headers over "
                                  "%s bytes" % (_n(header_bytes), _n(MAX_HEADER_BYTES)))
            if 8 + header_bytes > file_size:
                raise HeaderError("header length %s bytes runs beyond the end of the file (%s bytes)"
                                  % (_n(header_bytes), _n(file_size)))
            raw = _read_exact(f, header_bytes)
    except OSError as exc:
        raise CheckpointIOError(_os_message(path, exc))
    if len(raw) < header_bytes:
        raise HeaderError("file ended while reading the %s-byte header (was it truncated while we read?)"
                          % _n(header_bytes))
    return raw, 8 + header_bytes, file_size


def _os_message(path, exc):
    return "%s: %s" % (path, exc.strerror or exc)


# ---------------------------------------------------------------------------------------------
# Checking one header against its file


def _is_u64(value):
    return isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= U64_MAX


def _shape_text(shape):
    return "[" + ", ".join(str(d) for d in shape) + "]"


def _entry_fields(name, entry, problems):
    """(dtype, shape, offsets) of one header entry as written, or None after an error."""
    if isinstance(entry, list):
        # serde also accepts a struct written as a 3-element array.
        if len(entry) != 3:
            problems.append(_err("tensor %r: entry is an array of %d items, not an object with dtype, "
                                 "shape and data_offsets" % (name, len(entry))))
            return None
        return entry[0], entry[1], entry[2]
    if not isinstance(entry, dict):
        problems.append(_err("tensor %r: entry is %s, not an object with dtype, shape and data_offsets"
                             % (name, _json_kind(entry))))
        return None
    ok = True
    for field in _duplicate_keys(entry):
        if field in ("dtype", "shape", "data_offsets"):
            problems.append(_err("tensor %r gives %r twice" % (name, field)))
            ok = False
    for field in ("dtype", "shape", "data_offsets"):
        if field not in entry:
            problems.append(_err("tensor %r has no %r" % (name, field)))
            ok = False
    for field, value in list(entry.items()) + list(getattr(entry, "overridden", ())):
        if field not in ("dtype", "shape", "data_offsets") and _depth(value) > MAX_UNKNOWN_FIELD_DEPTH:
            problems.append(_err("tensor %r: extra field %r nests deeper than safetensors' JSON parser "
                                 "allows" % (name, field)))
            ok = False
    if not ok:
        return None
    return entry["dtype"], entry["shape"], entry["data_offsets"]


def _check_entry(name, entry, problems):
    """One tensor's dict (name, dtype, shape, bytes, begin, end), with None where unusable."""
    tensor = _entry_types(name, entry, problems)
    if tensor["dtype"] is None or tensor["shape"] is None:
        return tensor
    return _check_size(tensor, problems)


# The dtype names as one string object each: a header's values are new strings per tensor.
_DTYPE_NAMES = dict((name, name) for name in DTYPE_BITS)
_ROW_FIELDS = ("name", "dtype", "shape", "bytes", "begin", "end")


def _entry_row(name, entry, shapes, bits_of=DTYPE_BITS, names=_DTYPE_NAMES):
    """(name, dtype, shape tuple, bytes, begin, end) of a well-formed entry, or None.

    The common case in a few operations; anything unusual (None) goes through _check_entry,
    which words the problem. Equal shapes share one tuple (`shapes` interns them).
    """
    if type(entry) is not dict or len(entry) != 3:
        return None
    dtype = entry.get("dtype")
    shape = entry.get("shape")
    offsets = entry.get("data_offsets")
    if type(dtype) is not str or type(shape) is not list or type(offsets) is not list or len(offsets) != 2:
        return None
    bits = bits_of.get(dtype)
    begin, end = offsets
    if bits is None or type(begin) is not int or type(end) is not int or not 0 <= begin <= end <= U64_MAX:
        return None
    for dim in shape:
        if type(dim) is not int:  # bool and float compare equal to ints: checked every time
            return None
        bits *= dim
        if bits > U64_MAX:  # even if a later 0 brings it back: _check_size words the overflow
            return None
    key = tuple(shape)
    shared = shapes.get(key)
    if shared is None:  # a new shape: its range checked once
        if not all(0 <= dim <= U64_MAX for dim in shape):
            return None
        shared = shapes[key] = key
    if bits > U64_MAX or bits % 8 or bits >> 3 != end - begin:
        return None
    return (name, names[dtype], shared, end - begin, begin, end)


def check_header_rows(header, data_bytes):
    """(rows, problems) like check_header, each tensor a tuple (name, dtype, shape, bytes, begin, end).

    Shapes are tuples here (lists in check_header's dicts); None marks what is unusable.
    """
    problems = []
    _check_overridden(header, problems)
    shapes = {}
    rows = []
    for name, entry in header.items():
        if name == "__metadata__":
            continue
        row = _entry_row(name, entry, shapes)
        if row is None:
            t = _check_entry(name, entry, problems)
            shape = tuple(t["shape"]) if t["shape"] is not None else None
            row = (name, t["dtype"], shape, t["bytes"], t["begin"], t["end"])
        rows.append(row)
    problems.extend(_check_offsets(rows, data_bytes))
    return rows, problems


def _entry_types(name, entry, problems):
    """The entry's fields, each checked for the type safetensors' parser requires."""
    fields = _entry_fields(name, entry, problems)
    tensor = {"name": name, "dtype": None, "shape": None, "bytes": None, "begin": None, "end": None}
    if fields is None:
        return tensor
    dtype, shape, offsets = fields
    if isinstance(dtype, dict) and len(dtype) == 1 and list(dtype.values())[0] is None:
        dtype = list(dtype)[0]  # serde's other spelling of a unit variant: {"BF16": null}
    if not isinstance(dtype, str):
        problems.append(_err("tensor %r: dtype is %s, not a dtype name" % (name, _json_kind(dtype))))
    elif dtype not in DTYPE_BITS:
        problems.append(_err("tensor %r has unknown dtype %r (safetensors knows %s)"
                             % (name, dtype, ", ".join(DTYPE_BITS))))
    else:
        tensor["dtype"] = dtype
    if not isinstance(shape, list) or not all(_is_u64(d) for d in shape):
        problems.append(_err("tensor %r: shape %s is not a list of non-negative integers"
                             % (name, _short_json(shape))))
    else:
        tensor["shape"] = list(shape)
    if not isinstance(offsets, list) or len(offsets) != 2 or not all(_is_u64(o) for o in offsets):
        problems.append(_err("tensor %r: data_offsets %s is not a pair of non-negative integers"
                             % (name, _short_json(offsets))))
    else:
        tensor["begin"], tensor["end"] = offsets
    return tensor


def _check_size(tensor, problems):
    """Shape x dtype against the bytes the data_offsets hold."""
    name = tensor["name"]
    elements = 1
    for dim in tensor["shape"]:
        elements *= dim
        if elements > U64_MAX:
            break
    bits = elements * DTYPE_BITS[tensor["dtype"]]
    if elements > U64_MAX or bits > U64_MAX:
        problems.append(_err("tensor %r: shape %s is too large: its size overflows 64 bits"
                             % (name, _shape_text(tensor["shape"]))))
        return tensor
    if bits % 8:
        problems.append(_err("tensor %r: %s %s elements are %s bits, which does not end on a byte boundary"
                             % (name, _n(elements), tensor["dtype"], _n(bits))))
        return tensor
    tensor["bytes"] = bits // 8
    if tensor["begin"] is not None and tensor["end"] >= tensor["begin"]:
        stored = tensor["end"] - tensor["begin"]
        if stored != tensor["bytes"]:
            problems.append(_err(
                "tensor %r: data_offsets [%d, %d] hold %s bytes, but shape %s x %s (%d bits) needs %s bytes"
                % (name, tensor["begin"], tensor["end"], _n(stored), _shape_text(tensor["shape"]),
                   tensor["dtype"], DTYPE_BITS[tensor["dtype"]], _n(tensor["bytes"]))))
    return tensor


def _short_json(value):
    text = json.dumps(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _check_overridden(header, problems):
    """Problems of the header as a whole: duplicate entries and __metadata__."""
    for key, earlier in getattr(header, "overridden", ()):
        if key == "__metadata__":
            problems.append(_err("header has more than one __metadata__ entry"))
            continue
        problems.append(_warn("tensor %r appears more than once in the header; the last entry counts" % key))
        before = len(problems)
        _entry_types(key, earlier, problems)
        for p in problems[before:]:
            p["message"] = "earlier entry of " + p["message"]
    metadata = header.get("__metadata__")
    if metadata is not None and not (isinstance(metadata, dict)
                                     and all(isinstance(v, str) for v in metadata.values())):
        problems.append(_err("__metadata__ must map strings to strings, it is %s" % _short_json(metadata)))


def check_header(header, data_bytes):
    """(tensors, problems) for a parsed header whose data section is `data_bytes` long.

    Mirrors safetensors' own validation: every file it opens passes, every file it refuses gets
    at least one error here, and each error says which tensor and what is wrong.
    """
    rows, problems = check_header_rows(header, data_bytes)
    tensors = []
    for row in rows:
        tensor = dict(zip(_ROW_FIELDS, row))
        if tensor["shape"] is not None:
            tensor["shape"] = list(tensor["shape"])
        tensors.append(tensor)
    return tensors, problems


def _check_offsets(rows, data_bytes):
    spans = sorted((row[4], row[5], row[0]) for row in rows if row[4] is not None)
    problems = []
    layout = []
    cursor = 0
    previous = None
    for begin, end, name in spans:
        if end < begin:
            layout.append(_err("tensor %r: data_offsets [%d, %d] are out of order (end before begin)"
                               % (name, begin, end)))
            continue
        if begin > cursor:
            layout.append(_err("bytes %s..%s of the data section belong to no tensor: a gap before tensor %r "
                               "(data_offsets [%d, %d])" % (_n(cursor), _n(begin), name, begin, end)))
        elif begin < cursor:
            layout.append(_err("tensor %r: data_offsets [%d, %d] overlap tensor %r (data_offsets [%d, %d])"
                               % (name, begin, end, previous[2], previous[0], previous[1])))
        if end > data_bytes:
            layout.append(_err("tensor %r: data_offsets [%d, %d] reach beyond the end of the file (its data "
                               "section holds %s bytes)" % (name, begin, end, _n(data_bytes))))
        if end >= cursor:
            previous = (begin, end, name)
        cursor = max(cursor, end)
    unplaced = any(row[4] is None or row[5] < row[4] for row in rows)
    if cursor < data_bytes and not unplaced:  # else the bytes belong to the tensor we could not place
        problems.append(_err("file is %s bytes longer than its header says: the tensors end at byte %s of "
                             "the data section, which holds %s"
                             % (_n(data_bytes - cursor), _n(cursor), _n(data_bytes))))
    elif cursor > data_bytes:
        problems.append(_err("file is shorter than its header says: the tensors need %s bytes of data, the "
                             "file holds %s (%s bytes missing; an interrupted download?)"
                             % (_n(cursor), _n(data_bytes), _n(cursor - data_bytes))))
    return problems + layout
