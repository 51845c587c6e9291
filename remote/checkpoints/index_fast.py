"""A shard index checked against its shards' headers without parsing its weight_map: the fast path
for the index of a 64-shard MoE target, whose weight_map names 100,000+ tensors.

Parsed, that weight_map is a dict as large as the listing (a key string and an entry per tensor,
~30 MB for 140,000 tensors), built only to be compared with the headers and thrown away. Here the
headers are read first, and the text the weight_map must then be, in the order the common writers
use (every name sorted, as transformers writes it; or shard after shard, each in its header's
order), is made from the headers' names and compared with the file's bytes a block at a time: no
object per entry. The index agrees exactly when the bytes are equal, the rest of the file (its
metadata) parses as JSON with one weight_map, and no string holds a character JSON would escape.

For a summary that keeps no listing (summary_stream.py) the same index is read as it streams:
ShardWalk compares it shard by shard beside the shards' headers, and index_digests gives each
shard's count and a digest of its names in the index's order, a block at a time.

Anything else (another order or spelling, an escape, a name in two shards, a shard the index
does not name) answers None, and the exact path (locate.resolve_index and collect's claims)
reads the index and words what is wrong. Standard library only.
"""

import json
import os
import re
from bisect import bisect_left, bisect_right
from itertools import groupby, islice
from operator import eq, ge

from ..core.regular_files import open_regular

_KEY = b'"weight_map"'
_SPACE = b" \t\n\r"
# The part of an index before its weight_map (and after it) is its metadata: small.
_HEAD_BYTES = 64 * 1024
# What JSON writes escaped: a quote, a backslash, a control character.
_ESCAPED = b'"\\' + bytes(range(32))
# Bytes compared at a time (and the entries made into text at a time).
_BLOCK_ENTRIES = 16384


class _Spelling(object):
    """How the weight_map's entries are spelled: `"name"` + kv + `"shard"` + sep + `"name"` ..."""

    def __init__(self, kv, sep):
        self.kv = '"%s"' % kv  # closes a name, opens its shard
        self.sep = '"%s"' % sep  # closes a shard, opens the next name


def _skip_space(data, at):
    while at < len(data) and data[at] in _SPACE:
        at += 1
    return at


def _weight_map_start(head):
    """(where the weight_map's brace is, where its first entry's quote is, the entries' spelling)
    in the start of an index, or None."""
    key = head.find(_KEY)
    colon = _skip_space(head, key + len(_KEY)) if key >= 0 else -1
    brace = _skip_space(head, colon + 1) if colon >= 0 and head[colon:colon + 1] == b":" else -1
    first = _skip_space(head, brace + 1) if brace >= 0 and head[brace:brace + 1] == b"{" else -1
    if first < 0 or head[first:first + 1] != b'"':
        return None
    spelling = _spelling(head, first)
    return None if spelling is None else (brace, first, spelling)


def _spelling(head, first):
    """The spelling of the entries that start at head[first] (a quote), or None."""
    end_name = head.find(b'"', first + 1)
    open_shard = head.find(b'"', end_name + 1)
    end_shard = head.find(b'"', open_shard + 1)
    if min(end_name, open_shard, end_shard) < 0:
        return None
    kv = head[end_name + 1:open_shard]
    after = _skip_space(head, end_shard + 1)
    if after >= len(head) or kv.strip(_SPACE) != b":":
        return None
    if head[after:after + 1] == b"}":
        sep = b", "  # one entry: no separator is ever compared
    else:
        next_name = head.find(b'"', end_shard + 1)
        sep = head[end_shard + 1:next_name]
        if next_name < 0 or sep.strip(_SPACE) != b",":
            return None
    return _Spelling(kv.decode("ascii"), sep.decode("ascii"))


def _clean(texts):
    """Whether every text is ASCII without a quote, a backslash or a control character (JSON
    writes each of them as it is)."""
    for start in range(0, len(texts), _BLOCK_ENTRIES):
        joined = "".join(texts[start:start + _BLOCK_ENTRIES])
        if not joined.isascii():
            return False
        raw = joined.encode("ascii")
        if len(raw.translate(None, _ESCAPED)) != len(raw):
            return False
    return True


def agreeing_index(index_path, labels, columns, order):
    """(the index without its weight_map, the files in the order the index first names them) when
    the index at `index_path` maps exactly every tensor of `columns` to its file; else None.

    `columns` are every file's tensors, file after file (file_indexes into `labels`, each file's
    name as the index spells it), `order` their positions in name order.
    """
    names, file_indexes = columns.names, columns.file_indexes
    starts = [bisect_left(file_indexes, i) for i in range(len(labels))]
    if not names or starts[0] != 0 or any(map(ge, starts, starts[1:] + [len(names)])):
        return None  # a file with no tensor is not in the index
    if not _clean(labels) or not _clean(names):
        return None
    sorted_names = list(map(names.__getitem__, order))
    if any(map(eq, sorted_names, islice(sorted_names, 1, None))):
        return None  # a name in two files: JSON keeps the last of a key written twice
    ends = starts[1:] + [len(names)]
    names_of = dict((label, names[start:end]) for label, start, end in zip(labels, starts, ends))
    walked = walk_shards(index_path, names_of.get)
    if walked is not None and len(walked[1]) == len(labels):
        index, walk_order = walked
        at = dict((label, i) for i, label in enumerate(labels))
        return index, [at[label] for label in walk_order]
    try:
        with open_regular(index_path) as f:
            return _sorted_compare(f, labels, columns, order, sorted_names)
    except (OSError, ValueError):  # UnicodeDecodeError is a ValueError
        return None


