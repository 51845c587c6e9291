"""A checkpoint read from disk: every weight file's header, the tensors a loader would see (by
the shard index when there is one, checked against it), the format, and an EAGLE-3 drafter's
dimensions and checks. report.py and listing.py shape what this collects.

The tensors are kept as columns (columns.py), so that a 64-shard MoE target's 100,000+
tensors cost a few lists and are checked against the index with whole-list operations.
Standard library only, Python 3.9+.
"""

import os
from bisect import bisect_left
from collections import Counter, deque
from collections.abc import Mapping
from itertools import accumulate
from operator import add, sub

from .columns import TensorColumns
from .eagle3 import check_eagle3_shapes, derive_eagle3, effective_norm_before_residual
from .formats import EAGLE_FORMATS, canonical_names, detect_format, is_eagle3_layout, is_eagle12
from .index_fast import agreeing_index
from .locate import load_json_file, resolve, resolve_index, weight_files_beside_index
from .problems import CheckpointIOError, CheckpointNotFound, HeaderError, count_text, err, io_error, name_text, warn
from .safetensors_header import read_header_columns
from .vocab_maps import check_vocab_maps

# At most this many problems of one file are listed one by one.
MAX_PROBLEMS_PER_FILE = 40


def _cap(problems, label):
    if len(problems) <= MAX_PROBLEMS_PER_FILE:
        return problems
    errors = sum(1 for p in problems[MAX_PROBLEMS_PER_FILE:] if p["level"] == "error")
    return problems[:MAX_PROBLEMS_PER_FILE] + [err("%s: %s more problems not listed (%s errors)"
                                                   % (label, count_text(len(problems) - MAX_PROBLEMS_PER_FILE),
                                                      count_text(errors)))]


class FileInfo(object):
    """One weight file as read: where its data section starts and how long it is."""

    __slots__ = ("path", "data_start", "data_bytes")

    def __init__(self, path, data_start, data_bytes):
        self.path = path
        self.data_start = data_start
        self.data_bytes = data_bytes


def read_file_columns(path, label):
    """(TensorColumns, file size, data start, its problems worded under its name) of one file."""
    try:
        columns, file_problems, data_start, size = read_header_columns(path)
    except HeaderError as exc:
        return TensorColumns(), None, None, [err("%s: %s" % (label, exc))]
    for p in file_problems:
        p["message"] = "%s: %s" % (label, p["message"])
    return columns, size, data_start, _cap(file_problems, label)


def _missing(path):
    """Whether nothing is at `path` (a symlink loop is something: reading it says what it is)."""
    try:
        os.stat(path)
    except (FileNotFoundError, NotADirectoryError):
        return True
    except OSError:
        pass
    return False


class Collected(object):
    """A checkpoint read from disk, before it is shaped into a report or a listing.

    `columns` are the tensors a loader would see, with `file_indexes`; `files[i]` is the
    report's file dict and `file_info[i]` where its data lies.
    """

    def __init__(self, path, layout, multi):
        self.path = path
        self.layout = layout
        self.multi = multi
        self.files = []
        self.file_info = []
        self.columns = TensorColumns()
        self.problems = []
        self.config = None
        self.format = "unknown"
        self.eagle3 = None
        self.dims = {}
        self.canonical = None  # {name: speculators-layout name} where that differs from the name
        self.name_order = None  # the columns' positions in name order, when collect worked them out

    def file_label(self, index):
        info = self.file_info[index]
        return os.path.relpath(info.path, self.layout.root) if self.multi else None

    def tensor_dict(self, index):
        """The tensor at `index` as the dict the eagle3 checks and the vocabulary reader take."""
        columns = self.columns
        info = self.file_info[columns.file_indexes[index]]
        shape = columns.shapes[index]
        return {"name": columns.names[index], "dtype": columns.dtypes[index],
                "shape": list(shape) if shape is not None else None, "bytes": columns.bytes[index],
                "begin": columns.begins[index], "end": columns.ends[index], "file": info.path,
                "data_start": info.data_start, "data_bytes": info.data_bytes}


