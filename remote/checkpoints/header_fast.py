"""The fast paths for a header of many well-formed entries (a MoE shard holds thousands): the
whole header checked in a few passes over lists instead of a few dozen operations per tensor.

Two parsers, each answering None as soon as anything is unusual, so that the exact parser
(header_json) and the entry-by-entry checks (header_checks) word what is wrong:
- canonical: the compact spelling safetensors itself writes (`{"__metadata__":{...},"w":{"dtype":
  "BF16","shape":[4,8],"data_offsets":[0,64]},...}`), cut at its fixed strings, each piece then
  checked (the offsets of tensors that tile the data section as the one text their sizes spell);
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
# The bytes a plain string may not hold.
_NOT_IN_PLAIN_STRING = b'"\\' + bytes(range(32))
# A JSON integer (no sign, no leading zero: serde refuses 01, and -0 is a float to it).
_INTEGER = r"(?:0|[1-9][0-9]*)"
# An entry, `"NAME":{"dtype":"BF16","shape":[4,8],"data_offsets":[0,64]}`, is its name, its dtype
# and shape as one piece (`BF16","shape":[4,8`: a MoE shard has a dozen distinct ones among
# thousands of entries, each checked once) and its offsets, between these three strings (the
# third one also between one entry and the next):
_AFTER_NAME = '":{"dtype":"'
_AFTER_KIND = '],"data_offsets":['
_AFTER_ENTRY = ']},"'
# The pieces are cut at every one of them at once, a mark ("\0" after a name, "\1" after a
# kind) saying which one each piece came after: the order is then checked with the pieces.
_KIND_MARK, _OFFSETS_MARK = "\0", "\1"
_KIND = re.compile(_KIND_MARK + r'[A-Z0-9_]+","shape":\[[0-9,]*')
_OFFSETS = re.compile(r"(?:\x01%s,%s\n)*\x01%s,%s" % ((_INTEGER,) * 4))
_SHAPE_AFTER_DTYPE = '","shape":['
_METADATA = re.compile(r'"__metadata__":\{((?:"' + _PLAIN_STRING + '":"' + _PLAIN_STRING + '"(?:,"' + _PLAIN_STRING
                       + '":"' + _PLAIN_STRING + r'")*)?)\}')
# JSON's whitespace, which may follow the header object (safetensors pads with spaces).
_JSON_SPACE = " \t\n\r"


def _entry_pieces(body, first):
    """(names, kinds, offsets texts) of the entries from body[first] (the first name) to the
    end of the header object, or None when they are not spelled exactly the compact way."""
    if not body.endswith("]}}") or _KIND_MARK in body or _OFFSETS_MARK in body:
        return None
    flat = body[first:-3].replace(_AFTER_NAME, _AFTER_ENTRY + _KIND_MARK).replace(_AFTER_KIND, _AFTER_ENTRY + _OFFSETS_MARK)
    pieces = flat.split(_AFTER_ENTRY)
    del flat
    if len(pieces) % 3:
        return None
    names, kinds, offsets = pieces[0::3], pieces[1::3], pieces[2::3]
    del pieces
    # A name is a plain string (nor can it begin with a mark: marks are control characters).
    raw = "".join(names).encode("utf-8")
    if len(raw.translate(None, _NOT_IN_PLAIN_STRING)) != len(raw):
        return None
    # Each kind came after a name (its mark says so); the offsets pieces are checked by the caller.
    if not all(map(_KIND.fullmatch, set(kinds))):
        return None
    return names, kinds, "\n".join(offsets)


def _tiled_offsets_text(ends):
    """The offsets pieces, joined as _entry_pieces joins them, of tensors that tile the data
    section in header order and end at `ends`: `\1B,E` each, every begin the end before it."""
    count = len(ends)
    spelled = list(map(str, ends))
    parts = [None] * (4 * count)
    parts[0::4] = ["\n" + _OFFSETS_MARK] * count
    parts[0] = _OFFSETS_MARK
    parts[1::4] = ["0"] + spelled[:-1]
    parts[2::4] = [","] * count
    parts[3::4] = spelled
    return "".join(parts)


def _offsets(offsets_text):
    """(begins, ends) as ints from offsets pieces, or None unless each piece is `\1B,E` with B and
    E integers spelled as serde reads them, in the order the compact spelling has them."""
    if not _OFFSETS.fullmatch(offsets_text):
        return None
    texts = offsets_text.replace("\n" + _OFFSETS_MARK, ",")[1:].split(",")
    return list(map(int, texts[0::2])), list(map(int, texts[1::2]))


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
        first = metadata.end() + 2
        if not body.startswith(',"', metadata.end()):
            return None
    else:
        first = 2
        if not body.startswith('"', 1):
            return None
    found = _entry_pieces(body, first)
    if found is None:
        return None
    names, kinds, offsets_text = found
    del found
    if "__metadata__" in names or len(set(names)) != len(names):
        return None
    of_kind = {}  # `\0BF16","shape":[4,8` -> (dtype, shape, bytes it needs)
    for kind in set(kinds):
        dtype, _, shape_text = kind[1:].partition(_SHAPE_AFTER_DTYPE)
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
    # Tiled in header order (the common case), every end is the sum of the sizes up to it and
    # every begin the end before it: the offsets text is then exactly the one those sums spell
    # (canonical integers are equal exactly when their spellings are), made and compared whole.
    ends = list(accumulate(sizes))
    if ends[-1] == data_bytes and offsets_text == _tiled_offsets_text(ends):
        return TensorColumns(names, dtypes, shapes, sizes, [0] + ends[:-1], ends, spans_are_bytes=True), []
    offsets = _offsets(offsets_text)
    if offsets is None:
        return None
    return check_columns(names, dtypes, shapes, offsets[0], offsets[1], data_bytes)


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
    columns = TensorColumns(names, dtypes, shapes, sizes, begins, ends, spans_are_bytes=True)
    return columns, tiling_problems(names, begins, ends, data_bytes)


def tiling_problems(names, begins, ends, data_bytes):
    """check_offsets' answer for spans already known to be sound (begin <= end): none when they
    tile the data section in header order, the common case, found with two list comparisons."""
    if begins and begins[0] == 0 and ends[-1] == data_bytes and ends[:-1] == begins[1:]:
        return []
    return check_offsets(names, begins, ends, data_bytes)
