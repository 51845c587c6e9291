"""Checkpoint inspection without loading weights: safetensors headers, EAGLE-3 layouts, verdicts.

Answers "is this file whole, is it the drafter I think it is, can I start from it?" from the
headers alone (plus the kilobyte-sized d2t/t2d vocabulary maps), so a 2.4 GB drafter inspects
in milliseconds. Standard library only, Python 3.9+: it runs on the GPU host's own Python.
"""

import hashlib
import json
import operator
import os
import re
import struct
import time

# safetensors refuses headers above this size; so do we, before allocating anything.
MAX_HEADER_BYTES = 100000000
# Index and config files are small; a larger one is refused rather than read.
MAX_JSON_FILE_BYTES = 64 * 1024 * 1024
# d2t / t2d are read for the vocabulary check only when they are at most this large.
MAX_VOCAB_MAP_BYTES = 64 * 1024 * 1024
# Chosen with benchmarks/bench_sha256.py on a GPU host (median of 5 warm runs, same OpenSSL as
# sha256sum): 1, 2 and 4 MiB within 0.5% of each other at ~99% of sha256sum, 8 MiB 96%.
HASH_BLOCK_BYTES = 1024 * 1024
PROGRESS_INTERVAL_S = 0.25
U64_MAX = 2 ** 64 - 1
# serde_json (which safetensors uses) stops at 128 levels of nesting; a value inside a
# tensor entry sits two levels down already.
MAX_UNKNOWN_FIELD_DEPTH = 125
# At most this many problems of one file are listed one by one.
MAX_PROBLEMS_PER_FILE = 40

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

FORMATS = ("specforge", "speculators", "eagle", "vllm", "hf", "unknown")
FORMAT_DESCRIPTIONS = {
    "specforge": "SpecForge / SGLang EAGLE-3 drafter (LlamaForCausalLMEagle3, midlayer.*)",
    "speculators": "speculators EAGLE-3 drafter (speculators_config, layers.0.*)",
    "eagle": "original EAGLE drafter (SafeAILab layout)",
    "vllm": "vLLM-native EAGLE-3 names (model.*, draft_id_to_target_id)",
    "hf": "plain Hugging Face model (not a drafter)",
    "unknown": "layout not recognised",
}
# Config fields that differ between any two checkpoints and say nothing about compatibility.
_CONFIG_NOISE = {"_name_or_path", "transformers_version", "speculators_version", "auto_map",
                 "_commit_hash"}


class CheckpointError(Exception):
    """Base of the errors this module raises; the message is one human line."""


class CheckpointIOError(CheckpointError):
    """The path itself cannot be read: it does not exist, or permission is denied."""


class HeaderError(CheckpointError):
    """A file whose safetensors header cannot be read at all."""


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
    return parse_header_json(raw), 8 + header_bytes, file_size


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


def check_header(header, data_bytes):
    """(tensors, problems) for a parsed header whose data section is `data_bytes` long.

    Mirrors safetensors' own validation: every file it opens passes, every file it refuses gets
    at least one error here, and each error says which tensor and what is wrong.
    """
    problems = []
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
    tensors = [_check_entry(name, entry, problems)
               for name, entry in header.items() if name != "__metadata__"]
    problems.extend(_check_offsets(tensors, data_bytes))
    return tensors, problems


def _check_offsets(tensors, data_bytes):
    spans = sorted((t["begin"], t["end"], t["name"]) for t in tensors if t["begin"] is not None)
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
    unplaced = any(t["begin"] is None or t["end"] < t["begin"] for t in tensors)
    if cursor < data_bytes and not unplaced:  # else the bytes belong to the tensor we could not place
        problems.append(_err("file is %s bytes longer than its header says: the tensors end at byte %s of "
                             "the data section, which holds %s"
                             % (_n(data_bytes - cursor), _n(cursor), _n(data_bytes))))
    elif cursor > data_bytes:
        problems.append(_err("file is shorter than its header says: the tensors need %s bytes of data, the "
                             "file holds %s (%s bytes missing; an interrupted download?)"
                             % (_n(cursor), _n(data_bytes), _n(cursor - data_bytes))))
    return problems + layout


# ---------------------------------------------------------------------------------------------
# Finding the files of a checkpoint


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


def _load_json_file(path, what, problems):
    try:
        size = os.path.getsize(path)
        if size > MAX_JSON_FILE_BYTES:
            problems.append(_err("%s is %s bytes, too large for a %s" % (os.path.basename(path), _n(size), what)))
            return None
        with open(path, "rb") as f:
            raw = _read_exact(f, size)  # read(n) would allocate n up front, so never read(limit)
        value = json.loads(raw.decode("utf-8"))
    except OSError as exc:
        problems.append(_err("cannot read %s: %s" % (os.path.basename(path), exc.strerror or exc)))
        return None
    except (ValueError, RecursionError) as exc:  # UnicodeDecodeError is a ValueError
        problems.append(_err("%s is not valid JSON: %s" % (os.path.basename(path), exc)))
        return None
    if not isinstance(value, dict):
        problems.append(_err("%s is JSON but not an object" % os.path.basename(path)))
        return None
    return value


class _Layout(object):
    """Where a checkpoint's pieces are: weight files, shard index, config.json."""

    def __init__(self, root):
        self.root = root
        self.weight_files = []
        self.index_path = None
        self.index = None
        self.config_path = None


def _resolve(path, problems):
    if os.path.isdir(path):
        root = path
        try:
            entries = sorted(os.listdir(path))
        except OSError as exc:
            raise CheckpointIOError(_os_message(path, exc))
        layout = _Layout(root)
        indexes = [e for e in entries if e.endswith(".safetensors.index.json")]
        if indexes:
            chosen = "model.safetensors.index.json" if "model.safetensors.index.json" in indexes else indexes[0]
            if len(indexes) > 1:
                problems.append(_warn("%d shard indexes in %s; using %s" % (len(indexes), path, chosen)))
            layout.index_path = os.path.join(root, chosen)
        else:
            layout.weight_files = [os.path.join(root, e) for e in entries
                                   if e.endswith(".safetensors") and os.path.isfile(os.path.join(root, e))]
            if not layout.weight_files:
                others = [e for e in entries if e.endswith((".bin", ".pt", ".pth", ".gguf"))]
                hint = " (found %s: not safetensors, not inspected)" % ", ".join(others[:3]) if others else ""
                problems.append(_err("no .safetensors file in %s%s" % (_q(path), hint)))
            elif len(layout.weight_files) > 1:
                problems.append(_warn("%d .safetensors files and no shard index: all of them are listed "
                                      "together" % len(layout.weight_files)))
    else:
        root = os.path.dirname(path) or "."
        layout = _Layout(root)
        base = os.path.basename(path)
        if base.endswith(".json"):
            if base == "config.json":
                return _resolve(root, problems)
            layout.index_path = path
        else:
            try:
                with open(path, "rb"):
                    pass
            except OSError as exc:
                raise CheckpointIOError(_os_message(path, exc))
            layout.weight_files = [path]
    config_path = os.path.join(layout.root, "config.json")
    if os.path.isfile(config_path):
        layout.config_path = config_path
    if layout.index_path is not None:
        if not os.path.isdir(path):
            try:
                with open(layout.index_path, "rb"):
                    pass
            except OSError as exc:
                raise CheckpointIOError(_os_message(layout.index_path, exc))
        _resolve_index(layout, problems)
    return layout


