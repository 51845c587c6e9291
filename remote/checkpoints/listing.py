"""A checkpoint's tensors as a compact, paged listing: what `checkpoint.inspect` and
`checkpoint.tensors` serve, so that a 100,000-tensor MoE target crosses the wire page by page.

The tensors are kept as parallel columns (names, dtypes, shared shape tuples, sizes), sorted
by name once; a summary groups them by name pattern (`model.layers.{N}.mlp.experts.{E}.
down_proj.weight`: count, bytes, dtypes, shapes, role). Filtered and sorted views are index
lists, cached per (filter, sort). Listings are kept for a while under a handle so that paging
does not read the headers again. Standard library only.
"""

import os
import secrets
from array import array
from bisect import bisect_left
import threading
from collections import Counter, OrderedDict
from itertools import repeat

from . import report
from .collect import collect
from .roles import RoleNamer, marked_names, pattern_text

SORT_KEYS = ("name", "size", "dtype")
# The first page `checkpoint.inspect` returns: every tensor of any drafter and of most dense
# targets, so that their report stays complete.
FIRST_PAGE_TENSORS = 2000
MAX_PAGE_TENSORS = 5000
# Groups listed in a summary; a checkpoint of unpatterned names has as many groups as tensors.
MAX_GROUPS = 200
SHAPES_PER_GROUP = 3
# Listings kept for paging, by the tensors they hold (a 1,000,000-tensor one is ~200 MB).
MAX_KEPT_TENSORS = 2500000
MAX_KEPT_LISTINGS = 8
VIEWS_KEPT = 4
# Names marked for grouping a block at a time: the marked copies cost as much memory as the names.
GROUP_BLOCK_TENSORS = 16384


class Listing(object):
    """One inspected checkpoint: the report without its tensors, and the tensors in columns."""

    def __init__(self, got):
        columns = got.columns
        got.columns = None  # the sorted columns below replace them
        order = got.name_order if got.name_order is not None else columns.name_order()
        got.name_order = None
        sizes = columns.stored_bytes()
        self.names = list(map(columns.names.__getitem__, order))
        self.dtypes = list(map(columns.dtypes.__getitem__, order))
        self.shapes = list(map(columns.shapes.__getitem__, order))
        self.sizes = list(map(sizes.__getitem__, order))
        # Where each tensor's data begins in its file's data section (-1: unknown), for compare's
        # look at the values; 8 bytes a tensor.
        begins = columns.begins
        if None in begins:
            begins = [-1 if begin is None else begin for begin in begins]
        self.begins = array("q", map(begins.__getitem__, order))
        self.file_indexes = list(map(columns.file_indexes.__getitem__, order)) if got.multi else None
        del columns, order, sizes
        self.file_labels = [got.file_label(i) for i in range(len(got.files))] if got.multi else None
        self.namer = RoleNamer(got.format, got.dims, got.canonical)
        self.got = got
        self.tensor_bytes = sum(self.sizes) if None not in self.sizes else sum(s for s in self.sizes if s is not None)
        self.groups = self._group()
        self.views = OrderedDict()
        self.lock = threading.Lock()
        self.handle = None
        self.where = None

    def __len__(self):
        return len(self.names)

    def _group(self):
        """The name patterns with their counts, bytes, dtypes, first shapes and roles, largest first."""
        # Tensors counted by (pattern, dtype, shape, size) in C, a block of names at a time (the
        # marked names are as large as the names); a MoE target has a few hundred such.
        combos = Counter()
        for start in range(0, len(self.names), GROUP_BLOCK_TENSORS):
            end = start + GROUP_BLOCK_TENSORS
            combos.update(zip(marked_names(self.names[start:end]), self.dtypes[start:end], self.shapes[start:end],
                              self.sizes[start:end]))
        by_pattern = {}
        # In name order of first appearance, as the dtypes and shapes of a group are listed.
        for (marked, dtype, shape, size), count in combos.items():
            group = by_pattern.get(marked)
            if group is None:
                group = by_pattern[marked] = [0, 0, {}, {}]
            group[0] += count
            group[1] += (size or 0) * count
            group[2][dtype] = True
            if len(group[3]) <= SHAPES_PER_GROUP:
                group[3][shape] = True
        groups = []
        for marked, (count, size, dtypes, shapes) in by_pattern.items():
            groups.append({"pattern": pattern_text(marked), "count": count, "bytes": size,
                           "dtypes": [d for d in dtypes if d is not None],
                           "shapes": [list(s) for s in list(shapes)[:SHAPES_PER_GROUP] if s is not None],
                           "more_shapes": len(shapes) > SHAPES_PER_GROUP,
                           "role": self.namer.pattern_role(marked)})
        groups.sort(key=lambda g: (-g["bytes"], -g["count"], g["pattern"]))
        return groups

    def tensor(self, index):
        shape = self.shapes[index]
        entry = {"name": self.names[index], "dtype": self.dtypes[index],
                 "shape": list(shape) if shape is not None else None,
                 "bytes": self.sizes[index], "role": self.namer.role(self.names[index])}
        if self.file_indexes is not None:
            entry["file"] = self.file_labels[self.file_indexes[index]]
        return entry

    def bare_tensors(self):
        """Every tensor as {name, dtype, shape}, in name order: what a comparison matches them by
        (tensors of one shape share its list)."""
        shape_lists = dict((shape, list(shape)) for shape in set(self.shapes) if shape is not None)
        shape_lists[None] = None
        return [{"name": name, "dtype": dtype, "shape": shape}
                for name, dtype, shape in zip(self.names, self.dtypes, map(shape_lists.__getitem__, self.shapes))]

    def unreadable_names(self, readable_file):
        """The names of the tensors whose bytes cannot be read: outside their file's data section,
        or in a file for which readable_file(path) is false."""
        limits = [info.data_bytes if info.data_start is not None and readable_file(info.path) else -1
                  for info in self.got.file_info]
        files = self.file_indexes if self.file_indexes is not None else repeat(0)
        return set(name for name, begin, size, file_index in zip(self.names, self.begins, self.sizes, files)
                   if begin < 0 or size is None or begin + size > limits[file_index])

    def data_span(self, name):
        """(file path, offset in the file, bytes) of the tensor named `name`, or None when it is not
        here or its data does not lie wholly inside its file's data section."""
        index = bisect_left(self.names, name)
        if index == len(self.names) or self.names[index] != name:
            return None
        begin, size = self.begins[index], self.sizes[index]
        info = self.got.file_info[self.file_indexes[index] if self.file_indexes is not None else 0]
        if begin < 0 or size is None or info.data_start is None or begin + size > info.data_bytes:
            return None
        return info.path, info.data_start + begin, size

    def view(self, filter_text="", sort="name"):
        """Tensor indexes matching `filter_text` (in the name or the role), in `sort` order."""
        needle = (filter_text or "").strip().lower()
        key = (needle, sort)
        with self.lock:
            cached = self.views.get(key)
            if cached is not None:
                self.views.move_to_end(key)
                return cached
        if sort not in SORT_KEYS:
            raise ValueError("sort must be one of %s" % ", ".join(SORT_KEYS))
        if needle:
            names, role = self.names, self.namer.role
            indexes = [i for i, name in enumerate(names) if needle in name.lower() or needle in role(name).lower()]
        else:
            indexes = range(len(self.names))
        if sort == "size":
            sizes = self.sizes
            indexes = sorted(indexes, key=lambda i: -(sizes[i] or 0))  # stable: by name within a size
        elif sort == "dtype":
            dtypes = self.dtypes
            indexes = sorted(indexes, key=lambda i: dtypes[i] or "")
        with self.lock:
            self.views[key] = indexes
            while len(self.views) > VIEWS_KEPT:
                self.views.popitem(last=False)
        return indexes

    def page(self, offset=0, limit=FIRST_PAGE_TENSORS, filter_text="", sort="name"):
        indexes = self.view(filter_text, sort)
        chosen = indexes[offset:offset + limit]
        return {"handle": self.handle, "offset": offset, "total": len(indexes), "tensor_count": len(self.names),
                "filter": filter_text or "", "sort": sort, "tensors": [self.tensor(i) for i in chosen]}

    def summary(self, first_page_tensors=FIRST_PAGE_TENSORS, sha256=False, progress=None):
        """The inspect report with the first page of tensors, the name groups and a handle."""
        first = [self.tensor(i) for i in range(min(first_page_tensors, len(self.names)))]
        result = report.finish_report(self.got, first, sha256, progress)
        result.update({"tensor_count": len(self.names), "tensor_bytes": self.tensor_bytes,
                       "complete": len(first) == len(self.names), "handle": self.handle,
                       "groups": self.groups[:MAX_GROUPS], "group_count": len(self.groups)})
        return result


