"""Checkpoint inspection without loading weights: safetensors headers, EAGLE-3 layouts, verdicts.

Answers "is this file whole, is it the drafter I think it is, can I start from it?" from the
headers alone (plus the kilobyte-sized d2t/t2d vocabulary maps), so a 2.4 GB drafter inspects
in milliseconds. Standard library only, Python 3.9+: it runs on the GPU host's own Python.

This module finds a checkpoint's files, reads them (headers, config.json, shard index, d2t/t2d)
and assembles the report; the parts live in safetensors_header (headers), eagle3 (layouts,
dimensions, roles, shape checks) and compatibility (compare, check_against_target). Their public
names are importable from here as before.
"""

import hashlib
import json
import os
import struct
import time

from ..core import hashing
from .compatibility import check_against_target, compare
from .eagle3 import (FORMAT_DESCRIPTIONS, FORMATS, _check_eagle3_shapes, _check_vocab_maps, _derive_eagle3,
                     _is_eagle3_layout, _is_eagle12, aux_layer_ids_from_config, canonical_names,
                     default_aux_layer_ids, detect_format, effective_config, effective_norm_before_residual, role)
from .safetensors_header import (DTYPE_BITS, MAX_HEADER_BYTES, MAX_UNKNOWN_FIELD_DEPTH, U64_MAX, _INT_FORMATS,
                                 CheckpointError, CheckpointIOError, HeaderError, _err, _n, _os_message, _q,
                                 _read_exact, _warn, check_header, parse_header_json, read_header,
                                 read_header_rows)
from .roles import RoleNamer

__all__ = [
    # checkpoint (this module)
    "inspect", "sha256_file", "MAX_JSON_FILE_BYTES", "MAX_VOCAB_MAP_BYTES", "HASH_BLOCK_BYTES",
    "PROGRESS_INTERVAL_S", "MAX_PROBLEMS_PER_FILE",
    # safetensors_header
    "CheckpointError", "CheckpointIOError", "HeaderError", "DTYPE_BITS", "MAX_HEADER_BYTES",
    "MAX_UNKNOWN_FIELD_DEPTH", "U64_MAX", "read_header", "parse_header_json", "check_header",
    # eagle3
    "FORMATS", "FORMAT_DESCRIPTIONS", "effective_config", "detect_format", "canonical_names", "role",
    "aux_layer_ids_from_config", "default_aux_layer_ids", "effective_norm_before_residual",
    # compatibility
    "compare", "check_against_target",
]

# Index and config files are small; a larger one is refused rather than read. A shard index
# names every tensor: 1,000,000 tensors make a ~70 MB one, so it may be larger.
MAX_JSON_FILE_BYTES = 64 * 1024 * 1024
MAX_INDEX_FILE_BYTES = 512 * 1024 * 1024
# d2t / t2d are read for the vocabulary check only when they are at most this large.
MAX_VOCAB_MAP_BYTES = 64 * 1024 * 1024
# Chosen with benchmarks/bench_sha256.py on a GPU host (median of 5 warm runs, same OpenSSL as
# sha256sum): 1, 2 and 4 MiB within 0.5% of each other at ~99% of sha256sum, 8 MiB 96%.
HASH_BLOCK_BYTES = hashing.BLOCK_BYTES
PROGRESS_INTERVAL_S = 0.25
# At most this many problems of one file are listed one by one.
MAX_PROBLEMS_PER_FILE = 40


# ---------------------------------------------------------------------------------------------
# Finding the files of a checkpoint
def _load_json_file(path, what, problems, most_bytes=MAX_JSON_FILE_BYTES):
    try:
        size = os.path.getsize(path)
        if size > most_bytes:
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
    index = _load_json_file(layout.index_path, "shard index", problems, MAX_INDEX_FILE_BYTES)
    if index is None:
        return
    weight_map = index.get("weight_map")
    if not isinstance(weight_map, dict) or not all(isinstance(v, str) for v in weight_map.values()):
        problems.append(_err("%s has no weight_map of tensor names to shard files" % name))
        return
    layout.index = index
    shards = list(dict.fromkeys(weight_map.values()))  # each once, in order
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
# inspect


def _cap(problems, label):
    if len(problems) <= MAX_PROBLEMS_PER_FILE:
        return problems
    errors = sum(1 for p in problems[MAX_PROBLEMS_PER_FILE:] if p["level"] == "error")
    return problems[:MAX_PROBLEMS_PER_FILE] + [_err("%s: %s more problems not listed (%s errors)"
                                                    % (label, _n(len(problems) - MAX_PROBLEMS_PER_FILE), _n(errors)))]


class _File(object):
    """One weight file as read: where its data section starts and how long it is."""

    __slots__ = ("path", "data_start", "data_bytes")

    def __init__(self, path, data_start, data_bytes):
        self.path = path
        self.data_start = data_start
        self.data_bytes = data_bytes