class _ShapesByName(Mapping):
    """{name: shape} over the columns themselves (names unique, every shape known): what the
    format is told by is a few names and prefixes looked for, found by bisection in name order,
    not a second dict of 100,000+ entries."""

    def __init__(self, names, shapes, order):
        self.names = names
        self.shapes = shapes
        self.order = order
        self.sorted_names = list(map(names.__getitem__, order))

    def _position(self, name):
        at = bisect_left(self.sorted_names, name)
        return at if at < len(self.sorted_names) and self.sorted_names[at] == name else None

    def __getitem__(self, name):
        at = self._position(name)
        if at is None:
            raise KeyError(name)
        return self.shapes[self.order[at]]

    def __contains__(self, name):
        return self._position(name) is not None

    def any_starts(self, prefixes):
        """Whether a name starts with the prefix (or with one of a tuple of them)."""
        for prefix in (prefixes if isinstance(prefixes, tuple) else (prefixes,)):
            at = bisect_left(self.sorted_names, prefix)
            if at < len(self.sorted_names) and self.sorted_names[at].startswith(prefix):
                return True
        return False

    def __iter__(self):
        return iter(self.names)

    def __len__(self):
        return len(self.names)


def collect(path):
    """Read a checkpoint's files, pick the tensors a loader would see, detect its format and
    check an EAGLE-3 drafter's shapes. Raises CheckpointIOError when the path cannot be read."""
    path = os.fspath(path)
    try:
        os.stat(path)
    except (FileNotFoundError, NotADirectoryError):
        raise CheckpointNotFound("%s does not exist" % path)
    except OSError as exc:  # a symlink loop, ...
        raise io_error(path, exc)
    problems = []
    layout = resolve(path, problems, read_index=False)
    read = {}  # weight file -> what reading its header gave (read once, whichever path uses it)
    agreed = _agreeing_index(layout, read) if layout.index_path is not None else None
    if agreed is None and layout.index_path is not None:
        resolve_index(layout, problems)
    multi = len(layout.weight_files) > 1 or layout.index is not None or agreed is not None
    got = Collected(path, layout, multi)
    got.problems = problems
    got.config = load_json_file(layout.config_path, "config.json", problems) if layout.config_path else None
    by_file = {}
    claims = _IndexClaims(layout) if layout.index is not None else None
    for weight_file in layout.weight_files:
        label = name_text(os.path.relpath(weight_file, layout.root) if multi else os.path.basename(weight_file))
        if weight_file not in read and _missing(weight_file):
            continue  # named as missing with the tensors the index gives it
        try:
            columns, size, data_start, file_problems = read.pop(weight_file, None) or read_file_columns(weight_file, label)
        except CheckpointIOError as exc:
            if not multi:
                raise
            problems.append(err("cannot read %s: %s" % (label, exc.reason or exc)))
            continue
        problems.extend(file_problems)
        if size is None:  # the header was unreadable; the file still counts (and is hashed)
            size = os.path.getsize(weight_file)
        index = len(got.files)
        got.files.append({"path": os.path.abspath(weight_file), "bytes": size})
        got.file_info.append(FileInfo(weight_file, data_start, size - (data_start or size)))
        by_file[weight_file] = (index, columns)
        if claims is not None:
            claims.claim(weight_file, columns)
    if agreed is not None:
        got.columns, got.name_order = _in_index_order(agreed, by_file)
        check_total_size(os.path.basename(layout.index_path), agreed.index, got.columns.span_bytes(), problems)
    else:
        got.columns = _select(layout, by_file, problems, claims)
    del by_file, read
    layout.index = None  # checked: its weight_map (as large as the listing) is not kept with it
    columns = got.columns
    if None in columns.shapes:
        shapes = dict((name, shape) for name, shape in zip(columns.names, columns.shapes) if shape is not None)
    else:
        if got.name_order is None:
            got.name_order = columns.name_order()  # the listing's order too
        shapes = _ShapesByName(columns.names, columns.shapes, got.name_order)
    got.format = detect_format(shapes, got.config)
    if got.format in EAGLE_FORMATS:
        canon_of = canonical_names(list(shapes), got.format)
        got.canonical = dict((n, c) for n, c in canon_of.items() if n != c)
        by_canon = dict((canon_of[name], got.tensor_dict(i)) for i, name in enumerate(columns.names) if name in canon_of)
        got.eagle3, got.dims = _eagle3_section(got.format, by_canon, got.config, problems)
    else:
        got.dims = {"eagle12": False}
    return got


