"""A content hash of this package: names the zipapp on the host and tells a relay
whether the running daemon is the same code as itself."""

import hashlib
import os
import zipfile

_cached = []


def package_sources():
    """[(relative name, bytes)] of the package's Python files, sorted, from a directory or a zipapp."""
    here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # the `remote` package
    archive, _, inner = here.partition(".pyz")
    if inner or here.endswith(".pyz"):
        archive += ".pyz"
        with zipfile.ZipFile(archive) as zf:
            names = sorted(n for n in zf.namelist() if n.startswith("remote/") and n.endswith(".py"))
            return [(n[len("remote/") :], zf.read(n)) for n in names]
    sources = []
    for directory, subdirectories, names in os.walk(here):
        subdirectories[:] = [d for d in subdirectories if d != "__pycache__"]
        for name in names:
            if name.endswith(".py"):
                path = os.path.join(directory, name)
                with open(path, "rb") as f:
                    sources.append((os.path.relpath(path, here).replace(os.sep, "/"), f.read()))
    return sorted(sources)


def build_id():
    if not _cached:
        digest = hashlib.sha256()
        for name, data in package_sources():
            digest.update(name.encode() + b"\0" + str(len(data)).encode() + b"\0" + data)
        _cached.append(digest.hexdigest()[:16])
    return _cached[0]
