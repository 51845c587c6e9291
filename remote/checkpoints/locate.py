"""Where a checkpoint's pieces are: its weight files (from a shard index, a directory or a single
file), the shard index itself and config.json, with what is wrong in how they are laid out
(shards outside the directory, files the index does not name). Standard library only.
"""

import json
import os
import stat

from ..core.regular_files import kind_of, open_regular, reason
from .header_json import read_exact
from .problems import count_text, err, io_error, name_text, warn

# Index and config files are small; a larger one is refused rather than read. A shard index
# names every tensor: 1,000,000 tensors make a ~70 MB one, so it may be larger.
MAX_JSON_FILE_BYTES = 64 * 1024 * 1024
MAX_INDEX_FILE_BYTES = 512 * 1024 * 1024


def load_json_file(path, what, problems, most_bytes=MAX_JSON_FILE_BYTES):
    try:
        with open_regular(path) as f:
            size = os.fstat(f.fileno()).st_size
            if size > most_bytes:
                problems.append(err("%s is %s bytes, too large for a %s" % (os.path.basename(path), count_text(size), what)))
                return None
            raw = read_exact(f, size)  # read(n) would allocate n up front, so never read(limit)
        text = raw.decode("utf-8")
        del raw  # a shard index's bytes are not kept while its text is parsed
        value = json.loads(text)
    except OSError as exc:
        problems.append(err("cannot read %s: %s" % (os.path.basename(path), reason(exc))))
        return None
    except (ValueError, RecursionError) as exc:  # UnicodeDecodeError is a ValueError
        problems.append(err("%s is not valid JSON: %s" % (os.path.basename(path), exc)))
        return None
    if not isinstance(value, dict):
        problems.append(err("%s is JSON but not an object" % os.path.basename(path)))
        return None
    return value


class Layout(object):
    """Where a checkpoint's pieces are: weight files, shard index, config.json."""

    def __init__(self, root):
        self.root = root
        self.weight_files = []
        self.index_path = None
        self.index = None
        self.config_path = None


def resolve(path, problems, read_index=True):
    """The checkpoint's Layout. Its shard index, when it has one, is read now (resolve_index), or
    only found when read_index is false (collect tries the fast path first)."""
    if os.path.isdir(path):
        root = path
        try:
            entries = sorted(os.listdir(path))
        except OSError as exc:
            raise io_error(path, exc)
        layout = Layout(root)
        indexes = [e for e in entries if e.endswith(".safetensors.index.json")]
        if indexes:
            chosen = "model.safetensors.index.json" if "model.safetensors.index.json" in indexes else indexes[0]
            if len(indexes) > 1:
                problems.append(warn("%d shard indexes in %s; using %s" % (len(indexes), path, chosen)))
            layout.index_path = os.path.join(root, chosen)
        else:
            problems_before = len(problems)
            layout.weight_files = _regular_files(root, [e for e in entries if e.endswith(".safetensors")], problems)
            if not layout.weight_files and len(problems) == problems_before:  # else the refused one is named
                others = [e for e in entries if e.endswith((".bin", ".pt", ".pth", ".gguf"))]
                hint = " (found %s: not safetensors, not inspected)" % ", ".join(others[:3]) if others else ""
                problems.append(err("no .safetensors file in %s%s" % (name_text(path), hint)))
            elif len(layout.weight_files) > 1:
                problems.append(warn("%d .safetensors files and no shard index: all of them are listed "
                                      "together" % len(layout.weight_files)))
    else:
        root = os.path.dirname(path) or "."
        layout = Layout(root)
        base = os.path.basename(path)
        if base.endswith(".json"):
            if base == "config.json":
                return resolve(root, problems, read_index)
            layout.index_path = path
        else:
            _check_regular(path)
            layout.weight_files = [path]
    config_path = os.path.join(layout.root, "config.json")
    if os.path.exists(config_path):  # a FIFO or a directory in its place is named when it is read
        layout.config_path = config_path
    if layout.index_path is not None:
        if not os.path.isdir(path):
            _check_regular(layout.index_path)
        if read_index:
            resolve_index(layout, problems)
    return layout


def weight_files_beside_index(layout):
    """The paths of the .safetensors files beside the shard index (in name order) when each is a
    regular file inside the checkpoint's directory, else None: the files an index that agrees
    with them names, with nothing in their place for the exact path to word."""
    try:
        entries = sorted(e for e in os.listdir(layout.root) if e.endswith(".safetensors"))
    except OSError:
        return None
    root_real = os.path.realpath(layout.root)
    paths = [os.path.normpath(os.path.join(layout.root, e)) for e in entries]
    for path in paths:
        try:
            if not stat.S_ISREG(os.stat(path).st_mode):
                return None
        except OSError:
            return None
        if not os.path.realpath(path).startswith(root_real + os.sep):
            return None
    return paths


def _check_regular(path):
    """Raises the one-line CheckpointIOError when the file asked for is no readable regular file."""
    try:
        with open_regular(path):
            pass
    except OSError as exc:
        raise io_error(path, exc)


def _regular_files(root, names, problems):
    """The paths of the regular files among `names` in `root`; a FIFO, device or socket named like
    a weight file is an error (never opened), a directory or a dangling link is passed over."""
    found = []
    for name in names:
        path = os.path.join(root, name)
        try:
            mode = os.stat(path).st_mode
        except FileNotFoundError:
            continue
        except OSError as exc:
            problems.append(err("cannot read %s: %s" % (name_text(name), reason(exc))))
            continue
        if stat.S_ISREG(mode):
            found.append(path)
        elif not stat.S_ISDIR(mode):
            problems.append(err("cannot read %s: it is %s, not a regular file" % (name_text(name), kind_of(mode))))
    return found


def resolve_index(layout, problems):
    name = os.path.basename(layout.index_path)
    index = load_json_file(layout.index_path, "shard index", problems, MAX_INDEX_FILE_BYTES)
    if index is None:
        return
    weight_map = index.get("weight_map")
    # A JSON value is a str exactly when its type is: one pass in C over 100,000+ entries.
    if not isinstance(weight_map, dict) or set(map(type, weight_map.values())) - {str}:
        problems.append(err("%s has no weight_map of tensor names to shard files" % name))
        return
    layout.index = index
    shards = list(dict.fromkeys(weight_map.values()))  # each once, in order
    root_real = os.path.realpath(layout.root)
    for shard in shards:
        if not shard or "\0" in shard:
            problems.append(err("%s names shard %s, which is not a file name" % (name, name_text(shard))))
            continue
        shard_path = os.path.normpath(os.path.join(layout.root, shard))
        if os.path.isabs(shard) or not os.path.realpath(shard_path).startswith(root_real + os.sep):
            problems.append(err("%s names shard %s outside the checkpoint directory" % (name, name_text(shard))))
            continue
        layout.weight_files.append(shard_path)
    listed = set(os.path.basename(p) for p in layout.weight_files)
    try:
        on_disk = [e for e in os.listdir(layout.root) if e.endswith(".safetensors")]
    except OSError:
        on_disk = []
    for extra in sorted(set(on_disk) - listed):
        problems.append(warn("%s is in the directory but the shard index does not name it" % name_text(extra)))
