"""The fast paths for a header of many well-formed entries (a MoE shard holds thousands): the
whole header checked in a few passes over lists instead of a few dozen operations per tensor.

Two parsers, each answering None as soon as anything is unusual, so that the exact parser
(header_json) and the entry-by-entry checks (header_checks) word what is wrong:
- canonical: the compact spelling safetensors itself writes (`{"__metadata__":{...},"w":{"dtype":
  "BF16","shape":[4,8],"data_offsets":[0,64]},...}`), matched by one regular expression that
  must cover the header exactly;
- plain: any other spelling, through the C JSON parser.
Both end in check_columns, which checks dtypes and shapes once per distinct value and sizes
and offsets as whole lists. Standard library only, Python 3.9+.
"""

import json
import re
from itertools import accumulate, chain
from operator import itemgetter, sub

from .columns import TensorColumns
from .dtypes import DTYPE_BITS, DTYPE_NAMES, U64_MAX
from .header_checks import check_offsets
from .header_json import SURROGATE_ESCAPE, refuse_constant

# ---------------------------------------------------------------------------------------------
# canonical: safetensors' own compact spelling

# A JSON string with nothing to unescape: no quote, backslash or control character.
_PLAIN_STRING = r'[^"\\\x00-\x1f]*'
# A JSON integer (no sign, no leading zero: serde refuses 01, and -0 is a float to it).
_INTEGER = r"(?:0|[1-9][0-9]*)"
# One entry: its name, its dtype and shape as one piece (`BF16","shape":[4,8`: a MoE shard has a
# dozen distinct ones among thousands of entries, each read once), and its data offsets.
_ENTRY = re.compile(r',"(' + _PLAIN_STRING + r')":\{"dtype":"([A-Z0-9_]+","shape":\[[0-9,]*)\],"data_offsets":\[('
                    + _INTEGER + r"),(" + _INTEGER + r")\]\}")
_SHAPE_AFTER_DTYPE = '","shape":['
_ENTRY_FIXED_CHARS = len(',"":{"dtype":"],"data_offsets":[,]}')
_METADATA = re.compile(r'"__metadata__":\{((?:"' + _PLAIN_STRING + '":"' + _PLAIN_STRING + '"(?:,"' + _PLAIN_STRING
                       + '":"' + _PLAIN_STRING + r'")*)?)\}')
# JSON's whitespace, which may follow the header object (safetensors pads with spaces).
_JSON_SPACE = " \t\n\r"


def parse_canonical(text, data_bytes):
    """TensorColumns of a header in safetensors' compact spelling with every entry well-formed
    and the tensors tiling the data section, with its problems; None when anything differs."""
    body = text.rstrip(_JSON_SPACE)
    if not body.startswith("{") or not body.endswith("}"):
        return None
    metadata = _METADATA.match(body, 1)
    if metadata is not None:
        pairs = metadata.group(1)
        # No string holds a quote, so '":"' counts the pairs: fewer keys means one came twice.
        if pairs and len(json.loads("{" + pairs + "}")) != pairs.count('":"'):
            return None
        entries = body[metadata.end():-1]
    else:
        entries = "," + body[1:-1]
    found = _ENTRY.findall(entries)
    if not found:
        return None
    names, kinds, begin_texts, end_texts = zip(*found)
    del found
    # The matches must tile the entries exactly: then nothing else stands between them.
    covered = len(names) * _ENTRY_FIXED_CHARS + sum(sum(map(len, column)) for column in
                                                    (names, kinds, begin_texts, end_texts))
    if covered != len(entries) or "__metadata__" in names or len(set(names)) != len(names):
        return None
    of_kind = {}  # `BF16","shape":[4,8` -> (dtype, shape, bytes it needs)
    for kind in set(kinds):
        dtype, _, shape_text = kind.partition(_SHAPE_AFTER_DTYPE)
        if dtype not in DTYPE_BITS:
            return None
        try:
            shape = tuple(json.loads("[" + shape_text + "]"))  # refuses 01, [,], [1,] as serde does
        except ValueError:
            return None
        need = _well_formed_bytes(dtype, shape)
        if need is None:
            return None
        of_kind[kind] = (DTYPE_NAMES[dtype], shape, need)
    described = list(map(of_kind.__getitem__, kinds))
    del kinds
    dtypes, shapes, sizes = list(map(itemgetter(0), described)), list(map(itemgetter(1), described)), \
        list(map(itemgetter(2), described))
    del described
    ends = list(map(int, end_texts))
    # Tiled in header order (the common case: each begin spelled as the end before it), every end
    # is the sum of the sizes before it: the offsets are checked as whole lists, and the begins
    # are the ends shifted (canonical integers are equal exactly when their spellings are).
    if (begin_texts[0] == "0" and begin_texts[1:] == end_texts[:-1] and ends[-1] == data_bytes
            and ends == list(accumulate(sizes))):
        return TensorColumns(list(names), dtypes, shapes, sizes, [0] + ends[:-1], ends), []
    return check_columns(list(names), dtypes, shapes, list(map(int, begin_texts)), ends, data_bytes)


