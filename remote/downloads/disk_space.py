"""Free space for a download: the bytes already on disk (finished or partial files), the bytes
still to fetch, what the filesystem under local_dir has free, and the mount point to name when
it is not enough."""

from __future__ import annotations

import os

from .layout import LocalPaths


def nearest_existing(path):
    p = os.path.abspath(path)
    while not os.path.exists(p):
        parent = os.path.dirname(p)
        if parent == p:
            break
        p = parent
    return p


def mount_point(path):
    p = os.path.realpath(path)
    try:
        dev = os.stat(p).st_dev
        while p != os.path.dirname(p):
            parent = os.path.dirname(p)
            if os.stat(parent).st_dev != dev:
                break
            p = parent
    except OSError:
        pass
    return p


def free_bytes(path):
    st = os.statvfs(nearest_existing(path))
    return st.f_bavail * st.f_frsize


def present_bytes(local_dir, rf):
    """Bytes of `rf` already on disk: a final file of the right size, or a partial one."""
    paths = LocalPaths(local_dir, rf.path)
    try:
        if os.path.getsize(paths.final) == rf.size:
            return rf.size
    except OSError:
        pass
    best = 0
    for p in [paths.incomplete(rf.etag)] + paths.stray_incompletes(rf.etag):
        try:
            n = os.path.getsize(p)
        except OSError:
            continue
        if n <= rf.size:
            best = max(best, n)
    return best


def space_check(spec, resolved):
    local_dir = spec["local_dir"]
    have = {rf.path: present_bytes(local_dir, rf) for rf in resolved.files}
    need = sum(rf.size - have[rf.path] for rf in resolved.files)
    base = nearest_existing(local_dir)
    free = free_bytes(local_dir)
    return have, need, free, base
