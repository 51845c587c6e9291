"""What goes wrong in a checkpoint, in words: the error classes the checkpoint modules raise, the
problem dicts a report lists, and how their one-line messages spell counts, names and shapes.
Standard library only, Python 3.9+.
"""

import errno
import json

from ..core import regular_files


class CheckpointError(Exception):
    """Base of the checkpoint errors; the message is one human line."""


class CheckpointIOError(CheckpointError):
    """The path itself cannot be read: it does not exist, or permission is denied. `reason`: why,
    without the path (for a line that names the file its own way), when an OSError said it."""

    reason = None


class CheckpointNotFound(CheckpointIOError):
    """The path does not exist: what was asked for is not there (NotFound on the wire, exit 1)."""


class CheckpointNotRegular(CheckpointIOError):
    """The path leads to a FIFO, a device or a socket: no checkpoint, and never opened for reading
    (NotACheckpoint on the wire, exit 1)."""


def io_error_type(exc):
    """The wire's type for a CheckpointIOError: NotFound for a path that is not there (exit 1, as
    for anything asked for and not found), NotACheckpoint for one that is no regular file (exit
    1), IOError for one that cannot be read."""
    if isinstance(exc, CheckpointNotFound):
        return "NotFound"
    if isinstance(exc, CheckpointNotRegular):
        return "NotACheckpoint"
    return "IOError"


def io_error(path, exc):
    """The CheckpointIOError for an OSError met reading `path`, in one line: a symlink loop is
    not found (it leads nowhere), a FIFO or device is not a checkpoint."""
    message = regular_files.error_text(path, exc)
    if exc.errno in (errno.ENOENT, errno.ELOOP):
        error = CheckpointNotFound(message)
    elif isinstance(exc, regular_files.NotARegularFile) and exc.kind != "a directory":
        error = CheckpointNotRegular(message)
    else:
        error = CheckpointIOError(message)
    error.reason = regular_files.reason(exc)
    return error


class HeaderError(CheckpointError):
    """A file whose safetensors header cannot be read at all."""


def err(message):
    return {"level": "error", "message": message}


def warn(message):
    return {"level": "warning", "message": message}


def count_text(value):
    """A byte count or other large count, with thousands separators."""
    return "{:,}".format(value)


def name_text(name):
    """A file or shard name for a one-line message: as is when printable, else quoted."""
    return name if name.isprintable() and name.strip() == name and name else repr(name)


def dim_text(value):
    """A dimension (hidden size, vocabulary, ...), written as config.json and shapes write it."""
    return str(value)


def shape_text(shape):
    return "[" + ", ".join(str(d) for d in shape) + "]"


def short_json(value):
    text = json.dumps(value)
    return text if len(text) <= 60 else text[:57] + "..."


def json_kind(value):
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
