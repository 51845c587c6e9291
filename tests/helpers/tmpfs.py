"""A small tmpfs of its own for the disk tests: a real file system that fills in seconds."""

import contextlib
import subprocess

import pytest


@contextlib.contextmanager
def small_tmpfs(mnt, size_bytes):
    """`mnt` (made) with a tmpfs of `size_bytes` mounted on it, unmounted after; skips the test
    where no tmpfs can be mounted."""
    mnt.mkdir()
    p = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=%d" % size_bytes, "tmpfs", str(mnt)], capture_output=True, text=True)
    if p.returncode != 0:
        pytest.skip("cannot mount a tmpfs here: %s" % p.stderr.strip())
    try:
        yield mnt
    finally:
        subprocess.run(["umount", "-l", str(mnt)], check=True)