def _resolve_index(layout, problems):
    name = os.path.basename(layout.index_path)
    index = _load_json_file(layout.index_path, "shard index", problems)
    if index is None:
        return
    weight_map = index.get("weight_map")
    if not isinstance(weight_map, dict) or not all(isinstance(v, str) for v in weight_map.values()):
        problems.append(_err("%s has no weight_map of tensor names to shard files" % name))
        return
    layout.index = index
    shards = []
    for shard in weight_map.values():
        if shard not in shards:
            shards.append(shard)
    root_real = os.path.realpath(layout.root)
    for shard in shards:
        if not shard or "\0" in shard:
            problems.append(_err("%s names shard %s, which is not a file name" % (name, _q(shard))))
            continue
        shard_path = os.path.normpath(os.path.join(layout.root, shard))
        if os.path.isabs(shard) or not os.path.realpath(shard_path).startswith(root_real + os.sep):
            problems.append(_err("%s names shard %s outside the checkpoint directory" % (name, _q(shard))))
            continue
        layout.weight_files.append(shard_path)
    listed = set(os.path.basename(p) for p in layout.weight_files)
    try:
        on_disk = [e for e in os.listdir(layout.root) if e.endswith(".safetensors")]
    except OSError:
        on_disk = []
    for extra in sorted(set(on_disk) - listed):
        problems.append(_warn("%s is in the directory but the shard index does not name it" % _q(extra)))


# ---------------------------------------------------------------------------------------------
# Layouts: which tool wrote this, and the name each tensor has in the speculators layout


def effective_config(config):
    """config.json flattened: a speculators transformer_layer_config merged under the top level."""
    if not isinstance(config, dict):
        return {}
    layer = config.get("transformer_layer_config")
    merged = dict(layer) if isinstance(layer, dict) else {}
    for key, value in config.items():
        if key != "transformer_layer_config":
            merged[key] = value
    return merged


def _architectures(config):
    archs = config.get("architectures") if isinstance(config, dict) else None
    return [a for a in archs if isinstance(a, str)] if isinstance(archs, list) else []


def _is_eagle12(shapes):
    fc = shapes.get("fc.weight")
    return (fc is not None and len(fc) == 2 and fc[1] == 2 * fc[0] and "d2t" not in shapes
            and not any(n.startswith("midlayer.") for n in shapes))


def detect_format(shapes, config):
    """One of FORMATS, from tensor names (with shapes) and config.json (dict or None)."""
    names = set(shapes)
    config = config if isinstance(config, dict) else {}
    archs = _architectures(config)
    if any(k in config for k in ("speculators_config", "speculators_model_type", "transformer_layer_config")):
        return "speculators"
    if any(n.startswith("midlayer.") for n in names):
        # The original EAGLE-3 repository writes the same names but a plain LlamaForCausalLM config.
        if archs and not any("eagle" in a.lower() for a in archs):
            return "eagle"
        return "specforge"
    eagle_marks = ("model.fc.weight" in names or "draft_id_to_target_id" in names
                   or any(n.startswith("model.layers.") and ".hidden_norm." in n for n in names))
    if eagle_marks:
        return "vllm"
    if any(n.startswith("layers.") for n in names) and "fc.weight" in names:
        return "eagle" if _is_eagle12(shapes) else "speculators"
    if any(n.startswith(("model.layers.", "model.embed_tokens.", "transformer.", "model.decoder."))
           for n in names) or (archs and names):
        return "hf"
    return "unknown"


def canonical_names(names, fmt):
    """{name: the name it has in the speculators layout}, so layouts can be matched by role."""
    mapping = {}
    if fmt == "vllm":
        layer_ids = []
        for name in names:
            m = re.match(r"(?:model\.)?layers\.(\d+)\.", name)
            if m:
                layer_ids.append(int(m.group(1)))
        # vLLM numbers draft layers after the target's (start_layer_id = target layer count).
        first = min(layer_ids) if layer_ids else 0
        for name in names:
            canon = name[len("model."):] if name.startswith("model.") else name
            if canon == "draft_id_to_target_id":
                canon = "d2t"
            m = re.match(r"layers\.(\d+)\.(.*)", canon)
            if m:
                canon = "layers.%d.%s" % (int(m.group(1)) - first, m.group(2))
            mapping[name] = canon
        return mapping
    for name in names:
        if fmt in ("specforge", "eagle") and name.startswith("midlayer."):
            mapping[name] = "layers.0." + name[len("midlayer."):]
        else:
            mapping[name] = name
    return mapping


def _is_eagle3_layout(fmt, shapes):
    if fmt in ("specforge", "speculators", "vllm"):
        return True
    return fmt == "eagle" and not _is_eagle12(shapes)


# ---------------------------------------------------------------------------------------------
# EAGLE-3: dimensions, roles, shape relations


def _int_field(config, key):
    value = config.get(key)
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def aux_layer_ids_from_config(config):
    """The aux hidden-state layer ids a drafter's config names, or None when it names none."""
    eff = effective_config(config)
    ids = eff.get("eagle_aux_hidden_state_layer_ids")
    eagle_config = eff.get("eagle_config")
    if ids is None and isinstance(eagle_config, dict):
        ids = eagle_config.get("eagle_aux_hidden_state_layer_ids")
    if isinstance(ids, list) and all(isinstance(i, int) and not isinstance(i, bool) for i in ids):
        return list(ids)
    return None