# ---------------------------------------------------------------------------------------------
# Listings kept for paging


_KEPT = OrderedDict()  # handle -> (Listing, signature)
_KEPT_LOCK = threading.Lock()


def _signature(path):
    """What changes when a checkpoint is rewritten: size and mtime of what lies at the path."""
    entries = []
    candidates = [path]
    if os.path.isdir(path):
        try:
            candidates += [os.path.join(path, e) for e in sorted(os.listdir(path))]
        except OSError:
            pass
    for candidate in candidates:
        try:
            st = os.stat(candidate)
        except OSError:
            continue
        entries.append((candidate, st.st_size, st.st_mtime_ns))
    return tuple(entries)


def open_listing(path):
    """The listing of the checkpoint at `path`: kept from before when nothing there changed,
    else read now and kept under a new handle."""
    where = os.path.abspath(path)
    signature = _signature(where)
    with _KEPT_LOCK:
        for handle, (listing, kept_signature) in _KEPT.items():
            if listing.where == where and kept_signature == signature:
                _KEPT.move_to_end(handle)
                return listing
    listing = Listing(collect(path))
    listing.where = where
    listing.handle = secrets.token_hex(8)
    with _KEPT_LOCK:
        _KEPT[listing.handle] = (listing, signature)
        while len(_KEPT) > 1 and (len(_KEPT) > MAX_KEPT_LISTINGS
                                  or sum(len(kept) for kept, _ in _KEPT.values()) > MAX_KEPT_TENSORS):
            _KEPT.popitem(last=False)
    return listing


def kept_listing(handle):
    """The listing kept under `handle`, or None when it was dropped (or never was)."""
    with _KEPT_LOCK:
        entry = _KEPT.get(handle)
        if entry is None:
            return None
        _KEPT.move_to_end(handle)
        return entry[0]
