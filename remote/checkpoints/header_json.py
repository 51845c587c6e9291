"""A safetensors header's bytes read from its file and parsed exactly as safetensors' own JSON
parser (serde_json) reads them: the same limits, the same refusals, duplicate keys kept in view.

The exact parser is the reference the fast paths (header_fast) must agree with; it is what
words the error when a header is not JSON at all. Standard library only, Python 3.9+.
"""

import json
import os
import re
import struct

from ..core.regular_files import open_regular
from .problems import HeaderError, count_text, io_error, json_kind

# safetensors refuses headers above this size; so do we, before allocating anything.
MAX_HEADER_BYTES = 100000000


class JsonObject(dict):
    """A JSON object that keeps the (key, value) pairs a later duplicate key overrode.

    The last value counts, as in safetensors, but safetensors' parser still type-checks the
    earlier ones, so we must see them too.
    """

    __slots__ = ("overridden",)


def _object_pairs(pairs):
    obj = JsonObject(pairs)
    obj.overridden = ()
    if len(obj) != len(pairs):
        last = dict((k, i) for i, (k, _) in enumerate(pairs))
        obj.overridden = tuple(pair for i, pair in enumerate(pairs) if last[pair[0]] != i)
    return obj


def duplicate_keys(obj):
    """The keys of a parsed object that were given more than once."""
    return [k for k, _ in getattr(obj, "overridden", ())]


def refuse_constant(name):
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


SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F]")


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


def depth(value):
    """Nesting depth of a JSON value (0 for a scalar), without recursion."""
    deepest = 0
    stack = [(value, 0)]
    while stack:
        item, level = stack.pop()
        if isinstance(item, (dict, list)):
            level += 1
            deepest = max(deepest, level)
            if isinstance(item, dict):
                children = list(item.values()) + [v for _, v in getattr(item, "overridden", ())]
            else:
                children = item
            stack.extend((child, level) for child in children)
    return deepest


def parse_header_json(raw):
    """The header bytes as a dict, refusing what safetensors' JSON parser refuses."""
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise HeaderError("header is not valid UTF-8 (bad byte at offset %d of the header)" % exc.start)
    try:
        header = json.loads(text, object_pairs_hook=_object_pairs, parse_constant=refuse_constant,
                            parse_int=_parse_int, parse_float=_parse_float)
    except RecursionError:
        raise HeaderError("header is not valid JSON: it nests too deeply")
    except ValueError as exc:
        raise HeaderError("header is not valid JSON: %s" % exc)
    if not isinstance(header, dict):
        raise HeaderError("header is JSON but not an object (it is %s); a safetensors header maps "
                          "tensor names to their dtype, shape and data_offsets" % json_kind(header))
    if SURROGATE_ESCAPE.search(text) and _has_surrogate(header):
        raise HeaderError("header is not valid JSON: it contains a lone UTF-16 surrogate escape")
    return header


def read_exact(f, size):
    """Up to `size` bytes of `f`, read in blocks: read(n) would allocate n up front."""
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
    raw, data_start, file_size = read_raw_header(path)
    return parse_header_json(raw), data_start, file_size


def read_raw_header(path):
    """(header bytes, data start, file size), refusing absurd lengths before allocating."""
    try:
        with open_regular(path) as f:
            file_size = os.fstat(f.fileno()).st_size
            prefix = f.read(8)
            if len(prefix) < 8:
                raise HeaderError("file is %s bytes long, too short to hold the 8-byte header length"
                                  % count_text(file_size))
            (header_bytes,) = struct.unpack("<Q", prefix)
            if header_bytes > MAX_HEADER_BYTES:
                raise HeaderError("header length %s bytes is absurd: safetensors refuses headers over "
                                  "%s bytes" % (count_text(header_bytes), count_text(MAX_HEADER_BYTES)))
            if 8 + header_bytes > file_size:
                raise HeaderError("header length %s bytes runs beyond the end of the file (%s bytes)"
                                  % (count_text(header_bytes), count_text(file_size)))
            raw = read_exact(f, header_bytes)
    except OSError as exc:
        raise io_error(path, exc)
    if len(raw) < header_bytes:
        raise HeaderError("file ended while reading the %s-byte header (was it truncated while we read?)"
                          % count_text(header_bytes))
    return raw, 8 + header_bytes, file_size
