"""Whether two tensors of the same shape and dtype, both on this machine, hold the same values:
judged from a fingerprint of a few fixed slices of each one's bytes (the first, middle and last
64 KiB; the whole tensor when it is smaller than that), read with bounded preads from the data
offsets the listings already have. Two drafters fine-tuned apart differ in every slice; a copy
matches in all of them. Standard library only.
"""

import hashlib
import os
import stat
import time

SLICE_BYTES = 64 * 1024
# Bytes read for one comparison, both sides together: every tensor of any drafter (a few dozen
# tensors, 384 KiB each) and the first few hundred of a target compared with another.
MAX_READ_BYTES = 256 * 1024 * 1024
DEADLINE_S = 20.0
# Files held open at once per side (a 64-shard target's shards all fit).
MAX_OPEN_FILES = 128


def slices(length):
    """(offset, bytes) of the slices a tensor of `length` bytes is judged by."""
    if length <= 3 * SLICE_BYTES:
        return [(0, length)]
    return [(0, SLICE_BYTES), (length // 2 - SLICE_BYTES // 2, SLICE_BYTES), (length - SLICE_BYTES, SLICE_BYTES)]


def sampled_bytes(length):
    """What slices(length) reads."""
    return min(length, 3 * SLICE_BYTES)


class Files(object):
    """Weight files opened for reading their tensors' bytes: regular files only, opened without
    blocking (a FIFO named like a shard is never waited on), kept open while they are read (at
    most MAX_OPEN_FILES at once), all closed by close()."""

    def __init__(self):
        self.entries = {}  # path -> (fd, (st_dev, st_ino), size), or None when it cannot be read

    def get(self, path):
        if path in self.entries:
            return self.entries[path]
        if len(self.entries) >= MAX_OPEN_FILES:
            self.close()  # a target of more shards than that: they are opened again as needed
        entry = None
        flags = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_NOCTTY", 0) | getattr(os, "O_CLOEXEC", 0)
        try:
            fd = os.open(path, flags)
        except (OSError, ValueError):
            fd = None
        if fd is not None:
            try:
                st = os.fstat(fd)
            except OSError:
                st = None
            if st is not None and stat.S_ISREG(st.st_mode):
                entry = (fd, (st.st_dev, st.st_ino), st.st_size)
            else:
                os.close(fd)
        self.entries[path] = entry
        return entry

    def close(self):
        for entry in self.entries.values():
            if entry is not None:
                os.close(entry[0])
        self.entries = {}


def fingerprint(entry, offset, length):
    """The digest of the slices of `length` bytes at `offset` in an open file, or None when the
    file no longer holds them all."""
    fd, _identity, size = entry
    if offset < 0 or offset + length > size:
        return None
    digest = hashlib.blake2b(digest_size=16)
    for start, count in slices(length):
        try:
            chunk = os.pread(fd, count, offset + start)
        except OSError:
            return None
        if len(chunk) != count:
            return None  # cut short: the file shrank since it was listed
        digest.update(chunk)
    return digest.digest()


class Judge(object):
    """Compares tensors of two listings (listing.Listing) within one read budget and deadline."""

    def __init__(self, listing_a, listing_b, max_read_bytes=MAX_READ_BYTES, deadline_s=DEADLINE_S):
        self.listings = (listing_a, listing_b)
        self.files = (Files(), Files())
        self.read_left = max_read_bytes
        self.max_read_bytes, self.deadline_s = max_read_bytes, deadline_s
        self.deadline = time.monotonic() + deadline_s
        self.stopped = None  # why the later tensors went unjudged, once the budget ran out
        self.unreadable = None  # of a listing compared with itself: the names whose bytes are not there

    def same(self, name_a, name_b):
        """True when both tensors' slices match, False when they differ, None when not judged
        (unreadable, or the budget is spent)."""
        if name_a == name_b and self.listings[0] is self.listings[1]:
            # A checkpoint compared with itself: the same bytes, nothing to read once they are there.
            if self.unreadable is None:
                self.unreadable = self.listings[0].unreadable_names(lambda path: self.files[0].get(path) is not None)
            return None if name_a in self.unreadable else True
        spans = [listing.data_span(name) for listing, name in zip(self.listings, (name_a, name_b))]
        if None in spans or spans[0][2] != spans[1][2]:
            return None
        entries = [files.get(span[0]) for files, span in zip(self.files, spans)]
        if None in entries:
            return None
        length = spans[0][2]
        if entries[0][1] == entries[1][1] and spans[0][1] == spans[1][1]:
            return True  # the same bytes of the same file: nothing to read
        cost = 2 * sampled_bytes(length)
        if self.stopped is None and cost > self.read_left:
            self.stopped = "its %.3g MiB of reads were spent" % (self.max_read_bytes / 1048576.0)
        elif self.stopped is None and time.monotonic() > self.deadline:
            self.stopped = "it ran out of its %g s" % self.deadline_s
        if self.stopped is not None:
            return None  # the rest go unjudged too: the budget goes to the first rows
        self.read_left -= cost
        digests = [fingerprint(entry, span[1], length) for entry, span in zip(entries, spans)]
        if None in digests:
            return None
        return digests[0] == digests[1]

    def close(self):
        for files in self.files:
            files.close()
