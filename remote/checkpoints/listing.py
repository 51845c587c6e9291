"""A checkpoint's tensors as a compact, paged listing: what `checkpoint.inspect` and
`checkpoint.tensors` serve, so that a 100,000-tensor MoE target crosses the wire page by page.

The tensors are kept as parallel columns (names, dtypes, shared shape tuples, sizes), sorted
by name once; a summary groups them by name pattern (`model.layers.{N}.mlp.experts.{E}.
down_proj.weight`: count, bytes, dtypes, shapes, role). Filtered and sorted views are index
lists, cached per (filter, sort). Listings are kept for a while under a handle so that paging
does not read the headers again. Standard library only.
"""

import os
from array import array
from bisect import bisect_left
import threading
from collections import Counter, OrderedDict
from itertools import repeat

from ..core.heap import keep_large_blocks
from . import report
from .collect import collect
from .roles import RoleNamer, digit_keys, marked_names, marked_of_key, pattern_text

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
    """One inspected checkpoint: the report without its tensors, and the tensors in columns.

    The columns are put in name order when a page, a view or a comparison first asks for them;
    the summary (all that `inspect` prints of a large checkpoint) reads its first page and its
    groups through the name order instead, and builds no sorted copy.
    """

    def __init__(self, got):
        columns = got.columns
        got.columns = None  # the listing's own from here
        order = got.name_order if got.name_order is not None else columns.name_order()
        got.name_order = None
        self._read = (columns, columns.stored_bytes(), order)  # in the order the files were read
        columns.ends = None  # begins and sizes say it
        self._sorted = None
        self._sorting = threading.Lock()
        self.count = len(order)
        self.multi = got.multi
        self.file_labels = [got.file_label(i) for i in range(len(got.files))] if got.multi else None
        self.namer = RoleNamer(got.format, got.dims, got.canonical)
        self.got = got
        sizes = self._read[1]
        self.tensor_bytes = sum(sizes) if None not in sizes else sum(s for s in sizes if s is not None)
        self.groups = self._group()
        self.views = OrderedDict()
        self.lock = threading.Lock()
        self.handle = None
        self.where = None

    def __len__(self):
        return self.count

    def sorted_columns(self):
        """The columns in name order (names, dtypes, shapes, sizes, begins, file_indexes), made the
        first time they are asked for."""
        with self._sorting:
            if self._sorted is None:
                columns, sizes, order = self._read
                begins = columns.begins
                if None in begins:
                    begins = [-1 if begin is None else begin for begin in begins]
                self._sorted = _Sorted(
                    list(map(columns.names.__getitem__, order)), list(map(columns.dtypes.__getitem__, order)),
                    list(map(columns.shapes.__getitem__, order)), list(map(sizes.__getitem__, order)),
                    # Where each tensor's data begins in its file's data section (-1: unknown), for
                    # compare's look at the values; 8 bytes a tensor.
                    array("q", map(begins.__getitem__, order)),
                    list(map(columns.file_indexes.__getitem__, order)) if self.multi else None)
                self._read = None
            return self._sorted

    def _in_name_order(self, start, end):
        """(names, dtypes, shapes, sizes, file indexes) of the tensors at positions start..end of
        name order, from whichever columns are kept."""
        if self._sorted is not None:
            s = self._sorted
            return (s.names[start:end], s.dtypes[start:end], s.shapes[start:end], s.sizes[start:end],
                    s.file_indexes[start:end] if s.file_indexes is not None else None)
        columns, sizes, order = self._read
        chosen = order[start:end]
        return (list(map(columns.names.__getitem__, chosen)), list(map(columns.dtypes.__getitem__, chosen)),
                list(map(columns.shapes.__getitem__, chosen)), list(map(sizes.__getitem__, chosen)),
                list(map(columns.file_indexes.__getitem__, chosen)) if self.multi else None)

    def _group(self):
        """The name patterns with their counts, bytes, dtypes, first shapes and roles, largest first."""
        combos = Counter()
        for start in range(0, self.count, GROUP_BLOCK_TENSORS):
            names, dtypes, shapes, sizes, _ = self._in_name_order(start, start + GROUP_BLOCK_TENSORS)
            count_combos(combos, names, dtypes, shapes, sizes)
        return name_groups(combos, self.namer)

    def _entries(self, names, dtypes, shapes, sizes, file_indexes):
        return tensor_entries(self.namer, self.file_labels, names, dtypes, shapes, sizes, file_indexes)

    def tensor(self, index):
        """The tensor at position `index` of name order, as the wire's dict."""
        return self._entries(*self._in_name_order(index, index + 1))[0]

    def bare_tensors(self):
        """Every tensor as {name, dtype, shape}, in name order: what a comparison matches them by
        (tensors of one shape share its list)."""
        s = self.sorted_columns()
        shape_lists = dict((shape, list(shape)) for shape in set(s.shapes) if shape is not None)
        shape_lists[None] = None
        return [{"name": name, "dtype": dtype, "shape": shape}
                for name, dtype, shape in zip(s.names, s.dtypes, map(shape_lists.__getitem__, s.shapes))]

    def unreadable_names(self, readable_file):
        """The names of the tensors whose bytes cannot be read: outside their file's data section,
        or in a file for which readable_file(path) is false."""
        s = self.sorted_columns()
        limits = [info.data_bytes if info.data_start is not None and readable_file(info.path) else -1
                  for info in self.got.file_info]
        files = s.file_indexes if s.file_indexes is not None else repeat(0)
        return set(name for name, begin, size, file_index in zip(s.names, s.begins, s.sizes, files)
                   if begin < 0 or size is None or begin + size > limits[file_index])

    def data_span(self, name):
        """(file path, offset in the file, bytes) of the tensor named `name`, or None when it is not
        here or its data does not lie wholly inside its file's data section."""
        s = self.sorted_columns()
        index = bisect_left(s.names, name)
        if index == len(s.names) or s.names[index] != name:
            return None
        begin, size = s.begins[index], s.sizes[index]
        info = self.got.file_info[s.file_indexes[index] if s.file_indexes is not None else 0]
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
            names, role = self.sorted_columns().names, self.namer.role
            indexes = [i for i, name in enumerate(names) if needle in name.lower() or needle in role(name).lower()]
        else:
            indexes = range(self.count)
        if sort == "size":
            sizes = self.sorted_columns().sizes
            indexes = sorted(indexes, key=lambda i: -(sizes[i] or 0))  # stable: by name within a size
        elif sort == "dtype":
            dtypes = self.sorted_columns().dtypes
            indexes = sorted(indexes, key=lambda i: dtypes[i] or "")
        with self.lock:
            self.views[key] = indexes
            while len(self.views) > VIEWS_KEPT:
                self.views.popitem(last=False)
        return indexes

    def page(self, offset=0, limit=FIRST_PAGE_TENSORS, filter_text="", sort="name"):
        indexes = self.view(filter_text, sort)
        chosen = indexes[offset:offset + limit]
        if isinstance(chosen, range) and chosen.step == 1:
            tensors = self._entries(*self._in_name_order(chosen.start, chosen.stop))
        else:
            s = self.sorted_columns()
            tensors = self._entries(*(None if column is None else list(map(column.__getitem__, chosen))
                                      for column in (s.names, s.dtypes, s.shapes, s.sizes, s.file_indexes)))
        return {"handle": self.handle, "offset": offset, "total": len(indexes), "tensor_count": self.count,
                "filter": filter_text or "", "sort": sort, "tensors": tensors}

    def summary(self, first_page_tensors=FIRST_PAGE_TENSORS, sha256=False, progress=None):
        """The inspect report with the first page of tensors, the name groups and a handle."""
        first = self._entries(*self._in_name_order(0, min(first_page_tensors, self.count)))
        result = report.finish_report(self.got, first, sha256, progress)
        result.update({"tensor_count": self.count, "tensor_bytes": self.tensor_bytes,
                       "complete": len(first) == self.count, "handle": self.handle,
                       "groups": self.groups[:MAX_GROUPS], "group_count": len(self.groups)})
        return result