def walk_shards(index_path, names_of):
    """(the index without its weight_map, its shards in its order) when it is written shard after
    shard, each in its header's order, every shard's names being names_of(label) (None: no such
    shard); else None. A shard named twice is refused (ShardWalk)."""
    walk = ShardWalk.open(index_path)
    if walk is None:
        return None
    order = []
    try:
        while True:
            label = walk.label()
            if label is None:
                break
            names = None if label in order else names_of(label)
            if names is None or not walk.take(label, names):
                return None
            order.append(label)
        index = walk.index()
    finally:
        walk.close()
    return None if index is None else (index, order)


def _sorted_compare(f, labels, columns, order, sorted_names):
    """What agreeing_index answers for an index with every name sorted (as transformers writes it)."""
    head = f.read(_HEAD_BYTES)
    found = _weight_map_start(head)
    if found is None:
        return None
    brace, first, spelling = found
    if head[first + 1:head.find(b'"', first + 1)].decode("ascii") != sorted_names[0]:
        return None
    sorted_files = list(map(columns.file_indexes.__getitem__, order))
    f.seek(first + 1)
    if not all(f.read(len(expected)) == expected for expected in map(_ascii, _by_name(sorted_names, sorted_files, labels, spelling))):
        return None
    index = _without_weight_map(head, brace, f.read(_HEAD_BYTES + 1))
    return None if index is None else (index, list(dict.fromkeys(file_index for file_index, _ in groupby(sorted_files))))


def _without_weight_map(head, brace, tail):
    """The index without its weight_map: the start of the file to the weight_map's brace, and
    `tail` from the quote that closes its last entry; None when that is not one JSON object with
    one weight_map, or when the tail is longer than metadata is."""
    if len(tail) > _HEAD_BYTES or tail[:1] != b'"':
        return None
    close = _skip_space(tail, 1)
    if tail[close:close + 1] != b"}":
        return None
    rest = head[:brace + 1] + tail[close:]
    if b"\\" in rest or rest.count(_KEY) != 1:
        return None  # an escape could spell a second weight_map key
    try:
        index = json.loads(rest.decode("utf-8"))
    except ValueError:
        return None
    weight_map = index.get("weight_map") if type(index) is dict else None
    return index if type(weight_map) is dict and not weight_map else None


def _ascii(text):
    return text.encode("ascii")


def _by_name(sorted_names, sorted_files, labels, spelling):
    """The weight_map's text with every name sorted, a block at a time."""
    kv, sep = spelling.kv, spelling.sep
    for start in range(0, len(sorted_names), _BLOCK_ENTRIES):
        chosen = sorted_names[start:start + _BLOCK_ENTRIES]
        pieces = [kv] * (4 * len(chosen))
        pieces[0::4] = chosen
        pieces[2::4] = map(labels.__getitem__, sorted_files[start:start + _BLOCK_ENTRIES])
        pieces[3::4] = [sep] * len(chosen)
        if start + _BLOCK_ENTRIES >= len(sorted_names):
            pieces.pop()  # no separator after the last entry
        yield "".join(pieces)


# ---------------------------------------------------------------------------------------------
# The same index read as it streams, for a summary that keeps no listing (summary_stream.py)

_READ_BYTES = 1 << 20
_BODY_END = re.compile(rb'"[ \t\n\r]*\}')


def name_digest(names):
    """What a sequence of names is compared by: sha256 of each name and a newline."""
    import hashlib  # here: an index in the shards' own order needs no digest, nor OpenSSL's load (~4 ms)

    return hashlib.sha256(("\n".join(names) + "\n").encode("utf-8")).digest() if names else hashlib.sha256().digest()


def index_digests(index_path):
    """(the index without its weight_map, {shard: (tensors, name_digest of its names in the index's
    order)}, the shards in the order the index first names them) of a shard index spelled the
    common ways (no escape, one separator throughout) whose keys are all distinct, read a block
    at a time; None for any other (the exact path reads it)."""
    try:
        with open_regular(index_path) as f:
            return _digests(f)
    except (OSError, ValueError):  # UnicodeDecodeError is a ValueError
        return None


