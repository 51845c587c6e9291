"""A job's log read by windows: a tail that starts on a whole line, whole lines from an offset
(with the unfinished last line of a progress bar when asked), never a UTF-8 character cut in two."""

import os


def utf8_boundary(data):
    """Length of `data` without a UTF-8 character cut off at its end (windows of a log are
    decoded one by one, and a split character would show as two replacement marks)."""
    for back in range(1, min(4, len(data)) + 1):
        byte = data[-back]
        if byte < 0x80:
            return len(data)  # ASCII: nothing is cut
        if byte >= 0xC0:  # the lead byte of the last character
            needed = 2 if byte < 0xE0 else 3 if byte < 0xF0 else 4
            return len(data) if back >= needed else len(data) - back
    return len(data)


def tail(path, offset=0, max_bytes=65536):
    """A window of the log: `offset` < 0 counts from the end. Never reads more than max_bytes."""
    max_bytes = max(1, int(max_bytes))
    with open(path, "rb") as f:
        size = os.fstat(f.fileno()).st_size
        offset = int(offset)
        if offset < 0:
            offset = max(0, size + offset)
            if offset > 0:
                # Start on a line boundary so the first line shown is whole.
                f.seek(offset)
                head = f.read(min(size - offset, max_bytes))
                newline = head.find(b"\n")
                if 0 <= newline < len(head) - 1:
                    offset += newline + 1
        offset = min(offset, size)
        f.seek(offset)
        data = f.read(min(max_bytes, size - offset))
    if offset + len(data) < size:
        data = data[: utf8_boundary(data)]
    return {"offset": offset, "next_offset": offset + len(data), "size": size, "text": data.decode("utf-8", "replace")}


def read_lines_from(path, offset, max_bytes=65536, final=False, partial=False):
    """Whole lines from offset, as (bytes, next_offset). With `final` the rest of the file too;
    with `partial`, an unfinished last line when no whole line is waiting (a progress bar
    redrawn with \\r never ends its line), cut on a character boundary."""
    with open(path, "rb") as f:
        f.seek(offset)
        data = f.read(max_bytes)
    if not data:
        return b"", offset
    if partial and len(data) < max_bytes and b"\n" not in data:
        data = data[: utf8_boundary(data)]
        return data, offset + len(data)
    if not final and len(data) < max_bytes:
        cut = data.rfind(b"\n")
        if cut < 0:
            return b"", offset
        data = data[: cut + 1]
    elif len(data) == max_bytes:
        data = data[: utf8_boundary(data)]
    return data, offset + len(data)
