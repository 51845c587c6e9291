"""Opening a file that a request or a checkpoint names: only a regular file is read, and opening
never blocks. A FIFO named model.safetensors would hold the reading thread until something
writes to it (for good, on a host where nothing does); a device can be endless. Either is
refused in one line naming what it is; so is a path that is a symlink loop or holds a NUL byte.
Standard library only.
"""

import errno
import os
import stat

_KINDS = ((stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a FIFO"), (stat.S_ISSOCK, "a socket"),
          (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"))


class NotARegularFile(OSError):
    """A path that leads to something other than a regular file (a FIFO, a device, a directory)."""

    def __init__(self, path, kind):
        super().__init__(errno.EISDIR if kind == "a directory" else errno.EINVAL,
                         "is %s, not a regular file" % kind, path)
        self.kind = kind


def kind_of(mode):
    """What a file of this st_mode is, in words ("a FIFO", ...); "a special file" when none fits."""
    for test, kind in _KINDS:
        if test(mode):
            return kind
    return "a special file"


def open_regular(path, buffering=-1):
    """`path` opened for reading in binary, when it is (or a symlink leads to) a regular file.

    Opened with O_NONBLOCK, so that a FIFO is opened at once instead of waiting for a writer;
    the descriptor is checked with fstat (no race with a rename) and made blocking again for
    reading. Raises NotARegularFile for anything else, and OSError as open() does; a path
    holding a NUL byte raises ValueError, as open() does (path_problem words it first).
    """
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY)
    except OSError as exc:
        if exc.errno == errno.ENXIO:  # a unix socket: open() cannot open one at all
            try:
                mode = os.stat(path).st_mode
            except OSError:
                raise exc
            raise NotARegularFile(path, kind_of(mode))
        raise
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            raise NotARegularFile(path, kind_of(mode))
        os.set_blocking(fd, True)
    except BaseException:
        os.close(fd)
        raise
    return os.fdopen(fd, "rb", buffering=buffering)


def path_problem(path):
    """Why `path` cannot name a file at all (one line), or None: a NUL byte, which no file name
    holds (os functions raise ValueError on it)."""
    if "\0" in path:
        return "path contains a NUL byte: %r" % path
    return None


def reason(exc):
    """Why an OSError happened, in a few words (after "cannot read NAME: "): a symlink loop and a
    file that is not regular said as such, anything else as the system says it."""
    if isinstance(exc, NotARegularFile):
        return "it " + exc.strerror
    if exc.errno == errno.ELOOP:
        return "it is a symlink loop, which cannot be resolved"
    return exc.strerror or str(exc)


def error_text(path, exc):
    """One line for an OSError met reading `path`, naming it."""
    if isinstance(exc, NotARegularFile):
        return "%s %s" % (path, exc.strerror)
    if exc.errno == errno.ELOOP:
        return "%s is a symlink loop: it cannot be resolved" % path
    return "%s: %s" % (path, exc.strerror or exc)
