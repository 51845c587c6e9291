"""A job's log read in whole lines from a byte offset, each line at most LINE_CAP bytes.

Lines end at \\n, \\r\\n or a lone \\r (progress bars redraw with \\r). A line longer than the cap
is cut: none of it is parsed, reading goes on after its end while the job still writes it,
and the reader counts it for the run's one notice. A call reads STRETCH_BYTES (READ_BYTES when
that holds no line's end), so a backlog is caught up over several calls and memory stays
bounded whatever the log holds.
When its bytes reached the log is kept too (`Arrivals`): a line printed without a time of its own
is stamped with it, so a burst written after a stall shows the stall.
Separators are found with bytes.find; no pattern looks for a line's end, which costs quadratic
time on a long line without one (and holds the GIL throughout).
"""

import bisect

LINE_CAP = 1 << 20
STRETCH_BYTES = 256 << 10  # read at a time: ~10,000 records, parsed well within a read's deadline
READ_BYTES = 2 * LINE_CAP + 65536  # read when a stretch holds no line's end: a line's end or its cut is in reach


def _separators(data, at_end):
    """(where each line's text ends, where its separator ends) in data, in order. bytes.find is
    a memchr: a megabyte without a separator costs well under a millisecond. A carriage return
    that ends the data waits for the next read unless the log has ended (a line feed may follow
    it: the two are one separator)."""
    length = len(data)
    newline, carriage = data.find(b"\n"), data.find(b"\r")
    while newline >= 0 or carriage >= 0:
        if carriage >= 0 and (newline < 0 or carriage < newline):
            if carriage + 1 < length and data[carriage + 1] == 10:  # \r\n
                yield carriage, carriage + 2
                newline = data.find(b"\n", carriage + 2)
            elif carriage + 1 == length and not at_end:
                return
            else:
                yield carriage, carriage + 1
            carriage = data.find(b"\r", carriage + 1)
        else:
            yield newline, newline + 1
            newline = data.find(b"\n", newline + 1)


ARRIVALS_KEPT = 4096  # sizes seen and not yet read past; a longer backlog merges its oldest


class Arrivals:
    """When the log's bytes reached it: the sizes seen, each with the log's modification time
    when that size was first seen (the time of the write that brought the last of those bytes;
    clamped between the look before and this one, so a file server's clock cannot put a byte in
    the future or before it could have been written). A byte's time is that of the first size
    that holds it: bytes are never spread over the time between two looks."""

    def __init__(self, kept=None):
        pairs = [(int(size), float(at)) for size, at in kept or ()
                 if isinstance(size, (int, float)) and isinstance(at, (int, float))]
        self.sizes = [size for size, _ in pairs]
        self.times = [at for _, at in pairs]
        self.looked_at = self.times[-1] if self.times else None

    def look(self, size, mtime, now):
        """The log's size and modification time as stat gave them at `now`."""
        if not self.sizes or size > self.sizes[-1]:
            low = self.looked_at if self.looked_at is not None else mtime
            self.sizes.append(size)
            self.times.append(min(max(mtime, low), now))
            if len(self.sizes) > ARRIVALS_KEPT:
                del self.sizes[0], self.times[0]  # the oldest backlog's bytes take the next size's time
        elif size < self.sizes[-1]:
            self.sizes, self.times = [size], [min(mtime, now)]  # truncated and written again
        self.looked_at = now

    def time_of(self, offset):
        """When the byte at `offset` reached the log (None before any look)."""
        if not self.sizes:
            return None
        index = bisect.bisect_right(self.sizes, offset)
        return self.times[min(index, len(self.times) - 1)]

    def forget_before(self, offset):
        """Sizes no byte at or after `offset` needs (the newest is kept)."""
        keep = min(bisect.bisect_right(self.sizes, offset), len(self.sizes) - 1)
        if keep > 0:
            del self.sizes[:keep], self.times[:keep]

    def state(self):
        return [[size, at] for size, at in zip(self.sizes, self.times)]


class Line:
    """One line: where it starts and ends in the log (its separator included), and its text
    (None for a line that was cut)."""

    __slots__ = ("start", "end", "text")

    def __init__(self, start, end, text):
        self.start, self.end, self.text = start, end, text


class LogReader:
    """Where a log was read to (`offset`, always a line's start unless `skipping` the rest of a
    cut line), and how many lines were cut (`cut_lines`, the first at `first_cut_at`)."""

    def __init__(self, offset=0, cut_lines=0, first_cut_at=None):
        self.offset = offset
        self.skipping = False
        self.cut_lines = cut_lines
        self.first_cut_at = first_cut_at

    def read(self, path, size, ended):
        """[Line] of what was written past `offset` (a stretch of it). `ended`: the job
        has ended, so a last line without a separator is complete."""
        if size <= self.offset:
            return []
        available = size - self.offset
        with open(path, "rb") as f:
            f.seek(self.offset)
            data = f.read(min(STRETCH_BYTES, available))
            if len(data) < available and data.find(b"\n") < 0 and data.find(b"\r") < 0:
                f.seek(self.offset)  # no line's end in a stretch: read as far as a cut needs
                data = f.read(min(READ_BYTES, available))
        at_end = ended and self.offset + len(data) >= size
        lines = []
        start = 0
        separators = _separators(data, at_end)
        if self.skipping:
            first = next(separators, None)
            if first is None:
                self.offset += len(data)
                self.skipping = not at_end
                return []
            start = first[1]
            self.skipping = False
        for text_end, end in separators:
            self._line(lines, data, start, text_end, end)
            start = end
        rest = len(data) - start
        if rest > LINE_CAP:
            self._cut(lines, start, len(data))
            self.skipping = not at_end
            start = len(data)
        elif rest and at_end:
            self._line(lines, data, start, len(data), len(data))
            start = len(data)
        self.offset += start
        return lines

    def _line(self, lines, data, start, text_end, end):
        if text_end - start > LINE_CAP:
            self._cut(lines, start, end)
        else:
            lines.append(Line(self.offset + start, self.offset + end, data[start:text_end].decode("utf-8", "replace")))

    def _cut(self, lines, start, end):
        self.cut_lines += 1
        if self.first_cut_at is None:
            self.first_cut_at = self.offset + start
        lines.append(Line(self.offset + start, self.offset + end, None))

    def notice(self):
        """The run's one notice about cut lines, or None."""
        if not self.cut_lines:
            return None
        return "%d line(s) of the log longer than %d MiB were cut, not read (the first at byte %d)" % (
            self.cut_lines, LINE_CAP >> 20, self.first_cut_at)