def count_combos(combos, names, dtypes, shapes, sizes):
    """Adds tensors (in name order) to `combos`, a Counter of (marked name, dtype, shape, size), in
    C. Names that differ only in their digits are counted under one key and the key marked once;
    where digits are parts of words (w1, fp8), name by name."""
    keys = digit_keys(names)
    marked = None if keys is None else dict((key, marked_of_key(key)) for key in dict.fromkeys(keys))
    if marked is None or None in marked.values():
        combos.update(zip(marked_names(names), dtypes, shapes, sizes))
        return
    for (key, dtype, shape, size), count in Counter(zip(keys, dtypes, shapes, sizes)).items():
        combos[(marked[key], dtype, shape, size)] += count


def name_groups(combos, namer):
    """The name patterns of `combos` (in name order of their first tensor) with their counts,
    bytes, dtypes, first shapes and roles, largest first."""
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
                       "role": namer.pattern_role(marked)})
    groups.sort(key=lambda g: (-g["bytes"], -g["count"], g["pattern"]))
    return groups


def tensor_entries(namer, labels, names, dtypes, shapes, sizes, file_indexes):
    """The wire's tensor dicts of these columns' tensors (`file` where there are several files)."""
    role = namer.role
    entries = [{"name": name, "dtype": dtype, "shape": list(shape) if shape is not None else None,
                "bytes": size, "role": role(name)} for name, dtype, shape, size in zip(names, dtypes, shapes, sizes)]
    if file_indexes is not None:
        for entry, file_index in zip(entries, file_indexes):
            entry["file"] = labels[file_index]
    return entries


class _Sorted(object):
    """A listing's columns in name order."""

    __slots__ = ("names", "dtypes", "shapes", "sizes", "begins", "file_indexes")

    def __init__(self, names, dtypes, shapes, sizes, begins, file_indexes):
        self.names = names
        self.dtypes = dtypes
        self.shapes = shapes
        self.sizes = sizes
        self.begins = begins
        self.file_indexes = file_indexes


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
    keep_large_blocks()
    where = os.path.abspath(path)
    signature = _signature(where)
    with _KEPT_LOCK:
        for handle, (listing, kept_signature) in _KEPT.items():
            if listing.where == where and kept_signature == signature:
                _KEPT.move_to_end(handle)
                return listing
    import secrets  # (a summary made without a listing never needs it)

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
