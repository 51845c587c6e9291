"""A file's (or a checkpoint's) tensors as parallel lists rather than a dict or tuple per tensor:
a 100,000-tensor MoE target then costs a few lists, and whole-list operations check it.
Standard library only, Python 3.9+.
"""

from operator import sub


class TensorColumns(object):
    """names, dtypes, shapes (tuples, equal ones shared), bytes (what shape x dtype needs) and
    begins / ends (the data_offsets); None marks what is unusable. `file_indexes` says which
    file each tensor is in, once tensors of several files are put together."""

    __slots__ = ("names", "dtypes", "shapes", "bytes", "begins", "ends", "file_indexes", "spans_are_bytes")

    def __init__(self, names=None, dtypes=None, shapes=None, sizes=None, begins=None, ends=None, spans_are_bytes=None):
        # spans_are_bytes: every data_offsets span is sound and holds exactly `bytes` (what the
        # fast paths found, or an empty set of columns), so neither is worked out again.
        self.spans_are_bytes = names is None if spans_are_bytes is None else spans_are_bytes
        self.names = names if names is not None else []
        self.dtypes = dtypes if dtypes is not None else []
        self.shapes = shapes if shapes is not None else []
        self.bytes = sizes if sizes is not None else []
        self.begins = begins if begins is not None else []
        self.ends = ends if ends is not None else []
        self.file_indexes = None

    @classmethod
    def from_rows(cls, rows):
        """From (name, dtype, shape, bytes, begin, end) tuples."""
        if not rows:
            return cls()
        return cls(*map(list, zip(*rows)))

    def rows(self):
        """(name, dtype, shape, bytes, begin, end) tuples, in order."""
        return list(zip(self.names, self.dtypes, self.shapes, self.bytes, self.begins, self.ends))

    def __len__(self):
        return len(self.names)

    def extend(self, other, file_index, indexes=None):
        """Append `other`'s tensors (those at `indexes`, or all), marked as in file `file_index`."""
        if self.file_indexes is None:
            self.file_indexes = []
        self.spans_are_bytes = self.spans_are_bytes and other.spans_are_bytes
        for mine, theirs in ((self.names, other.names), (self.dtypes, other.dtypes), (self.shapes, other.shapes),
                             (self.bytes, other.bytes), (self.begins, other.begins), (self.ends, other.ends)):
            mine.extend(theirs if indexes is None else map(theirs.__getitem__, indexes))
        self.file_indexes.extend([file_index] * (len(other) if indexes is None else len(indexes)))

    def _spans(self):
        """Every data_offsets span when all of them are sound (whole-list operations), else None."""
        if None in self.begins or None in self.ends:
            return None
        spans = list(map(sub, self.ends, self.begins))
        return spans if not spans or min(spans) >= 0 else None

    def stored_bytes(self):
        """What each tensor occupies in its file: its data_offsets span when that is sound, else
        the bytes its shape and dtype need."""
        if self.spans_are_bytes:
            return self.bytes
        spans = self._spans()
        if spans is not None:
            # Mostly what the shapes need: then those sizes, one int shared by every tensor of a
            # shape, rather than an int of its own per tensor.
            return self.bytes if spans == self.bytes else spans
        return [e - b if b is not None and e >= b else n for n, b, e in zip(self.bytes, self.begins, self.ends)]

    def span_bytes(self):
        """The bytes of every sound data_offsets span, added up."""
        if self.spans_are_bytes:
            return sum(self.bytes)
        if None not in self.begins and None not in self.ends and (not self.ends or min(map(sub, self.ends, self.begins)) >= 0):
            return sum(map(sub, self.ends, self.begins))  # two passes, and no int kept per tensor
        return sum(e - b for b, e in zip(self.begins, self.ends) if b is not None and e >= b)

    def name_order(self):
        """The tensors' positions in name order."""
        return sorted(range(len(self.names)), key=self.names.__getitem__)