def _read_file_rows(path, label, problems):
    """(rows, file size, data start) of one file, adding its problems under its name.

    Rows are check_header_rows' tuples (name, dtype, shape, bytes, begin, end).
    """
    try:
        rows, file_problems, data_start, size = read_header_rows(path)
    except HeaderError as exc:
        problems.append(_err("%s: %s" % (label, exc)))
        return [], None, None
    for p in file_problems:
        p["message"] = "%s: %s" % (label, p["message"])
    problems.extend(_cap(file_problems, label))
    return rows, size, data_start


class Collected(object):
    """A checkpoint read from disk, before it is shaped into a report or a listing.

    `rows` are the tensors a loader would see, each (name, dtype, shape tuple, bytes, begin, end,
    file index); `files[i]` is the report's file dict and `file_info[i]` where its data lies.
    """

    def __init__(self, path, layout, multi):
        self.path = path
        self.layout = layout
        self.multi = multi
        self.files = []
        self.file_info = []
        self.rows = []
        self.problems = []
        self.config = None
        self.format = "unknown"
        self.eagle3 = None
        self.dims = {}
        self.canonical = None  # {name: speculators-layout name} where that differs from the name

    def file_label(self, index):
        info = self.file_info[index]
        return os.path.relpath(info.path, self.layout.root) if self.multi else None

    def stored_bytes(self, row):
        """What a tensor occupies in its file: its data_offsets span when that is sound."""
        begin, end = row[4], row[5]
        return end - begin if begin is not None and end >= begin else row[3]

    def tensor_dict(self, row):
        """A row as the dict the eagle3 checks and the vocabulary reader take."""
        info = self.file_info[row[6]]
        return {"name": row[0], "dtype": row[1], "shape": list(row[2]) if row[2] is not None else None,
                "bytes": row[3], "begin": row[4], "end": row[5], "file": info.path,
                "data_start": info.data_start, "data_bytes": info.data_bytes}


_EAGLE_FORMATS = ("specforge", "speculators", "eagle", "vllm")


def collect(path):
    """Read a checkpoint's files, pick the tensors a loader would see, detect its format and
    check an EAGLE-3 drafter's shapes. Raises CheckpointIOError when the path cannot be read."""
    path = os.fspath(path)
    if not os.path.exists(path):
        raise CheckpointIOError("%s does not exist" % path)
    problems = []
    layout = _resolve(path, problems)
    multi = len(layout.weight_files) > 1 or layout.index is not None
    got = Collected(path, layout, multi)
    got.problems = problems
    got.config = _load_json_file(layout.config_path, "config.json", problems) if layout.config_path else None
    by_file = {}
    for weight_file in layout.weight_files:
        label = _q(os.path.relpath(weight_file, layout.root) if multi else os.path.basename(weight_file))
        if not os.path.exists(weight_file):
            continue
        try:
            rows, size, data_start = _read_file_rows(weight_file, label, problems)
        except CheckpointIOError as exc:
            if not multi:
                raise
            problems.append(_err("cannot read %s: %s" % (label, exc)))
            continue
        if size is None:  # the header was unreadable; the file still counts (and is hashed)
            size = os.path.getsize(weight_file)
        index = len(got.files)
        got.files.append({"path": os.path.abspath(weight_file), "bytes": size})
        got.file_info.append(_File(weight_file, data_start, size - (data_start or size)))
        by_file[weight_file] = (index, rows)
    got.rows = _select_rows(layout, by_file, problems)
    del by_file
    shapes = dict((row[0], row[2]) for row in got.rows if row[2] is not None)
    got.format = detect_format(shapes, got.config)
    if got.format in _EAGLE_FORMATS:
        names = [row[0] for row in got.rows if row[2] is not None]
        canon_of = canonical_names(names, got.format)
        got.canonical = dict((n, c) for n, c in canon_of.items() if n != c)
        by_canon = dict((canon_of[row[0]], got.tensor_dict(row)) for row in got.rows if row[0] in canon_of)
        got.eagle3, got.dims = _eagle3_section(got.format, by_canon, got.config, problems)
    else:
        got.dims = {"eagle12": False}
    return got


def inspect(path, sha256=False, progress=None):
    """The inspect report of a .safetensors file, a shard index, or a model directory.

    Raises CheckpointIOError when the path itself cannot be read; everything wrong inside the
    checkpoint goes into "problems". With sha256, each weight file is hashed and
    progress(done_bytes, total_bytes, file_path) is called a few times a second, with the
    byte counts over all files.
    """
    got = collect(path)
    namer = RoleNamer(got.format, got.dims, got.canonical)
    report_tensors = []
    for row in sorted(got.rows, key=_row_name):
        entry = {"name": row[0], "dtype": row[1], "shape": list(row[2]) if row[2] is not None else None,
                 "bytes": got.stored_bytes(row), "role": namer.role(row[0])}
        if got.multi:
            entry["file"] = got.file_label(row[6])
        report_tensors.append(entry)
    return finish_report(got, report_tensors, sha256, progress)