def _digests(f):
    head = f.read(_HEAD_BYTES)
    found = _weight_map_start(head)
    if found is None:
        return None
    brace, first, spelling = found
    kv, sep = spelling.kv.encode("ascii"), spelling.sep.encode("ascii")
    hashes, counts = {}, {}
    pending, at, ended = b"", first + 1, None
    f.seek(at)
    while ended is None:
        block = f.read(_READ_BYTES)
        text = pending + block
        end = _BODY_END.search(text)
        if end is not None:
            ended, piece, tail = True, text[:end.start()], text[end.start():]
        elif not block:
            return None
        else:
            cut = text.rfind(sep)
            if cut < 0:
                pending = text
                if len(pending) > 16 * _READ_BYTES:
                    return None
                continue
            piece, pending = text[:cut], text[cut + len(sep):]
        if not _take_entries(piece, kv, sep, hashes, counts):
            return None
    index = _without_weight_map(head, brace, tail + f.read(_HEAD_BYTES + 1))
    if index is None:
        return None
    shards = list(counts)
    return index, dict((shard, (counts[shard], hashes[shard].digest())) for shard in shards), shards


def _take_entries(piece, kv, sep, hashes, counts):
    """Adds `name": "shard` entries (joined by the separator) to each shard's count and digest;
    false when they are not spelled so."""
    if b"\0" in piece:
        return False
    # A mark after each name's separator says which separator each part came after.
    parts = piece.replace(kv, sep + b"\0").split(sep)
    names, shards = parts[0::2], parts[1::2]
    distinct = set(shards)
    if len(names) != len(shards) or not all(shard[:1] == b"\0" for shard in distinct):
        return False
    joined = b"".join(names) + b"".join(shard[1:] for shard in distinct)
    if not joined.isascii() or len(joined.translate(None, _ESCAPED)) != len(joined):
        return False  # a quote, an escape or a control character
    import hashlib

    for shard in dict.fromkeys(shards):  # each shard first in the order the index names them
        label = shard[1:].decode("ascii")
        if label not in counts:
            hashes[label], counts[label] = hashlib.sha256(), 0
    order = sorted(range(len(shards)), key=shards.__getitem__)  # by shard, in the index's order within one
    by_shard = list(map(shards.__getitem__, order))
    for shard in sorted(distinct):
        start, end = bisect_left(by_shard, shard), bisect_right(by_shard, shard)
        label = shard[1:].decode("ascii")
        hashes[label].update(b"\n".join(map(names.__getitem__, order[start:end])) + b"\n")
        counts[label] += end - start
    return True


class ShardWalk(object):
    """An index written shard after shard, each shard's entries in its header's order (as the
    common sharding scripts write it), read beside the shards: `label()` is the shard the next
    entry names, `take(label, names)` compares that shard's entries with the text its header's
    names make, a block at a time, and `index()` is the rest of the file once every entry was
    taken. Any difference answers None or false, and the digests (index_digests) or the exact
    path decide instead."""

    def __init__(self, f, head, brace, first, spelling):
        self.f = f
        self.head = head
        self.brace = brace
        self.kv, self.sep = spelling.kv, spelling.sep
        self.at = first + 1  # just after the quote that opens the next entry's name
        self.ended = False
        self.tail = None

    @classmethod
    def open(cls, index_path):
        try:
            f = open_regular(index_path)
        except OSError:
            return None
        try:
            head = f.read(_HEAD_BYTES)
        except OSError:
            f.close()
            return None
        found = _weight_map_start(head)
        if found is None:
            f.close()
            return None
        return cls(f, head, *found)

    def close(self):
        self.f.close()

    def label(self):
        """The shard the next entry names (None at the end of the weight_map, or when it cannot tell)."""
        if self.ended:
            return None
        kv = self.kv.encode("ascii")
        try:
            self.f.seek(self.at)
            ahead = self.f.read(_HEAD_BYTES)
        except OSError:
            return None
        start = ahead.find(kv)
        end = ahead.find(b'"', start + len(kv)) if start >= 0 else -1
        if end < 0:
            return None
        try:
            return ahead[start + len(kv):end].decode("ascii")
        except UnicodeDecodeError:
            return None

    def take(self, label, names):
        """Whether the next entries are exactly `names`, in this order, each mapped to `label`."""
        if not names or not _clean([label]) or not _clean(names):
            return False
        kv, sep = self.kv, self.sep
        joint = kv + label + sep
        try:
            self.f.seek(self.at)
            for start in range(0, len(names), _BLOCK_ENTRIES):
                stop = min(start + _BLOCK_ENTRIES, len(names))
                text = (joint.join(names[start:stop]) + (joint if stop < len(names) else kv + label)).encode("ascii")
                if self.f.read(len(text)) != text:
                    return False
            after = self.f.read(len(sep))
        except (OSError, UnicodeEncodeError):
            return False
        if after == sep.encode("ascii"):
            self.at = self.f.tell()
            return True
        if after[:1] != b'"':
            return False
        self.tail = after + self.f.read(_HEAD_BYTES + 1)
        self.ended = True
        return True

    def index(self):
        """The index without its weight_map, once every entry was taken; else None."""
        if not self.ended or self.tail is None:
            return None
        return _without_weight_map(self.head, self.brace, self.tail)