def _eagle3_section(fmt, by_canon, config, problems):
    """(the report's eagle3 dict or None, the sizes roles are worded with), checking as it goes."""
    shapes = dict((c, t["shape"]) for c, t in by_canon.items())
    display = dict((c, t["name"]) for c, t in by_canon.items())
    dims = {"eagle12": fmt == "eagle" and is_eagle12(shapes)}
    if dims["eagle12"]:
        dims["hidden_size"] = shapes["fc.weight"][0]
        problems.append(warn("this is an EAGLE-1/2 drafter (fc fuses 2 x hidden: token embedding + the target's "
                             "last hidden state), not EAGLE-3"))
        return None, dims
    if not is_eagle3_layout(fmt, shapes):
        return None, dims
    eagle3 = derive_eagle3(shapes, config, problems)
    dims.update(eagle3)
    check_eagle3_shapes(shapes, display, dims, problems, fmt)
    d2t, t2d = by_canon.get("d2t"), by_canon.get("t2d")
    if d2t is not None and _readable(d2t) and (t2d is None or _readable(t2d)):
        eagle3["vocab_map_sha256"] = check_vocab_maps(d2t, t2d, dims, display, problems)
    eagle3["embed_tokens"] = "present" if "embed_tokens.weight" in shapes else "shared from the target at load time"
    eagle3["norm_before_residual"] = effective_norm_before_residual(fmt, config)
    return eagle3, dims


def _readable(tensor):
    """Whether a tensor's bytes are all inside its file (so its data can be read at all)."""
    return (tensor["begin"] is not None and tensor["bytes"] is not None
            and tensor["begin"] + tensor["bytes"] <= tensor["data_bytes"])


class _IndexClaims(object):
    """A shard index checked shard by shard as each one is read: a shard that holds exactly the
    tensors the index gives it is marked agreed, and its names leave the index's weight_map (as
    large as the listing: a 100,000-tensor one is not kept beside the listing's own names)."""

    def __init__(self, layout):
        self.weight_map = layout.index["weight_map"]
        self.counts = Counter(self.weight_map.values())  # shards in the order the index first names them
        self.shard_of = dict((os.path.normpath(os.path.join(layout.root, shard)), shard) for shard in self.counts
                             if shard and "\0" not in shard)
        self.agreed = set()

    def claim(self, path, columns):
        shard = self.shard_of.get(path)
        weight_map, count = self.weight_map, self.counts.get(shard)
        # Names in one file are unique: when each maps to this shard and the counts agree, the
        # shard holds exactly the tensors the index gives it.
        if shard is not None and len(columns) == count and list(map(weight_map.get, columns.names)).count(shard) == count:
            self.agreed.add(path)
            deque(map(weight_map.pop, columns.names), 0)


