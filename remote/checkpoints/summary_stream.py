"""A large target's inspect summary in one pass, shard after shard, keeping no listing: what
`specdeck inspect local:DIR` prints (without --all) where the checkpoint lies.

A Listing (listing.py) keeps every tensor for paging: 140,000 names of a 64-shard MoE target are
~15 MB of strings before any list. A summary needs only the first page, the name groups and the
totals, so here each shard's header is read, folded into those and dropped. The shard index is
checked without being kept either: written shard after shard (each in its header's order), it is
read beside the shards and compared with the text their names make (index_fast.walk_shards); in any
other order, each shard's names are digested in the index's order (index_fast.index_digests) and
compared with the digest of the shard's own names, in its header's order or sorted (as
transformers writes it). A name in two shards is found among the names' hashes, 8 bytes a tensor.

Only for what that covers: a directory whose index agrees exactly with the weight files beside
it, of a target (no drafter's checks). Anything else answers None, and the caller makes a
Listing, whose summary this one equals in everything but its handle (None: nothing is kept to
page). Standard library only.
"""

import os
import struct
from array import array
from bisect import bisect_left
from collections import Counter
from itertools import islice, repeat
from operator import eq

from ..core.heap import keep_large_blocks
from . import report
from .collect import Collected, FileInfo, check_total_size, read_file_columns
from .formats import EAGLE_FORMATS, decisive_names, detect_format
from .index_fast import index_digests, name_digest, walk_shards
from .listing import FIRST_PAGE_TENSORS, MAX_GROUPS, name_groups, tensor_entries
from .locate import load_json_file, resolve, weight_files_beside_index
from .problems import CheckpointIOError, name_text
from .roles import RoleNamer, marked_per_name


def summary(path, first_page_tensors=FIRST_PAGE_TENSORS, sha256=False, progress=None):
    """listing.open_listing(path).summary(...) without the listing, or None where this pass cannot
    answer for the exact path (see the module's text)."""
    if not os.path.isdir(path):
        return None
    keep_large_blocks()
    layout = resolve(path, [], read_index=False)
    paths = weight_files_beside_index(layout) if layout.index_path is not None else None
    if not paths:
        return None
    at_label = dict((os.path.relpath(p, layout.root), p) for p in paths)
    # An index written shard after shard is read beside the shards; any other, by its digests.
    got = _walked(path, at_label, first_page_tensors)
    if got is None:
        got = _digested(path, at_label, first_page_tensors)
    if got is None:
        return None
    got, fold = got
    hashes = sorted(fold.hashes)
    if any(map(eq, hashes, islice(hashes, 1, None))):
        return None  # a name in two shards (or two names of one hash): the exact path says which
    del hashes
    layout = got.layout
    check_total_size(os.path.basename(layout.index_path), fold.index, fold.tensor_bytes, got.problems)
    got.format = detect_format(fold.format_names, got.config)
    if got.format in EAGLE_FORMATS:
        return None  # a drafter's shapes are checked against each other: the listing's path
    got.dims = {"eagle12": False}
    namer = RoleNamer(got.format, got.dims)
    labels = [got.file_label(i) for i in range(len(got.files))]
    first = tensor_entries(namer, labels, *(list(column) for column in zip(*fold.first))) if fold.first else []
    result = report.finish_report(got, first, sha256, progress)
    groups = name_groups(Counter(dict(sorted(fold.combos.items(), key=lambda item: fold.first_name[item[0]]))), namer)
    result.update({"tensor_count": fold.count, "tensor_bytes": fold.tensor_bytes, "complete": len(first) == fold.count,
                   "handle": None, "groups": groups[:MAX_GROUPS], "group_count": len(groups)})
    return result


def _started(path):
    """A Collected as collect() starts one, its index not read (resolve's problems, config.json)."""
    problems = []
    layout = resolve(path, problems, read_index=False)
    got = Collected(path, layout, multi=True)
    got.problems = problems
    got.config = load_json_file(layout.config_path, "config.json", problems) if layout.config_path else None
    return got


