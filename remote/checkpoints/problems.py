"""What goes wrong in a checkpoint, in words: the error classes the checkpoint modules raise, the
problem dicts a report lists, and how their one-line messages spell counts, names and shapes.
Standard library only, Python 3.9+.
"""

import json


class CheckpointError(Exception):
    """Base of the checkpoint errors; the message is one human line."""


class CheckpointIOError(CheckpointError):
    """The path itself cannot be read: it does not exist, or permission is denied."""


class CheckpointNotFound(CheckpointIOError):
    """The path does not exist: what was asked for is not there (NotFound on the wire, exit 1)."""


def io_error_type(exc):
    """The wire's type for a CheckpointIOError: NotFound for a path that is not there (exit 1, as
    for anything asked for and not found), IOError for one that cannot be read."""
    return "NotFound" if isinstance(exc, CheckpointNotFound) else "IOError"


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


def os_message(path, exc):
    return "%s: %s" % (path, exc.strerror or exc)