# ---------------------------------------------------------------------------------------------
# plain: the C JSON parser, then the same whole-list checks

# Byte sequences after which the plain (C) JSON parser could read a header differently from
# serde_json: -0 (a float to serde, refused as a dimension), and whitespace before a colon or an
# escaped quote before one (either would upset the key count that finds duplicate keys). Each
# is looked for only when its first byte occurs at all (a one-byte search is much faster).
_PLAIN_PARSE_DOUBTS = ((b"-", b"-0"), (b"\\", b'\\":'), (b" ", b" :"), (b"\t", b"\t:"), (b"\n", b"\n:"),
                       (b"\r", b"\r:"))


def parse_plain(raw):
    """The header through the C parser alone, or None when only the exact parser can tell.

    Every key is followed by `":` when no whitespace or escaped quote comes before a colon
    (_PLAIN_PARSE_DOUBTS), so when the text holds as many `":` as the parsed objects have
    keys, no key was a duplicate that a later one hid. Numbers the plain parser reads
    differently (huge integers, overflowing floats) are never part of a well-formed entry,
    and anything else sends the whole header back to the exact parser.
    """
    if any(first in raw and doubt in raw for first, doubt in _PLAIN_PARSE_DOUBTS):
        return None
    try:
        text = raw.decode("utf-8")
        if "\\" in text and SURROGATE_ESCAPE.search(text):
            return None
        header = json.loads(text, parse_constant=refuse_constant)
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


def plain_columns(header, data_bytes):
    """TensorColumns of a parsed header whose every entry is well-formed, whose __metadata__
    maps strings to strings and whose tensors tile the data section, with its problems; None
    as soon as something is not."""
    names = list(header)
    entries = list(header.values())
    if "__metadata__" in header:
        at = names.index("__metadata__")
        metadata = entries[at]
        if not (type(metadata) is dict and all(type(v) is str for v in metadata.values())):
            return None
        del names[at], entries[at]
    if not entries or set(map(type, entries)) != {dict} or set(map(len, entries)) != {3}:
        return None
    try:
        dtypes = list(map(itemgetter("dtype"), entries))
        shape_lists = list(map(itemgetter("shape"), entries))
        offsets = list(map(itemgetter("data_offsets"), entries))
    except KeyError:
        return None
    del entries
    if (set(map(type, dtypes)) != {str} or not set(dtypes) <= DTYPE_BITS.keys() or set(map(type, shape_lists)) != {list}
            or set(map(type, offsets)) != {list} or set(map(len, offsets)) != {2}):
        return None
    begins = list(map(itemgetter(0), offsets))
    ends = list(map(itemgetter(1), offsets))
    # bool and float compare equal to ints: their types are checked, every one of them.
    if set(map(type, chain(begins, ends, chain.from_iterable(shape_lists)))) - {int}:
        return None
    shared = {}
    shapes = list(map(tuple, shape_lists))
    shapes = list(map(shared.setdefault, shapes, shapes))  # equal shapes share one tuple
    return check_columns(names, list(map(DTYPE_NAMES.__getitem__, dtypes)), shapes, begins, ends, data_bytes)


# ---------------------------------------------------------------------------------------------
# The checks both paths end in


def _well_formed_bytes(dtype, shape):
    """The bytes `shape` x `dtype` needs, or None when it is out of range, overflows 64 bits (at
    any step, as safetensors counts it) or does not end on a byte."""
    bits = DTYPE_BITS[dtype]
    for dim in shape:
        if type(dim) is not int or not 0 <= dim <= U64_MAX:
            return None
        bits *= dim
        if bits > U64_MAX:
            return None
    return None if bits % 8 else bits >> 3


def check_columns(names, dtypes, shapes, begins, ends, data_bytes):
    """(TensorColumns, problems) when every tensor's data_offsets hold exactly what its shape and
    dtype need (dtypes known and interned, ints already checked to be ints), else None."""
    if begins and (min(begins) < 0 or max(ends) > U64_MAX):
        return None
    needs = {}
    for pair in set(zip(dtypes, shapes)):
        needs[pair] = _well_formed_bytes(*pair)
        if needs[pair] is None:
            return None
    sizes = list(map(sub, ends, begins))
    if list(map(needs.__getitem__, zip(dtypes, shapes))) != sizes:
        return None
    columns = TensorColumns(names, dtypes, shapes, sizes, begins, ends)
    return columns, tiling_problems(names, begins, ends, data_bytes)


def tiling_problems(names, begins, ends, data_bytes):
    """check_offsets' answer for spans already known to be sound (begin <= end): none when they
    tile the data section in header order, the common case, found with two list comparisons."""
    if begins and begins[0] == 0 and ends[-1] == data_bytes and ends[:-1] == begins[1:]:
        return []
    return check_offsets(names, begins, ends, data_bytes)
