"""Checkpoint inspection without loading weights: safetensors headers, EAGLE-3 layouts, verdicts.

Answers "is this file whole, is it the drafter I think it is, can I start from it?" from the
headers alone (plus the kilobyte-sized d2t/t2d vocabulary maps), so a 2.4 GB drafter inspects
in milliseconds. Standard library only, Python 3.9+: it runs on the GPU host's own Python.

This module shapes what collect.py reads into the inspect report. The parts: locate (finding a
checkpoint's files), safetensors_header (headers), formats (which tool wrote it), eagle3
(dimensions and shape checks), roles (what each tensor does), vocab_maps (d2t/t2d),
file_hashes (sha256) and compatibility (compare, check_against_target). Their public names
are importable from here as before.
"""

from .collect import MAX_PROBLEMS_PER_FILE, Collected, collect
from .compatibility import check_against_target, compare
from .eagle3 import aux_layer_ids_from_config, default_aux_layer_ids, effective_norm_before_residual
from .file_hashes import HASH_BLOCK_BYTES, PROGRESS_INTERVAL_S, hash_files, sha256_file
from .formats import FORMAT_DESCRIPTIONS, FORMATS, canonical_names, detect_format, effective_config
from .locate import MAX_INDEX_FILE_BYTES, MAX_JSON_FILE_BYTES, load_json_file
from .roles import RoleNamer, role
from .safetensors_header import (DTYPE_BITS, MAX_HEADER_BYTES, MAX_UNKNOWN_FIELD_DEPTH, U64_MAX, CheckpointError,
                                 CheckpointIOError, HeaderError, check_header, parse_header_json, read_header)
from .vocab_maps import MAX_VOCAB_MAP_BYTES

__all__ = [
    # checkpoint (this module and its parts)
    "inspect", "finish_report", "collect", "Collected", "sha256_file", "MAX_JSON_FILE_BYTES", "MAX_INDEX_FILE_BYTES", "load_json_file",
    "MAX_VOCAB_MAP_BYTES", "HASH_BLOCK_BYTES", "PROGRESS_INTERVAL_S", "MAX_PROBLEMS_PER_FILE",
    # safetensors_header
    "CheckpointError", "CheckpointIOError", "HeaderError", "DTYPE_BITS", "MAX_HEADER_BYTES",
    "MAX_UNKNOWN_FIELD_DEPTH", "U64_MAX", "read_header", "parse_header_json", "check_header",
    # formats, eagle3, roles
    "FORMATS", "FORMAT_DESCRIPTIONS", "effective_config", "detect_format", "canonical_names", "role",
    "aux_layer_ids_from_config", "default_aux_layer_ids", "effective_norm_before_residual",
    # compatibility
    "compare", "check_against_target",
]


def inspect(path, sha256=False, progress=None):
    """The inspect report of a .safetensors file, a shard index, or a model directory.

    Raises CheckpointIOError when the path itself cannot be read; everything wrong inside the
    checkpoint goes into "problems". With sha256, each weight file is hashed and
    progress(done_bytes, total_bytes, file_path) is called a few times a second, with the
    byte counts over all files.
    """
    got = collect(path)
    namer = RoleNamer(got.format, got.dims, got.canonical)
    columns = got.columns
    stored = columns.stored_bytes()
    labels = [got.file_label(i) for i in range(len(got.files))] if got.multi else None
    report_tensors = []
    for i in (got.name_order if got.name_order is not None else columns.name_order()):
        name, shape = columns.names[i], columns.shapes[i]
        entry = {"name": name, "dtype": columns.dtypes[i], "shape": list(shape) if shape is not None else None,
                 "bytes": stored[i], "role": namer.role(name)}
        if labels is not None:
            entry["file"] = labels[columns.file_indexes[i]]
        report_tensors.append(entry)
    return finish_report(got, report_tensors, sha256, progress)


def finish_report(got, report_tensors, sha256=False, progress=None):
    """The report dict around a list of tensors (all of them, or a first page)."""
    if sha256:
        hash_files(got.files, progress)
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
