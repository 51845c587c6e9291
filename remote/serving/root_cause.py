"""Why a server died, in one line: the engine's own first error, found in its log.

vLLM's API server ends a failed start with `RuntimeError: Engine core initialization failed.
See root cause above`, the cause (`AssertionError: Attempted to load weight ...`) being in the
engine core's traceback, often a hundred lines up. The root cause is the first Python exception
line (`SomethingError: ...`, after an optional `(EngineCore_DP0 pid=N)` or logger prefix) before
that line; a log without the marker gives its last exception line (the one that ended the
process). The log is read in bounded pieces: its head and its tail.
"""

import os
import re

HEAD_BYTES = 256 << 10
TAIL_BYTES = 512 << 10
MAX_LINE_CHARS = 300
MARKER = "See root cause above"
# A process prefix `(EngineCore_DP0 pid=123) `, then a logger prefix `ERROR 12-01 15:02:24 [core.py:12] `.
_PREFIX = re.compile(r"^(?:\([\w.-]+ pid=\d+\)\s*)?(?:(?:DEBUG|INFO|WARNING|ERROR|CRITICAL) \d\d-\d\d \d\d:\d\d:\d\d \[[^\]]*\]\s*)?")
# `ValueError: ...`, `torch.OutOfMemoryError: ...`, `safetensors_rust.SafetensorError: ...`, a bare `KeyboardInterrupt`.
_EXCEPTION = re.compile(r"^(?:[A-Za-z_]\w*\.)*(?:[A-Za-z_]\w*)?(?:Error|Exception|Exit|Interrupt)(?:: .*)?$")
# Lines that point elsewhere for the cause: never the cause themselves.
_POINTERS = ("See root cause above", "See stack trace for root cause")


def read_bounded(path):
    """The log's text: whole when small, else its head and its tail with a line between."""
    with open(path, "rb") as f:
        size = os.fstat(f.fileno()).st_size
        if size <= HEAD_BYTES + TAIL_BYTES:
            return f.read(size).decode("utf-8", "replace")
        head = f.read(HEAD_BYTES)
        f.seek(size - TAIL_BYTES)
        tail = f.read(TAIL_BYTES)
    # Cut at line ends so no half line reads as an exception.
    head = head[: head.rfind(b"\n") + 1]
    tail = tail[tail.find(b"\n") + 1 :]
    return (head + b"[...]\n" + tail).decode("utf-8", "replace")


def _bare(line):
    return _PREFIX.sub("", line.rstrip("\r\n")).strip()


def exception_line(line):
    """The exception of one log line without its prefixes, or None when it is not one."""
    bare = _bare(line)
    return bare if _EXCEPTION.match(bare) and not any(pointer in bare for pointer in _POINTERS) else None


def first_error(text):
    """The root cause's line in a dead server's log text, or None when it names none."""
    lines = text.splitlines()
    marker = next((i for i, line in enumerate(lines) if MARKER in line), None)
    if marker is not None:
        for line in lines[:marker]:
            found = exception_line(line)
            if found:
                return found[:MAX_LINE_CHARS]
        return _bare(lines[marker])[:MAX_LINE_CHARS]
    for line in reversed(lines):
        found = exception_line(line)
        if found:
            return found[:MAX_LINE_CHARS]
    return None


def first_error_in(path):
    """first_error of the log at `path` (read bounded); None when it cannot be read."""
    try:
        return first_error(read_bounded(path))
    except OSError:
        return None
