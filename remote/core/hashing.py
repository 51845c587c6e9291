"""Hashing files on the host: the one routine every capability uses (a checkpoint's sha256 in
`inspect --sha256`, a download's sha256 or git blob id of what is already on disk), streamed
through one reusable buffer, so hashing a 2.4 GB file costs a few MiB of memory and keeps up
with `sha256sum` (benchmarks/bench_sha256.py)."""

import os

from .regular_files import open_regular

BLOCK_BYTES = 1024 * 1024  # 1 MiB reads measured fastest against sha256sum on a GPU host


class Stopped(Exception):
    """Hashing was asked to stop (the job is being cancelled)."""


def hash_file(path, hasher, limit=None, progress=None, stop=None, buf=None):
    """Feed `hasher` the first `limit` bytes of `path` (all when None) and return it.

    `progress(n)` gets each block's byte count; `stop`, an Event, raises Stopped when set;
    `buf`, a bytearray, is reused instead of allocating one (its size is the block size).
    OSError is left to the caller, who knows what the file was (NotARegularFile, one of them,
    for a FIFO or a device).
    """
    buf = buf if buf is not None else bytearray(BLOCK_BYTES)
    view = memoryview(buf)
    left = limit
    with open_regular(path, buffering=0) as f:  # a FIFO put in a file's place never blocks us
        if hasattr(os, "posix_fadvise"):
            try:
                os.posix_fadvise(f.fileno(), 0, 0, os.POSIX_FADV_SEQUENTIAL)
            except OSError:
                pass
        while left is None or left > 0:
            if stop is not None and stop.is_set():
                raise Stopped()
            want = len(buf) if left is None else min(len(buf), left)
            n = f.readinto(view[:want])
            if not n:
                break
            hasher.update(view[:n])
            if left is not None:
                left -= n
            if progress is not None:
                progress(n)
    return hasher


def sha256_file(path, progress=None, block_bytes=BLOCK_BYTES):
    """Hex sha256 of a whole file; `progress(n)` as for hash_file."""
    import hashlib  # when hashing: a command that only lists a checkpoint never loads OpenSSL

    return hash_file(path, hashlib.sha256(), progress=progress, buf=bytearray(block_bytes)).hexdigest()
