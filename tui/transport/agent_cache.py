"""This laptop's copy of the last agent zipapp it built (tui/transport/bootstrap.py), so that a
link keeper's start does not build it again: building packs and compresses every source
(~0.2 s of CPU on a 2-core laptop, more with its cores busy), while finding the copy costs a
stat of each source and one read.

The copy is named by a stamp of what the build reads (each source's name, size and mtime, the
carried libraries' too, and the boot's own module): an edit or an upgrade in place is a new
stamp, hence a new build. It lives in $XDG_CACHE_HOME/specdeck/built (0700), one copy at a
time; a directory that is not ours and private, a copy that is damaged (its sha256 is checked
on every read) or missing is no error: the agent is built as before.
"""

import hashlib
import json
import os

from .. import logs
from .keeper_socket import not_private

log = logs.get("tui.links")

MAX_AGENT_BYTES = 64 << 20


def cache_dir():
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "specdeck", "built")


def stamp(paths, extra=""):
    """A short name for the state of the files under `paths` (files, or directories walked for
    .py files): names, sizes and mtimes, with `extra` (a version)."""
    entries = [extra]
    for path in paths:
        if os.path.isdir(path):
            for directory, subdirectories, names in os.walk(path):
                subdirectories[:] = sorted(d for d in subdirectories if d != "__pycache__")
                entries += [_entry(os.path.join(directory, name)) for name in sorted(names) if name.endswith(".py")]
        else:
            entries.append(_entry(path))
    return hashlib.sha256("\n".join(entries).encode("utf-8", "surrogateescape")).hexdigest()[:20]


def _entry(path):
    try:
        st = os.stat(path)
    except OSError:
        return "%s -" % path
    return "%s %d %d" % (path, st.st_size, st.st_mtime_ns)


def load(key):
    """(file name, zipapp bytes, sha256) kept under `key`, or None."""
    directory = cache_dir()
    if not_private(directory, directory=True):
        return None
    try:
        with open(os.path.join(directory, key + ".json"), encoding="utf-8") as f:
            meta = json.load(f)
        with open(os.path.join(directory, key + ".pyz"), "rb") as f:
            data = f.read(MAX_AGENT_BYTES + 1)
    except (OSError, ValueError):
        return None
    if not isinstance(meta, dict) or not isinstance(meta.get("name"), str) or hashlib.sha256(data).hexdigest() != meta.get("sha256"):
        return None
    return meta["name"], data, meta["sha256"]


def keep(key, built):
    """Keep `built` ((name, bytes, sha256)) under `key`, in place of any copy before it."""
    name, data, digest = built
    directory = cache_dir()
    try:
        os.makedirs(directory, mode=0o700, exist_ok=True)
        why = not_private(directory, directory=True)
        if why:
            log.info("not keeping the built agent in %s: %s", directory, why)
            return
        for old in os.listdir(directory):
            if not old.startswith(key + "."):
                os.unlink(os.path.join(directory, old))
        for suffix, content in ((".pyz", data), (".json", json.dumps({"name": name, "sha256": digest}).encode())):
            partial = os.path.join(directory, "%s%s.%d.partial" % (key, suffix, os.getpid()))
            fd = os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
            with os.fdopen(fd, "wb") as f:
                f.write(content)
            os.replace(partial, os.path.join(directory, key + suffix))
    except OSError as exc:
        log.info("could not keep the built agent in %s: %s", directory, exc.strerror or exc)
