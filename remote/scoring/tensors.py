"""Named tensors of a safetensors checkpoint, found by name through its shard index and read by
their byte ranges only: a 1 TB target costs what the tensors asked for cost, never the model.
Headers are read by checkpoints' own reader; data by bounded preads (a regular file, its size
checked, a deadline). Standard library only.
"""

import collections
import os
import time

from ..checkpoints import locate, safetensors_header
from ..core.regular_files import open_regular, reason

# One named tensor: the file, its dtype and shape as the header says, where its bytes begin in
# the file and how many there are.
Span = collections.namedtuple("Span", "name path dtype shape start nbytes")

READ_CHUNK_BYTES = 64 * 1024 * 1024
READ_DEADLINE_S = 1800.0  # one tensor (an lm_head of 2.3 GB on a slow network disk is minutes)


class TensorsError(ValueError):
    """A checkpoint whose asked-for tensors cannot be located or read: one line."""


def _problem_lines(problems):
    return [p["message"] for p in problems if p.get("level") == "error"]


def weight_files(path):
    """(its directory, weight files, weight_map or None) of a checkpoint directory or file, as its shard index
    (read with its size bound) or its directory says. Raises TensorsError in one line."""
    problems = []
    try:
        layout = locate.resolve(path, problems)
    except safetensors_header.CheckpointError as exc:
        raise TensorsError(str(exc))
    errors = _problem_lines(problems)
    if errors:
        raise TensorsError(errors[0])
    weight_map = layout.index.get("weight_map") if layout.index else None
    return layout.root, layout.weight_files, weight_map


def _file_spans(path):
    """{name: Span} of one safetensors file, from its header (checked as safetensors checks it)."""
    try:
        rows, problems, data_start, file_size = safetensors_header.read_header_rows(path)
    except safetensors_header.CheckpointError as exc:
        raise TensorsError("%s: %s" % (os.path.basename(path), exc))
    errors = _problem_lines(problems)
    if errors:
        raise TensorsError("%s: %s" % (os.path.basename(path), errors[0]))
    spans = {}
    for name, dtype, shape, nbytes, begin, end in rows:
        if data_start + end > file_size:
            raise TensorsError("%s: %s ends past the end of the file (truncated?)" % (os.path.basename(path), name))
        spans[name] = Span(name, path, dtype, tuple(shape), data_start + begin, end - begin)
    return spans


def header_spans(path):
    """{name: Span} of one safetensors file (a sample, a one-file drafter)."""
    return _file_spans(path)


def locate_tensors(path, wanted):
    """{name: Span} of the tensors named in `wanted` (names; absent ones are left out) in the
    checkpoint at `path`: through its shard index only the shards that hold them are opened."""
    root, files, weight_map = weight_files(path)
    wanted = list(wanted)
    if weight_map is not None:
        # The index names each tensor's shard; resolve() kept only shards inside the directory.
        shards = {os.path.normpath(os.path.join(root, weight_map[name])) for name in wanted if name in weight_map}
        files = [f for f in files if f in shards]
    found = {}
    for file_path in files:
        spans = _file_spans(file_path)
        for name in wanted:
            if name in spans and name not in found:
                found[name] = spans[name]
    return found


def all_names(path):
    """{name: Span} of every tensor of a small checkpoint (a drafter): every file's header."""
    _root, files, _weight_map = weight_files(path)
    found = {}
    for file_path in files:
        found.update(_file_spans(file_path))
    return found


def read_span(span, deadline_s=READ_DEADLINE_S):
    """The bytes of one tensor, as a bytearray: the file opened as a regular file only (a FIFO
    named like a shard is refused, never waited on), its size checked against the span first,
    read in chunks under a deadline. Raises TensorsError in one line."""
    began = time.monotonic()
    try:
        with open_regular(span.path, buffering=0) as f:
            size = os.fstat(f.fileno()).st_size
            if span.start + span.nbytes > size:
                raise TensorsError("%s: %s ends at byte %d but the file has %d (truncated?)"
                                   % (os.path.basename(span.path), span.name, span.start + span.nbytes, size))
            out = bytearray(span.nbytes)
            view = memoryview(out)
            done = 0
            while done < span.nbytes:
                got = os.preadv(f.fileno(), [view[done:done + READ_CHUNK_BYTES]], span.start + done) \
                    if hasattr(os, "preadv") else _pread_into(f.fileno(), view, done, span.start + done)
                if got <= 0:
                    raise TensorsError("%s: the file ended while reading %s (truncated while read?)"
                                       % (os.path.basename(span.path), span.name))
                done += got
                if time.monotonic() - began > deadline_s:
                    raise TensorsError("%s: reading %s took over %d s" % (os.path.basename(span.path), span.name, deadline_s))
            return out
    except OSError as exc:
        raise TensorsError("cannot read %s: %s" % (span.path, reason(exc)))


def _pread_into(fd, view, done, offset):
    chunk = os.pread(fd, min(READ_CHUNK_BYTES, len(view) - done), offset)
    view[done:done + len(chunk)] = chunk
    return len(chunk)