def _shard(got, fold, at_label, label, check=None):
    """The columns of the shard `label`, read into got and fold; None when it is not there, when
    check(columns) is false, or when it is not read by the fast paths."""
    weight_file = at_label.get(label)
    if weight_file is None:
        return None
    try:
        columns, size, data_start, file_problems = read_file_columns(weight_file, name_text(label))
    except CheckpointIOError:
        return None
    if size is None or not columns.spans_are_bytes or (check is not None and not check(columns)):
        return None
    fold.add(columns, len(got.files))
    got.problems.extend(file_problems)
    got.files.append({"path": os.path.abspath(weight_file), "bytes": size})
    got.file_info.append(FileInfo(weight_file, data_start, size - data_start))
    got.layout.weight_files.append(weight_file)
    return columns


def _walked(path, at_label, first_page_tensors):
    """(got, fold) with the index read beside the shards (index_fast.walk_shards), or None."""
    got, fold = _started(path), _Fold(first_page_tensors)

    def names_of(label):
        columns = _shard(got, fold, at_label, label)
        return None if columns is None else columns.names

    walked = walk_shards(got.layout.index_path, names_of)
    if walked is None or set(walked[1]) != set(at_label):
        return None  # a file the index does not name
    fold.index = walked[0]
    return got, fold


def _digested(path, at_label, first_page_tensors):
    """(got, fold) with each shard's names held to its digest in the index, or None."""
    got = _started(path)
    digests = index_digests(got.layout.index_path)
    if digests is None:
        return None
    index, by_shard, shard_order = digests
    if set(at_label) != set(shard_order):
        return None  # a file the index does not name, or a shard that is not there
    fold = _Fold(first_page_tensors)
    fold.index = index
    for label in shard_order:
        if _shard(got, fold, at_label, label, lambda columns: _digest_agrees(columns.names, by_shard[label])) is None:
            return None
    return got, fold


def _digest_agrees(names, entry):
    """Whether the index's (count, digest) of a shard is its header's names, in their order or sorted."""
    count, digest = entry
    return count == len(names) and (digest == name_digest(names) or digest == name_digest(sorted(names)))


class _Fold(object):
    """The totals, the first page, the name groups and the format's witnesses of the shards so far."""

    def __init__(self, first_page_tensors):
        self.page = first_page_tensors
        self.count = 0
        self.tensor_bytes = 0
        self.first = []  # (name, dtype, shape, size, file index), the page's smallest names
        self.combos = Counter()
        self.first_name = {}  # combo -> its first name in name order
        self.hashes = array("d")  # every name's hash, 8 bytes a tensor
        self.format_names = {}
        self.index = None  # the index without its weight_map

    def add(self, columns, file_index):
        """Folds one shard in."""
        names, count = columns.names, len(columns)
        dtypes, shapes, sizes = columns.dtypes, columns.shapes, columns.bytes
        order = sorted(range(count), key=names.__getitem__)
        in_order = list(map(names.__getitem__, order))
        # A name in two shards is looked for once all are read, among the names' hashes as
        # doubles (which sort fastest): two names share one only by a chance of about n^2/2^54,
        # and that sends the summary to the exact path, which tells.
        self.hashes.frombytes(struct.pack("%dd" % count, *map(hash, names)))
        self.count += count
        self.tensor_bytes += sum(sizes)
        marked = marked_per_name(names)
        shard = Counter(zip(marked, dtypes, shapes, sizes))
        self.combos.update(shard)
        first_name = self.first_name
        # Each combo's first name, looked for only where this shard's names could come before it.
        if any(first_name.get(combo, "") >= in_order[0] or combo not in first_name for combo in shard):
            combos = list(zip(marked, dtypes, shapes, sizes))
            for combo, name in dict(zip(map(combos.__getitem__, reversed(order)), reversed(in_order))).items():
                known = first_name.get(combo)
                if known is None or name < known:
                    first_name[combo] = name
            del combos
        del marked, shard
        # The page's candidates: this shard's smallest names, below the page's last one once it is full.
        if not self.page:
            take = 0
        elif len(self.first) < self.page:
            take = self.page
        else:
            take = bisect_left(in_order, self.first[-1][0], 0, self.page)
        if take:
            page = [(names[i], dtypes[i], shapes[i], sizes[i], file_index) for i in order[:take]]
            self.first = sorted(self.first + page)[:self.page] if self.first else page
        self._witnesses(in_order, columns, order)

    def _witnesses(self, in_order, columns, order):
        """The names detect_format's answer depends on (formats.decisive_names), with their shapes."""
        for name in decisive_names(in_order):
            if name not in self.format_names:
                self.format_names[name] = columns.shapes[order[bisect_left(in_order, name)]]