def finish_report(got, report_tensors, sha256=False, progress=None):
    """The report dict around a list of tensors (all of them, or a first page)."""
    if sha256:
        _hash_files(got.files, progress)
    return {
        "path": got.path,
        "format": got.format,
        "total_bytes": sum(f["bytes"] for f in got.files),
        "files": got.files,
        "tensors": report_tensors,
        "eagle3": got.eagle3,
        "problems": got.problems,
        "config": got.config,
    }


def _row_name(row):
    return row[0]


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
        eagle3["vocab_map_sha256"] = _check_vocab_maps(d2t, t2d, dims, display, problems, _read_ints)
    eagle3["embed_tokens"] = "present" if "embed_tokens.weight" in shapes else "shared from the target at load time"
    eagle3["norm_before_residual"] = effective_norm_before_residual(fmt, config)
    return eagle3, dims


def _readable(tensor):
    """Whether a tensor's bytes are all inside its file (so its data can be read at all)."""
    return (tensor["begin"] is not None and tensor["bytes"] is not None
            and tensor["begin"] + tensor["bytes"] <= tensor["data_bytes"])


def _select_rows(layout, by_file, problems):
    """The tensors a loader would see (by the shard index when there is one), each row with
    its file's index appended."""
    if layout.index is None:
        seen = {}
        selected = []
        for path, (file_index, rows) in by_file.items():
            for row in rows:
                if row[0] in seen:
                    problems.append(_warn("tensor %r is in both %s and %s" % (
                        row[0], _q(os.path.basename(seen[row[0]])), _q(os.path.basename(path)))))
                    continue
                seen[row[0]] = path
                selected.append(row + (file_index,))
        return selected
    index_name = os.path.basename(layout.index_path)
    weight_map = layout.index["weight_map"]
    per_shard = {}
    for name, shard in weight_map.items():
        per_shard.setdefault(shard, []).append(name)
    selected = []
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
        file_index, rows = by_file[shard_path]
        in_shard = dict((row[0], row) for row in rows)
        lacking = [n for n in names if n not in in_shard]
        for name in lacking[:10]:
            problems.append(_err("%s maps tensor %r to %s, which has no tensor %r" % (index_name, name, _q(shard), name)))
        if len(lacking) > 10:
            problems.append(_err("%s maps %s more tensors to %s that it does not hold"
                                 % (index_name, _n(len(lacking) - 10), _q(shard))))
        selected.extend(in_shard[n] + (file_index,) for n in names if n in in_shard)
        if len(in_shard) > len(names) - len(lacking):
            unlisted = sorted(set(in_shard) - set(names))
            for name in unlisted[:10]:
                problems.append(_warn("%s holds tensor %r, which %s does not list; loaders that follow the index "
                                      "ignore it" % (_q(shard), name, index_name)))
    metadata = layout.index.get("metadata")
    total_size = metadata.get("total_size") if isinstance(metadata, dict) else None
    stored = sum(row[5] - row[4] for row in selected if row[4] is not None and row[5] >= row[4])
    if isinstance(total_size, int) and not isinstance(total_size, bool) and total_size != stored:
        problems.append(_warn("%s says total_size %s bytes, the tensors it lists add up to %s"
                              % (index_name, _n(total_size), _n(stored))))
    return selected


def _hash_files(files, progress):
    total = sum(f["bytes"] for f in files)
    done_before = [0]

    def overall(done, _size, file_path):
        progress(done_before[0] + done, total, file_path)

    for f in files:
        f["sha256"] = sha256_file(f["path"], overall if progress else None)
        done_before[0] += f["bytes"]


# ---------------------------------------------------------------------------------------------
# d2t / t2d: reading the vocabulary maps (kilobytes); eagle3._check_vocab_maps checks them


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


# ---------------------------------------------------------------------------------------------
# sha256


def sha256_file(path, progress=None, block_bytes=HASH_BLOCK_BYTES):
    """Hex sha256 of a file (the project's one hashing routine, remote/core/hashing.py).

    progress(done_bytes, total_bytes, path) is called at most every PROGRESS_INTERVAL_S and
    once at the end.
    """
    try:
        total = os.path.getsize(path)
        done = [0, time.monotonic()]

        def on_block(n):
            done[0] += n
            now = time.monotonic()
            if progress is not None and now - done[1] >= PROGRESS_INTERVAL_S:
                done[1] = now
                progress(done[0], total, path)

        digest = hashing.hash_file(path, hashlib.sha256(), progress=on_block, buf=bytearray(block_bytes)).hexdigest()
    except OSError as exc:
        raise CheckpointIOError(_os_message(path, exc))
    if progress is not None:
        progress(done[0], total, path)
    return digest
