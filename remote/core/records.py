"""A job's small JSON records (job.json, run.json, exit.json, stop.json): replaced whole, or
written in place into space reserved at submit, so that a disk that fills while the job
runs cannot lose how it ended, and a failed write leaves no temp file behind."""

import json
import os
import time

RESERVED_BYTES = 1024  # run.json and exit.json are made this big at submit, filled in later


def read_json(path):
    """A file's JSON value, or None when it is missing, reserved (blank) or not JSON."""
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def replace_file(path, text, encoding="utf-8", mode=0o666):
    """Write `text` beside `path`, then put it in place at once, so a reader never sees half of
    it; on failure (a full disk) leave no temp file behind. The project's one atomic write:
    job records, progress.json, plan.json, .metadata, alert and telemetry settings, config.toml.
    `mode` is for a new file (umask applies)."""
    tmp = "%s.tmp.%d" % (path, os.getpid())
    try:
        with os.fdopen(os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode), "w", encoding=encoding) as f:
            f.write(text)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


def write_json(path, value):
    """Replace a JSON file at once (see replace_file)."""
    replace_file(path, json.dumps(value))


def reserve(path):
    """Make `path` RESERVED_BYTES of blanks (read as no record yet), so that write_record can
    fill it in place later without needing a free block."""
    with open(path, "wb") as f:
        f.write(b" " * RESERVED_BYTES)


def write_record(path, value, retry_s=None):
    """Write a small record into the space reserved for it (in place: a full disk cannot refuse
    it), or replace the file when there is none. With `retry_s`, try again until it works, or
    until its directory is gone (removed by hand: waiting would never end)."""
    data = json.dumps(value, separators=(",", ":")).encode()
    while True:
        try:
            try:
                fd = os.open(path, os.O_WRONLY)
            except FileNotFoundError:
                fd = None
            if fd is not None:
                try:
                    size = os.fstat(fd).st_size
                    if len(data) <= size:
                        os.pwrite(fd, data.ljust(size), 0)
                        return
                finally:
                    os.close(fd)
            write_json(path, value)
            return
        except OSError:
            if retry_s is None or not os.path.isdir(os.path.dirname(path) or "."):
                raise
            time.sleep(retry_s)