def _select(layout, by_file, problems, claims):
    """The tensors a loader would see (by the shard index when there is one: `claims`, checked
    as the shards were read), as columns with each tensor's file index."""
    selected = TensorColumns()
    selected.file_indexes = []
    if layout.index is None:
        seen = {}
        for path, (file_index, columns) in by_file.items():
            if seen.keys().isdisjoint(columns.names):  # the common case: no name in two files
                selected.extend(columns, file_index)
                seen.update(dict.fromkeys(columns.names, path))
                continue
            keep = []
            for i, name in enumerate(columns.names):
                if name in seen:
                    problems.append(warn("tensor %r is in both %s and %s" % (
                        name, name_text(os.path.basename(seen[name])), name_text(os.path.basename(path)))))
                    continue
                seen[name] = path
                keep.append(i)
            selected.extend(columns, file_index, keep)
        return selected
    index_name = os.path.basename(layout.index_path)
    weight_map = claims.weight_map
    per_shard_counts = claims.counts
    per_shard = None  # {shard: its names in index order}, built only if a shard disagrees with the index
    listed = set(layout.weight_files)
    for shard, count in per_shard_counts.items():
        shard_path = os.path.normpath(os.path.join(layout.root, shard)) if shard and "\0" not in shard else None
        if shard_path not in listed:
            continue  # refused when the index was read (not a file name, or outside the directory)
        if shard_path not in by_file:
            if _missing(shard_path):
                first = next(name for name, where in weight_map.items() if where == shard)
                problems.append(err("%s names shard %s for %s tensors (e.g. %r), but the file is missing"
                                    % (index_name, name_text(shard), count_text(count), first)))
            continue
        file_index, columns = by_file[shard_path]
        if shard_path in claims.agreed:
            selected.extend(columns, file_index)
            continue
        if per_shard is None:
            per_shard = {}
            for name, where in weight_map.items():
                per_shard.setdefault(where, []).append(name)
        names = per_shard[shard]
        in_shard = dict(zip(columns.names, range(len(columns))))
        lacking = [n for n in names if n not in in_shard]
        for name in lacking[:10]:
            problems.append(err("%s maps tensor %r to %s, which has no tensor %r"
                                % (index_name, name, name_text(shard), name)))
        if len(lacking) > 10:
            problems.append(err("%s maps %s more tensors to %s that it does not hold"
                                % (index_name, count_text(len(lacking) - 10), name_text(shard))))
        selected.extend(columns, file_index, [in_shard[n] for n in names if n in in_shard])
        if len(in_shard) > len(names) - len(lacking):
            unlisted = sorted(set(in_shard) - set(names))
            for name in unlisted[:10]:
                problems.append(warn("%s holds tensor %r, which %s does not list; loaders that follow the index "
                                     "ignore it" % (name_text(shard), name, index_name)))
    check_total_size(index_name, layout.index, selected.span_bytes(), problems)
    return selected


def check_total_size(index_name, index, stored, problems):
    """A warning when the index's metadata says another total_size than the `stored` bytes."""
    metadata = index.get("metadata")
    total_size = metadata.get("total_size") if isinstance(metadata, dict) else None
    if isinstance(total_size, int) and not isinstance(total_size, bool):
        if total_size != stored:
            problems.append(warn("%s says total_size %s bytes, the tensors it lists add up to %s"
                                 % (index_name, count_text(total_size), count_text(stored))))


class _Agreed(object):
    """A shard index found to agree with its files (index_fast): the index without its weight_map,
    and the files' tensors in the order they were read, with their name order."""

    __slots__ = ("index", "columns", "order", "read_order")

    def __init__(self, index, columns, order, read_order):
        self.index = index
        self.columns = columns
        self.order = order
        self.read_order = read_order


def _agreeing_index(layout, read):
    """_Agreed when the shard index maps exactly the tensors of the weight files beside it (read
    into `read` either way, for the exact path to use), with layout.weight_files set in the order
    the index names them; else None."""
    paths = weight_files_beside_index(layout)
    if not paths:
        return None
    labels = [os.path.relpath(p, layout.root) for p in paths]
    columns = TensorColumns()
    for file_index, (path, label) in enumerate(zip(paths, labels)):
        try:
            read[path] = read_file_columns(path, name_text(label))
        except CheckpointIOError:
            return None
        columns.extend(read[path][0], file_index)
    order = columns.name_order()
    found = agreeing_index(layout.index_path, labels, columns, order)
    if found is None:
        return None
    index, files = found
    layout.weight_files = [paths[i] for i in files]
    return _Agreed(index, columns, order, paths)


def _in_index_order(agreed, by_file):
    """(the agreed files' tensors as columns in the index's order of files, their name order)."""
    columns, order, read_order = agreed.columns, agreed.order, agreed.read_order
    new_index = [by_file[path][0] for path in read_order]  # a file's place in got.files
    if new_index == list(range(len(new_index))):
        return columns, order  # read in the order the index names the files
    sizes = [len(by_file[path][1]) for path in read_order]
    old_starts, new_starts = list(accumulate([0] + sizes[:-1])), [0] * len(sizes)
    moved = TensorColumns()
    for read_index in sorted(range(len(sizes)), key=new_index.__getitem__):
        new_starts[read_index] = len(moved)
        moved.extend(by_file[read_order[read_index]][1], new_index[read_index])
    # A tensor's new position is its old one shifted by as much as its file moved.
    shift = list(map(sub, new_starts, old_starts))
    return moved, list(map(add, order, map(shift.__getitem__, map(columns.file_indexes.__getitem__, order))))