def default_aux_layer_ids(target_layers):
    """What vLLM uses when a drafter names none: (2, L // 2, L - 3) of the target's L layers."""
    return [2, target_layers // 2, target_layers - 3]


def _dims_from_tensors(canon):
    """Sizes read off the tensors themselves (the truth on disk), keyed like the eagle3 report."""
    def dim(name, axis):
        shape = canon.get(name)
        return shape[axis] if shape is not None and len(shape) > axis else None

    dims = {}
    dims["hidden_size"] = dim("fc.weight", 0) or dim("norm.weight", 0) or dim("layers.0.hidden_norm.weight", 0)
    fc_in = dim("fc.weight", 1)
    dims["fc_inputs"] = fc_in
    dims["target_hidden_size"] = fc_in // 3 if fc_in is not None and fc_in % 3 == 0 else None
    dims["draft_vocab_size"] = dim("lm_head.weight", 0) or dim("d2t", 0)
    dims["target_vocab_size"] = dim("t2d", 0) or dim("embed_tokens.weight", 0)
    dims["intermediate_size"] = dim("layers.0.mlp.gate_proj.weight", 0) or dim("layers.0.mlp.down_proj.weight", 1)
    dims["q_rows"] = dim("layers.0.self_attn.q_proj.weight", 0)
    dims["k_rows"] = dim("layers.0.self_attn.k_proj.weight", 0)
    return dims


def _derive_eagle3(canon, config, problems):
    """The eagle3 report section, checking config.json against the tensors."""
    eff = effective_config(config)
    found = _dims_from_tensors(canon)
    sources = {"hidden_size": "fc.weight / norm.weight", "draft_vocab_size": "lm_head.weight rows / d2t",
               "target_vocab_size": "t2d length / embed_tokens.weight rows",
               "intermediate_size": "the MLP projections", "target_hidden_size": "fc.weight inputs / 3"}
    result = {}
    for key in ("hidden_size", "target_hidden_size", "draft_vocab_size", "target_vocab_size", "intermediate_size"):
        config_key = "vocab_size" if key == "target_vocab_size" else key
        from_config = _int_field(eff, config_key)
        if found[key] is not None:
            result[key] = found[key]
            if from_config is not None and from_config != found[key]:
                problems.append(_err("config.json says %s %s but the tensors (%s) say %s"
                                     % (config_key, _d(from_config), sources[key], _d(found[key]))))
        else:
            result[key] = from_config
    if result["target_hidden_size"] is None and found["fc_inputs"] is None:
        result["target_hidden_size"] = result["hidden_size"]  # absent means equal to hidden_size
    heads = _int_field(eff, "num_attention_heads")
    kv_heads = _int_field(eff, "num_key_value_heads") or heads
    head_dim = _int_field(eff, "head_dim")
    if head_dim is None and heads and result["hidden_size"]:
        head_dim = result["hidden_size"] // heads  # the HF Llama default
    standard = _attention_kind(canon) == "standard"
    if standard and heads and head_dim and found["q_rows"] is not None and heads * head_dim != found["q_rows"]:
        problems.append(_err("config.json says %d heads x %d = %s, but layer 0's q_proj has %s rows"
                             % (heads, head_dim, _d(heads * head_dim), _d(found["q_rows"]))))
    if standard and kv_heads and head_dim and found["k_rows"] is not None and kv_heads * head_dim != found["k_rows"]:
        problems.append(_err("config.json says %d kv heads x %d = %s, but layer 0's k_proj has %s rows"
                             % (kv_heads, head_dim, _d(kv_heads * head_dim), _d(found["k_rows"]))))
    result["num_attention_heads"] = heads
    result["num_key_value_heads"] = kv_heads
    result["head_dim"] = head_dim
    result["aux_layer_ids"] = aux_layer_ids_from_config(config)
    if config and "draft_vocab_size" not in eff and result["draft_vocab_size"] and result["target_vocab_size"] \
            and result["draft_vocab_size"] != result["target_vocab_size"]:
        problems.append(_warn("config.json has no draft_vocab_size: vLLM would assume the target's %s and fail to "
                              "load lm_head.weight with %s rows"
                              % (_d(result["target_vocab_size"]), _d(result["draft_vocab_size"]))))
    return result


def _attention_kind(canon):
    """"standard" (q/k/v), "mla" (DeepSeek latent attention), "fused" (vLLM qkv_proj) or None."""
    if "layers.0.self_attn.kv_a_proj_with_mqa.weight" in canon:
        return "mla"
    if "layers.0.self_attn.qkv_proj.weight" in canon:
        return "fused"
    return "standard"


def _expect(problems, name, shape, expected, why):
    if shape is None:
        return
    if list(shape) != list(expected):
        problems.append(_err("%s has shape %s, expected %s: %s" % (name, _shape_text(shape), _shape_text(expected), why)))


def _layout_name(canonical, fmt):
    """A speculators-layout name as the checkpoint's own layout would spell it."""
    if fmt in ("specforge", "eagle") and canonical.startswith("layers.0."):
        return "midlayer." + canonical[len("layers.0."):]
    return canonical


def _check_eagle3_shapes(canon, display, dims, problems, fmt=None):
    """Shape relations between the tensors of an EAGLE-3 drafter (canon: canonical name -> shape)."""
    h = dims["hidden_size"]
    th = dims["target_hidden_size"]
    inter = dims["intermediate_size"]
    dv = dims["draft_vocab_size"]
    tv = dims["target_vocab_size"]

    def shape(name):
        return canon.get(name)

    def show(name):
        return display.get(name, name)

    required = ["fc.weight", "norm.weight", "lm_head.weight", "layers.0.hidden_norm.weight",
                "layers.0.input_layernorm.weight", "layers.0.post_attention_layernorm.weight",
                "layers.0.self_attn.o_proj.weight"]
    attention = _attention_kind(canon)
    if attention == "mla":  # DeepSeek-style drafters (SpecForge deepseek_eagle3)
        required += ["layers.0.self_attn.kv_a_proj_with_mqa.weight", "layers.0.self_attn.kv_b_proj.weight"]
        if "layers.0.self_attn.q_proj.weight" not in canon:
            required += ["layers.0.self_attn.q_a_proj.weight", "layers.0.self_attn.q_b_proj.weight"]
    elif attention == "standard":
        required += ["layers.0.self_attn.q_proj.weight", "layers.0.self_attn.k_proj.weight",
                     "layers.0.self_attn.v_proj.weight"]
    if not any(n.startswith("layers.0.mlp.experts.") for n in canon):  # MoE drafters have no single MLP
        required.append("layers.0.mlp.down_proj.weight")
        if "layers.0.mlp.gate_up_proj.weight" not in canon:
            required += ["layers.0.mlp.gate_proj.weight", "layers.0.mlp.up_proj.weight"]
    for name in required:
        if name not in canon:
            problems.append(_err("an EAGLE-3 drafter needs %s, this checkpoint has none" % display.get(name, _layout_name(name, fmt))))
    fc = shape("fc.weight")
    if fc is not None and (len(fc) != 2 or fc[1] % 3):
        problems.append(_err("%s has shape %s: EAGLE-3's fc fuses three auxiliary hidden states of the target, "
                             "so its inputs must be 3 x the target hidden size" % (show("fc.weight"), _shape_text(fc))))
    if h is None:
        return
    for norm in ("norm.weight", "layers.0.hidden_norm.weight", "layers.0.input_layernorm.weight",
                 "layers.0.post_attention_layernorm.weight"):
        _expect(problems, show(norm), shape(norm), [h], "an RMSNorm over the hidden size %s" % _d(h))
    for proj in ("q_proj", "k_proj", "v_proj", "qkv_proj", "q_a_proj", "kv_a_proj_with_mqa"):
        name = "layers.0.self_attn.%s.weight" % proj
        s = shape(name)
        if s is not None and (len(s) != 2 or s[1] != 2 * h):
            problems.append(_err("%s has shape %s: an EAGLE-3 first layer's %s takes embedding + hidden = "
                                 "2 x %s = %s inputs" % (show(name), _shape_text(s), proj, _d(h), _d(2 * h))))
    q = shape("layers.0.self_attn.q_proj.weight")
    o = shape("layers.0.self_attn.o_proj.weight")
    if o is not None and q is not None and len(q) == 2 and attention == "standard":
        _expect(problems, show("layers.0.self_attn.o_proj.weight"), o, [h, q[0]],
                "o_proj maps the %s attention outputs back to the hidden size %s" % (_d(q[0]), _d(h)))
    k = shape("layers.0.self_attn.k_proj.weight")
    v = shape("layers.0.self_attn.v_proj.weight")
    if k is not None and v is not None and list(k) != list(v):
        problems.append(_err("%s %s and %s %s differ: keys and values have the same heads"
                             % (show("layers.0.self_attn.k_proj.weight"), _shape_text(k),
                                show("layers.0.self_attn.v_proj.weight"), _shape_text(v))))
    if inter is not None:
        _expect(problems, show("layers.0.mlp.gate_proj.weight"), shape("layers.0.mlp.gate_proj.weight"), [inter, h],
                "the MLP gate maps hidden %s to intermediate %s" % (_d(h), _d(inter)))
        _expect(problems, show("layers.0.mlp.up_proj.weight"), shape("layers.0.mlp.up_proj.weight"), [inter, h],
                "the MLP up projection maps hidden %s to intermediate %s" % (_d(h), _d(inter)))
        _expect(problems, show("layers.0.mlp.down_proj.weight"), shape("layers.0.mlp.down_proj.weight"), [h, inter],
                "the MLP down projection maps intermediate %s back to hidden %s" % (_d(inter), _d(h)))
    if fc is not None and th is not None and len(fc) == 2:
        _expect(problems, show("fc.weight"), fc, [h, 3 * th],
                "fc fuses 3 target hidden states of %s into the hidden size %s" % (_d(th), _d(h)))
    lm_head = shape("lm_head.weight")
    if lm_head is not None and dv is not None:
        _expect(problems, show("lm_head.weight"), lm_head, [dv, h],
                "the draft LM head maps hidden %s to the %s-token draft vocabulary" % (_d(h), _d(dv)))
    d2t = shape("d2t")
    if d2t is not None and lm_head is not None and len(lm_head) == 2:
        _expect(problems, show("d2t"), d2t, [lm_head[0]],
                "d2t has one offset per draft token, and lm_head.weight has %s rows" % _d(lm_head[0]))
    t2d = shape("t2d")
    if t2d is not None and len(t2d) != 1:
        problems.append(_err("%s has shape %s: t2d is one flag per target token" % (show("t2d"), _shape_text(t2d))))
    embed = shape("embed_tokens.weight")
    if embed is not None and tv is not None:
        _expect(problems, show("embed_tokens.weight"), embed, [tv, h],
                "embed_tokens embeds the %s target token ids at the hidden size %s" % (_d(tv), _d(h)))
    norm_fc = shape("input_norm.weight")
    if norm_fc is not None and th is not None:
        _expect(problems, show("input_norm.weight"), norm_fc, [3 * th], "it normalises fc's 3 x %s inputs" % _d(th))
    if dv is not None and tv is not None and dv < tv and d2t is None:
        problems.append(_err("no d2t: the %s draft-vocabulary logits cannot be mapped to the %s target ids"
                             % (_d(dv), _d(tv))))
    if dv is not None and tv is not None and dv > tv:
        problems.append(_err("the draft vocabulary (%s) is larger than the target vocabulary (%s)" % (_d(dv), _d(tv))))


def role(canonical, fmt, dims):
    """What a tensor does, in words that are right, from its speculators-layout name."""
    dims = dims or {}
    h = dims.get("hidden_size")
    th = dims.get("target_hidden_size") or h
    dv = dims.get("draft_vocab_size")
    tv = dims.get("target_vocab_size")
    inter = dims.get("intermediate_size")
    heads = dims.get("num_attention_heads")
    kv = dims.get("num_key_value_heads")
    hd = dims.get("head_dim")

    def num(value, fallback):
        return str(value) if value else fallback

    if fmt == "hf":
        return _hf_role(canonical)
    eagle12 = dims.get("eagle12")
    m = re.match(r"layers\.(\d+)\.(.*)", canonical)
    layer, rest = (int(m.group(1)), m.group(2)) if m else (None, canonical)
    first = layer == 0
    two_h = "2 x %s" % num(h, "hidden")
    if rest == "fc.weight":
        if eagle12:
            return "fuses the token embedding with the target's last hidden state (%s -> %s)" % (two_h, num(h, "hidden"))
        return ("fuses 3 auxiliary hidden states of the target (3 x %s -> %s); not QKV"
                % (num(th, "target hidden"), num(h, "hidden")))
    if rest == "fc.bias":
        return "bias of fc"
    if rest == "d2t":
        return "draft id -> target id offsets: target = draft + d2t[draft] (%s draft ids)" % num(dv, "all")
    if rest == "t2d":
        return "marks the %s target ids (of %s) the draft vocabulary keeps" % (num(dv, "draft-vocabulary"), num(tv, "all"))
    if rest == "lm_head.weight":
        return "draft LM head: hidden %s -> %s draft-vocabulary logits" % (num(h, ""), num(dv, "the")) if not eagle12 \
            else "LM head (hidden -> vocabulary logits)"
    if rest == "norm.weight":
        return "final RMSNorm before lm_head"
    if rest == "embed_tokens.weight":
        return "token embeddings (%s target ids x %s); often shared from the target" % (num(tv, "all"), num(h, "hidden"))
    if rest == "input_norm.weight":
        return "RMSNorm over the 3 concatenated aux hidden states before fc (norm_before_fc)"
    if rest == "mask_hidden":
        return "hidden state used for masked positions in parallel drafting"
    heads_text = "%s heads x %s" % (num(heads, "?"), num(hd, "?")) if heads else "the heads"
    kv_text = "%s kv heads x %s" % (num(kv, "?"), num(hd, "?")) if kv else "the kv heads"
    inputs = "embedding+hidden (%s)" % two_h if first and not eagle12 else num(h, "hidden")
    table = {
        "hidden_norm.weight": "RMSNorm on the incoming hidden state (fused target features or the previous step)",
        "input_layernorm.weight": ("RMSNorm on the token embedding before it joins the hidden state" if first and not eagle12
                                   else "RMSNorm before attention"),
        "post_attention_layernorm.weight": "RMSNorm before the MLP",
        "self_attn.q_proj.weight": "attention query: %s -> %s" % (inputs, heads_text),
        "self_attn.k_proj.weight": "attention key: %s -> %s" % (inputs, kv_text),
        "self_attn.v_proj.weight": "attention value: %s -> %s" % (inputs, kv_text),
        "self_attn.qkv_proj.weight": "fused query/key/value (vLLM): %s -> q, k and v heads" % inputs,
        "self_attn.o_proj.weight": "attention output: %s -> hidden %s" % (heads_text, num(h, "")),
        "mlp.gate_proj.weight": "MLP gate: hidden %s -> %s" % (num(h, ""), num(inter, "intermediate")),
        "mlp.up_proj.weight": "MLP up: hidden %s -> %s" % (num(h, ""), num(inter, "intermediate")),
        "mlp.gate_up_proj.weight": ("fused MLP gate and up (vLLM): hidden %s -> 2 x %s"
                                    % (num(h, ""), num(inter, "intermediate"))),
        "mlp.down_proj.weight": "MLP down: %s -> hidden %s" % (num(inter, "intermediate"), num(h, "")),
        "self_attn.q_norm.weight": "RMSNorm on each query head (Qwen3-style)",
        "self_attn.k_norm.weight": "RMSNorm on each key head (Qwen3-style)",
        "self_attn.q_a_proj.weight": "MLA query down-projection: %s -> query latent" % inputs,
        "self_attn.q_a_layernorm.weight": "RMSNorm on the MLA query latent",
        "self_attn.q_b_proj.weight": "MLA query up-projection: latent -> %s" % heads_text,
        "self_attn.kv_a_proj_with_mqa.weight": "MLA key/value latent + shared rope key: %s -> latent" % inputs,
        "self_attn.kv_a_layernorm.weight": "RMSNorm on the MLA key/value latent",
        "self_attn.kv_b_proj.weight": "MLA key/value up-projection: latent -> per-head keys and values",
        "mlp.gate.weight": "MoE router: hidden -> expert scores",
    }
    text = table.get(rest)
    if text is None and rest.endswith(".bias"):
        text = "bias of %s" % rest[:-len(".bias")]
    if text is None:
        expert = re.match(r"mlp\.(?:shared_)?experts?\.(?:(\d+)\.)?(gate_proj|up_proj|down_proj)\.weight$", rest)
        if expert:
            which = "shared expert" if "shared" in rest else "expert %s" % expert.group(1)
            text = "MoE %s: MLP %s" % (which, expert.group(2).replace("_proj", ""))
    if text is None:
        return ""
    return text if layer in (0, None) else "layer %d: %s" % (layer, text)


_HF_ROLES = (
    ("embed_tokens.weight", "token embeddings"),
    ("lm_head.weight", "LM head (hidden -> vocabulary logits)"),
    ("self_attn.q_proj.weight", "attention query projection"),
    ("self_attn.k_proj.weight", "attention key projection"),
    ("self_attn.v_proj.weight", "attention value projection"),
    ("self_attn.o_proj.weight", "attention output projection"),
    ("input_layernorm.weight", "RMSNorm before attention"),
    ("post_attention_layernorm.weight", "RMSNorm before the MLP"),
    ("gate_proj.weight", "MLP gate projection"),
    ("up_proj.weight", "MLP up projection"),
    ("down_proj.weight", "MLP down projection"),
)


def _hf_role(name):
    for suffix, text in _HF_ROLES:
        if name.endswith(suffix):
            m = re.search(r"layers\.(\d+)\.", name)
            expert = re.search(r"experts\.(\d+)\.", name)
            prefix = "layer %s: " % m.group(1) if m else ""
            if expert:
                prefix += "expert %s " % expert.group(1)
            return prefix + text
    if name in ("model.norm.weight", "norm.weight"):
        return "final RMSNorm"
    return ""


# ---------------------------------------------------------------------------------------------
# d2t / t2d: the vocabulary maps, read for real (kilobytes)


def _read_ints(tensor):
    """(raw bytes, values) of a small 1-D integer/bool tensor, or None when it cannot be read.

    One-byte kinds come back as the bytes themselves (indexing them gives ints).
    """
    code = _INT_FORMATS.get(tensor["dtype"])
    if code is None or tensor["bytes"] is None or tensor["bytes"] > MAX_VOCAB_MAP_BYTES:
        return None
    try:
        with open(tensor["file"], "rb") as f:
            f.seek(tensor["data_start"] + tensor["begin"])
            raw = _read_exact(f, tensor["bytes"])
    except OSError:
        return None
    if len(raw) != tensor["bytes"]:
        return None
    if code == "B":
        return raw, raw
    return raw, struct.unpack("<%d%s" % (len(raw) // struct.calcsize(code), code), raw)


def _check_vocab_maps(d2t, t2d, dims, display, problems):
    """Checks target = draft + d2t[draft] lands on exactly the ids t2d marks; returns a digest.

    The common case (all is well) runs on C-level builtins only: a 163,840-entry t2d and a
    32,000-entry d2t check in a few milliseconds. Details are worked out only for a failure.
    """
    d2t_read = _read_ints(d2t) if d2t else None
    if d2t and d2t["dtype"] not in _INT_FORMATS:
        problems.append(_warn("%s has dtype %s; expected integer offsets (I64)" % (display["d2t"], d2t["dtype"])))
    if d2t_read is None:
        return None
    d2t_raw, offsets = d2t_read
    tv = dims.get("target_vocab_size")
    targets = list(map(operator.add, range(len(offsets)), offsets))
    name = display["d2t"]
    inside = targets
    if tv is not None and targets and (min(targets) < 0 or max(targets) >= tv):
        outside = [(d, t) for d, t in enumerate(targets) if not 0 <= t < tv]
        inside = [t for t in targets if 0 <= t < tv]
        d, t = outside[0]
        problems.append(_err("%s maps %s draft ids outside the target vocabulary of %s (draft id %d -> target id %d)"
                             % (name, _d(len(outside)), _d(tv), d, t)))
    distinct = set(targets)
    if len(distinct) != len(targets):
        seen = {}
        for draft, target in enumerate(targets):
            if target in seen:
                problems.append(_err("%s maps draft ids %d and %d to the same target id %d"
                                     % (name, seen[target], draft, target)))
                break
            seen[target] = draft
    t2d_raw = b""
    t2d_read = _read_ints(t2d) if t2d else None
    if t2d is None:
        problems.append(_warn("d2t without t2d: the vocabulary maps could not be checked against each other"))
    elif t2d_read is None:
        problems.append(_warn("%s (dtype %s) could not be read; the vocabulary maps were not checked"
                              % (display["t2d"], t2d["dtype"])))
    else:
        t2d_raw, flags = t2d_read
        t2d_name = display["t2d"]
        kept = len(flags) - flags.count(0)
        if kept != len(targets):
            problems.append(_err("%s has %s true entries, but the draft vocabulary has %s (the length of %s)"
                                 % (t2d_name, _d(kept), _d(len(targets)), name)))
        in_flags = [t for t in inside if 0 <= t < len(flags)] if inside is not targets or tv != len(flags) else inside
        looked_up = operator.itemgetter(*in_flags)(flags) if len(in_flags) > 1 else tuple(flags[t] for t in in_flags)
        if 0 in looked_up:
            unmarked = [(d, t) for d, t in enumerate(targets) if 0 <= t < len(flags) and not flags[t]]
            d, t = unmarked[0]
            problems.append(_err("%s is false at %s target ids that %s maps to (draft id %d -> target id %d)"
                                 % (t2d_name, _d(len(unmarked)), name, d, t)))
        elif kept > len(distinct):
            stray = next(i for i, flag in enumerate(flags) if flag and i not in distinct)
            problems.append(_err("%s is true at target id %d, which no draft id maps to" % (t2d_name, stray)))
    return hashlib.sha256(d2t_raw + b"|" + t2d_raw).hexdigest()


# ---------------------------------------------------------------------------------------------
# inspect


def _cap(problems, label):
    if len(problems) <= MAX_PROBLEMS_PER_FILE:
        return problems
    errors = sum(1 for p in problems[MAX_PROBLEMS_PER_FILE:] if p["level"] == "error")
    return problems[:MAX_PROBLEMS_PER_FILE] + [_err("%s: %s more problems not listed (%s errors)"
                                                    % (label, _n(len(problems) - MAX_PROBLEMS_PER_FILE), _n(errors)))]


def _read_file_tensors(path, label, problems):
    """Tensors of one file (with where their data is), adding its problems under its name."""
    try:
        header, data_start, size = read_header(path)
    except HeaderError as exc:
        problems.append(_err("%s: %s" % (label, exc)))
        return [], None
    found, file_problems = check_header(header, size - data_start)
    for p in file_problems:
        p["message"] = "%s: %s" % (label, p["message"])
    problems.extend(_cap(file_problems, label))
    for tensor in found:
        tensor["file"] = path
        tensor["data_start"] = data_start
        tensor["data_bytes"] = size - data_start
    return found, size


def inspect(path, sha256=False, progress=None):
    """The inspect report of a .safetensors file, a shard index, or a model directory.

    Raises CheckpointIOError when the path itself cannot be read; everything wrong inside the
    checkpoint goes into "problems". With sha256, each weight file is hashed and
    progress(done_bytes, total_bytes, file_path) is called a few times a second, with the
    byte counts over all files.
    """
    path = os.fspath(path)
    if not os.path.exists(path):
        raise CheckpointIOError("%s does not exist" % path)
    problems = []
    layout = _resolve(path, problems)
    config = _load_json_file(layout.config_path, "config.json", problems) if layout.config_path else None
    multi = len(layout.weight_files) > 1 or layout.index is not None
    files = []
    by_file = {}
    for weight_file in layout.weight_files:
        label = _q(os.path.relpath(weight_file, layout.root) if multi else os.path.basename(weight_file))
        if not os.path.exists(weight_file):
            continue
        try:
            found, size = _read_file_tensors(weight_file, label, problems)
        except CheckpointIOError as exc:
            if not multi:
                raise
            problems.append(_err("cannot read %s: %s" % (label, exc)))
            continue
        if size is None:  # the header was unreadable; the file still counts (and is hashed)
            size = os.path.getsize(weight_file)
        files.append({"path": os.path.abspath(weight_file), "bytes": size})
        by_file[weight_file] = found
    tensors = _select_tensors(layout, by_file, problems)
    shapes = dict((t["name"], t["shape"]) for t in tensors if t["shape"] is not None)
    fmt = detect_format(shapes, config)
    canon_of = canonical_names(list(shapes), fmt)
    by_canon = dict((canon_of[t["name"]], t) for t in tensors if t["name"] in canon_of)
    eagle3, dims = _eagle3_section(fmt, by_canon, config, problems)
    report_tensors = []
    for t in sorted(tensors, key=lambda t: t["name"]):
        entry = {"name": t["name"], "dtype": t["dtype"], "shape": t["shape"],
                 "bytes": t["end"] - t["begin"] if t["begin"] is not None and t["end"] >= t["begin"] else t["bytes"],
                 "role": role(canon_of.get(t["name"], t["name"]), fmt, dims)}
        if multi:
            entry["file"] = os.path.relpath(t["file"], layout.root)
        report_tensors.append(entry)
    if sha256:
        _hash_files(files, progress)
    return {
        "path": path,
        "format": fmt,
        "total_bytes": sum(f["bytes"] for f in files),
        "files": files,
        "tensors": report_tensors,
        "eagle3": eagle3,
        "problems": problems,
        "config": config,
    }


def _eagle3_section(fmt, by_canon, config, problems):
    """(the report's eagle3 dict or None, the sizes roles are worded with), checking as it goes."""
    shapes = dict((c, t["shape"]) for c, t in by_canon.items())
    display = dict((c, t["name"]) for c, t in by_canon.items())
    dims = {"eagle12": fmt == "eagle" and _is_eagle12(shapes)}
    if dims["eagle12"]:
        dims["hidden_size"] = shapes["fc.weight"][0]
        problems.append(_warn("this is an EAGLE-1/2 drafter (fc fuses 2 x hidden: token embedding + the target's "
                              "last hidden state), not EAGLE-3"))
        return None, dims
    if not _is_eagle3_layout(fmt, shapes):
        return None, dims
    eagle3 = _derive_eagle3(shapes, config, problems)
    dims.update(eagle3)
    _check_eagle3_shapes(shapes, display, dims, problems, fmt)
    d2t, t2d = by_canon.get("d2t"), by_canon.get("t2d")
    if d2t is not None and _readable(d2t) and (t2d is None or _readable(t2d)):
        eagle3["vocab_map_sha256"] = _check_vocab_maps(d2t, t2d, dims, display, problems)
    eagle3["embed_tokens"] = "present" if "embed_tokens.weight" in shapes else "shared from the target at load time"
    eagle3["norm_before_residual"] = effective_norm_before_residual(fmt, config)
    return eagle3, dims


def _readable(tensor):
    """Whether a tensor's bytes are all inside its file (so its data can be read at all)."""
    return (tensor["begin"] is not None and tensor["bytes"] is not None
            and tensor["begin"] + tensor["bytes"] <= tensor["data_bytes"])


def _select_tensors(layout, by_file, problems):
    """The tensors a loader would see: by the shard index when there is one."""
    if layout.index is None:
        seen = {}
        tensors = []
        for path, found in by_file.items():
            for t in found:
                if t["name"] in seen:
                    problems.append(_warn("tensor %r is in both %s and %s" % (
                        t["name"], _q(os.path.basename(seen[t["name"]])), _q(os.path.basename(path)))))
                    continue
                seen[t["name"]] = path
                tensors.append(t)
        return tensors
    index_name = os.path.basename(layout.index_path)
    weight_map = layout.index["weight_map"]
    per_shard = {}
    for name, shard in weight_map.items():
        per_shard.setdefault(shard, []).append(name)
    tensors = []
    listed = set(layout.weight_files)
    for shard, names in per_shard.items():
        shard_path = os.path.normpath(os.path.join(layout.root, shard)) if shard and "\0" not in shard else None
        if shard_path not in listed:
            continue  # refused when the index was read (not a file name, or outside the directory)
        if shard_path not in by_file:
            if not os.path.exists(shard_path):
                problems.append(_err("%s names shard %s for %s tensors (e.g. %r), but the file is missing"
                                     % (index_name, _q(shard), _n(len(names)), names[0])))
            continue
        in_shard = dict((t["name"], t) for t in by_file[shard_path])
        lacking = [n for n in names if n not in in_shard]
        for name in lacking[:10]:
            problems.append(_err("%s maps tensor %r to %s, which has no tensor %r" % (index_name, name, _q(shard), name)))
        if len(lacking) > 10:
            problems.append(_err("%s maps %s more tensors to %s that it does not hold"
                                 % (index_name, _n(len(lacking) - 10), _q(shard))))
        tensors.extend(in_shard[n] for n in names if n in in_shard)
        unlisted = sorted(set(in_shard) - set(names))
        for name in unlisted[:10]:
            problems.append(_warn("%s holds tensor %r, which %s does not list; loaders that follow the index "
                                  "ignore it" % (_q(shard), name, index_name)))
    metadata = layout.index.get("metadata")
    total_size = metadata.get("total_size") if isinstance(metadata, dict) else None
    stored = sum(t["end"] - t["begin"] for t in tensors if t["begin"] is not None and t["end"] >= t["begin"])
    if isinstance(total_size, int) and not isinstance(total_size, bool) and total_size != stored:
        problems.append(_warn("%s says total_size %s bytes, the tensors it lists add up to %s"
                              % (index_name, _n(total_size), _n(stored))))
    return tensors


def _hash_files(files, progress):
    total = sum(f["bytes"] for f in files)
    done_before = [0]

    def overall(done, _size, file_path):
        progress(done_before[0] + done, total, file_path)

    for f in files:
        f["sha256"] = sha256_file(f["path"], overall if progress else None)
        done_before[0] += f["bytes"]


def effective_norm_before_residual(fmt, config):
    """Whether hidden_norm applies before the residual is taken, as the loader will run it.

    SpecForge / SGLang (and the original EAGLE-3) take the residual before hidden_norm, which is
    norm_before_residual = false, and their configs do not carry the field. speculators configs
    carry it (speculators' own training sets it true); vLLM reads it and defaults to false.
    """
    eff = effective_config(config)
    value = eff.get("norm_before_residual")
    if fmt in ("specforge", "eagle"):
        return False
    return bool(value) if isinstance(value, bool) else False


# ---------------------------------------------------------------------------------------------
# sha256


def sha256_file(path, progress=None, block_bytes=HASH_BLOCK_BYTES):
    """Hex sha256 of a file, streamed in large blocks through one reusable buffer.

    progress(done_bytes, total_bytes, path) is called at most every PROGRESS_INTERVAL_S and
    once at the end.
    """
    digest = hashlib.sha256()
    buffer = bytearray(block_bytes)
    view = memoryview(buffer)
    done = 0
    try:
        with open(path, "rb", buffering=0) as f:
            total = os.fstat(f.fileno()).st_size
            if hasattr(os, "posix_fadvise"):
                try:
                    os.posix_fadvise(f.fileno(), 0, 0, os.POSIX_FADV_SEQUENTIAL)
                except OSError:
                    pass
            last = time.monotonic()
            while True:
                count = f.readinto(buffer)
                if not count:
                    break
                digest.update(view[:count])
                done += count
                if progress is not None:
                    now = time.monotonic()
                    if now - last >= PROGRESS_INTERVAL_S:
                        last = now
                        progress(done, total, path)
    except OSError as exc:
        raise CheckpointIOError(_os_message(path, exc))
    if progress is not None:
        progress(done, total, path)
    return digest.hexdigest()


# ---------------------------------------------------------------------------------------------
# Compatibility verdicts

_DIM_WORDS = {
    "hidden_size": "hidden size",
    "target_hidden_size": "target hidden size (fc fuses 3 x this)",
    "draft_vocab_size": "draft vocabulary",
    "target_vocab_size": "target vocabulary",
    "intermediate_size": "MLP intermediate size",
    "num_attention_heads": "attention heads",
    "num_key_value_heads": "kv heads",
    "head_dim": "head dim",
}
_SHAPE_CAUSE = (
    ("fc.weight", "hidden size or target hidden size differs"),
    ("lm_head.weight", "draft vocabulary or hidden size differs"),
    ("d2t", "draft vocabulary differs"),
    ("t2d", "target vocabulary differs"),
    ("embed_tokens.weight", "target vocabulary or hidden size differs"),
    ("mlp.", "intermediate or hidden size differs"),
    ("self_attn.", "heads, head dim or hidden size differ"),
    ("norm", "hidden size differs"),
)
# Tensors a drafter may lack without harm: they come from elsewhere at load time.
_OPTIONAL = {"embed_tokens.weight": "shared from the target at load time",
             "t2d": "only needed for training; serving uses d2t"}


def _tensor_side(t):
    return {"name": t["name"], "shape": t["shape"], "dtype": t["dtype"]} if t else None


def _canonical_tensors(report):
    names = [t["name"] for t in report.get("tensors", [])]
    mapping = canonical_names(names, report.get("format", "unknown"))
    return dict((mapping[t["name"]], t) for t in report.get("tensors", []))


def compare(report_a, report_b):
    """Side by side: can drafter A initialise drafter B (e.g. the K2 drafter for a K2.5 fine-tune)?

    Works from two inspect reports, so A and B may come from different hosts. Tensors are matched
    by role across layouts (SpecForge midlayer.X = speculators layers.0.X = vLLM model.layers.N.X).
    """
    broken, dims, missing, shapes, notes = [], [], [], [], []
    fmt_a, fmt_b = report_a.get("format", "unknown"), report_b.get("format", "unknown")
    ea, eb = report_a.get("eagle3"), report_b.get("eagle3")
    for side, report, e in (("A", report_a, ea), ("B", report_b, eb)):
        if e is None:
            broken.append("%s is not an EAGLE-3 drafter (format %s: %s)"
                          % (side, report.get("format"), FORMAT_DESCRIPTIONS.get(report.get("format"), "")))
        errors = [p["message"] for p in report.get("problems", []) if p.get("level") == "error"]
        if errors:
            broken.append("%s has %d error%s in its files, first: %s"
                          % (side, len(errors), "s" if len(errors) > 1 else "", errors[0]))
    if fmt_a != fmt_b:
        notes.append("layouts differ: A is %s (%s), B is %s (%s); tensors are matched by role and must be "
                     "renamed when loading" % (fmt_a, _NAMING.get(fmt_a, "?"), fmt_b, _NAMING.get(fmt_b, "?")))
    if ea and eb:
        for key, words in _DIM_WORDS.items():
            if ea.get(key) is not None and eb.get(key) is not None and ea[key] != eb[key]:
                dims.append("%s differs: A %s, B %s" % (words, _d(ea[key]), _d(eb[key])))
    ca, cb = _canonical_tensors(report_a), _canonical_tensors(report_b)
    rows = []
    for key in sorted(set(ca) | set(cb), key=_row_order):
        a, b = ca.get(key), cb.get(key)
        if a and b:
            status = "shape differs" if a["shape"] != b["shape"] else "dtype differs" if a["dtype"] != b["dtype"] else "same"
            name = a["name"] if a["name"] == b["name"] else "%s = %s" % (a["name"], b["name"])
        else:
            status = "only in A" if a else "only in B"
            name = (a or b)["name"]
        rows.append({"name": name, "a": _tensor_side(a), "b": _tensor_side(b), "status": status})
        if status == "shape differs":
            cause = next((c for k, c in _SHAPE_CAUSE if k in key), "")
            shapes.append("%s: A %s, B %s%s" % (name, _shape_text(a["shape"]), _shape_text(b["shape"]),
                                                (" (%s)" % cause) if cause else ""))
        elif status == "only in B":
            if key in _OPTIONAL:
                notes.append("%s only in B: A has none (%s)" % (b["name"], _OPTIONAL[key]))
            else:
                missing.append("B has %s, A has none: B's copy would start from random values" % b["name"])
        elif status == "only in A":
            notes.append("%s only in A: not used by B%s"
                         % (a["name"], " (B: %s)" % _OPTIONAL[key] if key in _OPTIONAL else ""))
        elif status == "dtype differs":
            notes.append("%s: dtype %s in A, %s in B: cast when loading" % (name, a["dtype"], b["dtype"]))
    if len(shapes) > 5:
        shapes = shapes[:5] + ["and %d more tensors differ in shape" % (len(shapes) - 5)]
    fatal = broken + dims + missing + shapes
    pitfalls = _pitfalls(report_a, report_b, ea, eb) if ea and eb else []
    if fatal:
        summary = "not a drop-in initialisation: " + fatal[0]
    else:
        summary = "drop-in initialisation: every tensor B needs is in A with the same shape"
    return {"verdict": "incompatible" if fatal else "compatible",
            "reasons": [summary] + fatal[1:] + notes + ["pitfall: " + p for p in pitfalls],
            "rows": rows, "config_diff": _config_diff(report_a.get("config"), report_b.get("config"))}


_NAMING = {"specforge": "midlayer.*", "eagle": "midlayer.* or layers.0.*", "speculators": "layers.0.*",
           "vllm": "model.layers.N.*", "hf": "model.layers.*", "unknown": "?"}


def _row_order(canonical):
    order = ["fc.", "layers.", "norm.", "lm_head.", "d2t", "t2d", "embed_tokens."]
    for i, prefix in enumerate(order):
        if canonical.startswith(prefix):
            return (i, canonical)
    return (len(order), canonical)


def _pitfalls(report_a, report_b, ea, eb):
    found = []
    nbr_a, nbr_b = ea.get("norm_before_residual"), eb.get("norm_before_residual")
    if nbr_a is not None and nbr_b is not None and nbr_a != nbr_b:
        found.append("norm_before_residual: A runs %s, B runs %s. SpecForge/SGLang drafters take the residual before "
                     "hidden_norm (false) and do not write the field; speculators configs write it (speculators' "
                     "training sets true) and vLLM assumes false when it is absent. Set it explicitly in B's config "
                     "to match how A was trained." % (str(nbr_a).lower(), str(nbr_b).lower()))
    ids_a, ids_b = ea.get("aux_layer_ids"), eb.get("aux_layer_ids")
    if ids_a != ids_b:
        found.append("aux layer ids: A %s, B %s (none = vLLM's default (2, L//2, L-3) of the target); fc.weight was "
                     "trained on A's layers" % (ids_a or "none", ids_b or "none"))
    map_a, map_b = ea.get("vocab_map_sha256"), eb.get("vocab_map_sha256")
    if map_a and map_b and map_a != map_b:
        found.append("d2t/t2d differ: row i of A's lm_head.weight stands for a different target token than in B; "
                     "carry A's d2t and t2d over together with lm_head.weight")
    embed_a, embed_b = ea.get("embed_tokens"), eb.get("embed_tokens")
    if embed_a != embed_b:
        found.append("embed_tokens: %s in A, %s in B" % (embed_a, embed_b))
    cfg_a, cfg_b = effective_config(report_a.get("config")), effective_config(report_b.get("config"))
    for key in ("rope_theta", "rope_scaling", "rms_norm_eps", "max_position_embeddings"):
        if key in cfg_a and key in cfg_b and cfg_a[key] != cfg_b[key]:
            found.append("%s: A %s, B %s" % (key, json.dumps(cfg_a[key]), json.dumps(cfg_b[key])))
    return found


def _config_diff(config_a, config_b):
    a, b = effective_config(config_a), effective_config(config_b)
    diff = []
    for key in sorted(set(a) | set(b)):
        if key in _CONFIG_NOISE:
            continue
        if a.get(key, _MISSING) != b.get(key, _MISSING):
            diff.append({"field": key, "a": a.get(key), "b": b.get(key),
                         "in": "both" if key in a and key in b else "A" if key in a else "B"})
    return diff


_MISSING = object()


def _target_text_config(target_config):
    if isinstance(target_config, dict) and "hidden_size" not in target_config \
            and isinstance(target_config.get("text_config"), dict):
        return target_config["text_config"]  # multimodal wrappers keep the LM's fields here
    return target_config if isinstance(target_config, dict) else {}


def check_against_target(report, target_config):
    """Can this drafter serve the target whose config.json is target_config?

    Checks the hidden size fc expects, the vocabulary d2t maps into, and that the aux layer ids
    lie within the target's layers (vLLM's default (2, L//2, L-3) when the drafter names none).
    """
    tc = _target_text_config(target_config)
    e = report.get("eagle3")
    checks = []

    def check(name, ok, message):
        checks.append({"check": name, "ok": ok, "message": message})

    if e is None:
        check("eagle3", False, "not an EAGLE-3 drafter (format %s)" % report.get("format"))
        return {"verdict": "incompatible", "reasons": [c["message"] for c in checks], "checks": checks,
                "aux_layer_ids": None, "aux_layer_ids_source": None}
    th, tv, layers = _int_field(tc, "hidden_size"), _int_field(tc, "vocab_size"), _int_field(tc, "num_hidden_layers")
    dth, dh = e.get("target_hidden_size"), e.get("hidden_size")
    if th is None:
        check("hidden_size", False, "the target config has no hidden_size")
    elif dth is not None:
        check("hidden_size", dth == th, "fc.weight fuses 3 x %s target features; the target's hidden_size is %s"
              % (_d(dth), _d(th)))
    if th is not None and dh is not None and e.get("embed_tokens") != "present":
        check("embedding", dh == th, "the drafter has no embed_tokens and shares the target's %s-wide embedding; "
              "its hidden size is %s" % (_d(th), _d(dh)))
    dtv, dv = e.get("target_vocab_size"), e.get("draft_vocab_size")
    if tv is None:
        check("vocab_size", False, "the target config has no vocab_size")
    else:
        if dtv is not None:
            check("vocab_size", dtv == tv, "the drafter maps into a %s-token target vocabulary (t2d); the target's "
                  "vocab_size is %s" % (_d(dtv), _d(tv)))
        if dv is not None and dv > tv:
            check("draft_vocab_size", False, "the draft vocabulary (%s) is larger than the target's (%s)" % (_d(dv), _d(tv)))
    ids = e.get("aux_layer_ids")
    source = "config"
    if layers is None:
        check("aux_layer_ids", False, "the target config has no num_hidden_layers: aux layer ids cannot be checked")
    else:
        if ids is None:
            ids, source = default_aux_layer_ids(layers), "vllm default (2, L//2, L-3)"
        outside = [i for i in ids if not 0 <= i < layers]
        where = "from the drafter's config" if source == "config" else "vLLM's default for a %d-layer target" % layers
        if outside:
            check("aux_layer_ids", False, "aux layer ids %s (%s) include %s, outside the target's %d layers (0..%d)"
                  % (ids, where, outside, layers, layers - 1))
        else:
            check("aux_layer_ids", True, "aux layer ids %s (%s) lie within the target's %d layers" % (ids, where, layers))
    failed = [c["message"] for c in checks if not c["ok"]]
    verdict = "incompatible" if failed else "compatible"
    reasons = failed if failed else [c["message"] for c in checks]
    return {"verdict": verdict, "reasons": reasons, "checks": checks, "aux_layer_ids": ids, "aux_layer_ids_source": source}
