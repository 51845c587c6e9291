"""The job id counter: the highest job number ever given on this host, kept in jobs/.last-id
so that an id is never given twice, even after its job was forgotten (a console may still
show it).

The file is written once at its full width and from then on rewritten in place (the same
bytes of the same block), so a full disk cannot refuse an update, and a reader sees the old
number or the new one; the number in it only grows."""

import os

from ..core.records import replace_file

COUNTER_FILE = ".last-id"
WIDTH = 20  # digits; a job id is `j` and at most 18 of them


def counter_path(root):
    return os.path.join(root, COUNTER_FILE)


def read_counter(root):
    """The highest job number given so far (0 when none was recorded, or the file is damaged)."""
    try:
        with open(counter_path(root)) as f:
            return int(f.read().strip() or 0)
    except (OSError, ValueError):
        return 0


def raise_counter(root, number):
    """Make the counter at least `number` (never lower it). OSError (ENOSPC) when it cannot be
    written: the counter is then as it was."""
    if number <= read_counter(root):
        return
    text = ("%d" % number).rjust(WIDTH) + "\n"
    try:
        fd = os.open(counter_path(root), os.O_WRONLY)
    except FileNotFoundError:
        fd = None
    if fd is not None:
        try:
            if os.fstat(fd).st_size == len(text):
                os.pwrite(fd, text.encode(), 0)  # in place: no block to allocate on a full disk
                return
        finally:
            os.close(fd)
    # First write, or the short file of an older agent: a whole new file, put in place at once.
    replace_file(counter_path(root), text, mode=0o600)
