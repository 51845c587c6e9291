"""Checking a parsed safetensors header against its file, entry by entry: each tensor's dtype,
shape and data_offsets as safetensors' own validation checks them, and how the tensors tile the
data section. Every problem says which tensor and what is wrong.

This is the exact path, taken for any header the fast paths (header_fast) do not vouch for.
Standard library only, Python 3.9+.
"""

from .dtypes import DTYPE_BITS, DTYPE_NAMES, U64_MAX
from .header_json import depth, duplicate_keys
from .problems import count_text, err, json_kind, shape_text, short_json, warn

# serde_json (which safetensors uses) stops at 128 levels of nesting; a value inside a
# tensor entry sits two levels down already.
MAX_UNKNOWN_FIELD_DEPTH = 125
ROW_FIELDS = ("name", "dtype", "shape", "bytes", "begin", "end")


def _is_u64(value):
    return isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= U64_MAX


def _entry_fields(name, entry, problems):
    """(dtype, shape, offsets) of one header entry as written, or None after an error."""
    if isinstance(entry, list):
        # serde also accepts a struct written as a 3-element array.
        if len(entry) != 3:
            problems.append(err("tensor %r: entry is an array of %d items, not an object with dtype, "
                                "shape and data_offsets" % (name, len(entry))))
            return None
        return entry[0], entry[1], entry[2]
    if not isinstance(entry, dict):
        problems.append(err("tensor %r: entry is %s, not an object with dtype, shape and data_offsets"
                            % (name, json_kind(entry))))
        return None
    ok = True
    for field in duplicate_keys(entry):
        if field in ("dtype", "shape", "data_offsets"):
            problems.append(err("tensor %r gives %r twice" % (name, field)))
            ok = False
    for field in ("dtype", "shape", "data_offsets"):
        if field not in entry:
            problems.append(err("tensor %r has no %r" % (name, field)))
            ok = False
    for field, value in list(entry.items()) + list(getattr(entry, "overridden", ())):
        if field not in ("dtype", "shape", "data_offsets") and depth(value) > MAX_UNKNOWN_FIELD_DEPTH:
            problems.append(err("tensor %r: extra field %r nests deeper than safetensors' JSON parser "
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


def _entry_row(name, entry, shapes, bits_of=DTYPE_BITS, names=DTYPE_NAMES):
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
    problems.extend(check_offsets([r[0] for r in rows], [r[4] for r in rows], [r[5] for r in rows], data_bytes))
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
        problems.append(err("tensor %r: dtype is %s, not a dtype name" % (name, json_kind(dtype))))
    elif dtype not in DTYPE_BITS:
        problems.append(err("tensor %r has unknown dtype %r (safetensors knows %s)"
                            % (name, dtype, ", ".join(DTYPE_BITS))))
    else:
        tensor["dtype"] = dtype
    if not isinstance(shape, list) or not all(_is_u64(d) for d in shape):
        problems.append(err("tensor %r: shape %s is not a list of non-negative integers"
                            % (name, short_json(shape))))
    else:
        tensor["shape"] = list(shape)
    if not isinstance(offsets, list) or len(offsets) != 2 or not all(_is_u64(o) for o in offsets):
        problems.append(err("tensor %r: data_offsets %s is not a pair of non-negative integers"
                            % (name, short_json(offsets))))
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
        problems.append(err("tensor %r: shape %s is too large: its size overflows 64 bits"
                            % (name, shape_text(tensor["shape"]))))
        return tensor
    if bits % 8:
        problems.append(err("tensor %r: %s %s elements are %s bits, which does not end on a byte boundary"
                            % (name, count_text(elements), tensor["dtype"], count_text(bits))))
        return tensor
    tensor["bytes"] = bits // 8
    if tensor["begin"] is not None and tensor["end"] >= tensor["begin"]:
        stored = tensor["end"] - tensor["begin"]
        if stored != tensor["bytes"]:
            problems.append(err(
                "tensor %r: data_offsets [%d, %d] hold %s bytes, but shape %s x %s (%d bits) needs %s bytes"
                % (name, tensor["begin"], tensor["end"], count_text(stored), shape_text(tensor["shape"]),
                   tensor["dtype"], DTYPE_BITS[tensor["dtype"]], count_text(tensor["bytes"]))))
    return tensor


def _check_overridden(header, problems):
    """Problems of the header as a whole: duplicate entries and __metadata__."""
    for key, earlier in getattr(header, "overridden", ()):
        if key == "__metadata__":
            problems.append(err("header has more than one __metadata__ entry"))
            continue
        problems.append(warn("tensor %r appears more than once in the header; the last entry counts" % key))
        before = len(problems)
        _entry_types(key, earlier, problems)
        for p in problems[before:]:
            p["message"] = "earlier entry of " + p["message"]
    metadata = header.get("__metadata__")
    if metadata is not None and not (isinstance(metadata, dict)
                                     and all(isinstance(v, str) for v in metadata.values())):
        problems.append(err("__metadata__ must map strings to strings, it is %s" % short_json(metadata)))


def check_header(header, data_bytes):
    """(tensors, problems) for a parsed header whose data section is `data_bytes` long.

    Mirrors safetensors' own validation: every file it opens passes, every file it refuses gets
    at least one error here, and each error says which tensor and what is wrong.
    """
    rows, problems = check_header_rows(header, data_bytes)
    tensors = []
    for row in rows:
        tensor = dict(zip(ROW_FIELDS, row))
        if tensor["shape"] is not None:
            tensor["shape"] = list(tensor["shape"])
        tensors.append(tensor)
    return tensors, problems


def check_offsets(names, begins, ends, data_bytes):
    """How the tensors' data_offsets tile a data section of `data_bytes`: gaps, overlaps, spans
    out of order or beyond the end, and bytes left over or missing."""
    spans = sorted((begin, end, name) for name, begin, end in zip(names, begins, ends) if begin is not None)
    problems = []
    layout = []
    cursor = 0
    previous = None
    for begin, end, name in spans:
        if end < begin:
            layout.append(err("tensor %r: data_offsets [%d, %d] are out of order (end before begin)"
                              % (name, begin, end)))
            continue
        if begin > cursor:
            layout.append(err("bytes %s..%s of the data section belong to no tensor: a gap before tensor %r "
                              "(data_offsets [%d, %d])" % (count_text(cursor), count_text(begin), name, begin, end)))
        elif begin < cursor:
            layout.append(err("tensor %r: data_offsets [%d, %d] overlap tensor %r (data_offsets [%d, %d])"
                              % (name, begin, end, previous[2], previous[0], previous[1])))
        if end > data_bytes:
            layout.append(err("tensor %r: data_offsets [%d, %d] reach beyond the end of the file (its data "
                              "section holds %s bytes)" % (name, begin, end, count_text(data_bytes))))
        if end >= cursor:
            previous = (begin, end, name)
        cursor = max(cursor, end)
    unplaced = any(begin is None or end < begin for begin, end in zip(begins, ends))
    if cursor < data_bytes and not unplaced:  # else the bytes belong to the tensor we could not place
        problems.append(err("file is %s bytes longer than its header says: the tensors end at byte %s of "
                            "the data section, which holds %s"
                            % (count_text(data_bytes - cursor), count_text(cursor), count_text(data_bytes))))
    elif cursor > data_bytes:
        problems.append(err("file is shorter than its header says: the tensors need %s bytes of data, the "
                            "file holds %s (%s bytes missing; an interrupted download?)"
                            % (count_text(cursor), count_text(data_bytes), count_text(cursor - data_bytes))))
    return problems + layout
