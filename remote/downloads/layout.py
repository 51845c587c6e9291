"""Where a download lives on disk, as huggingface_hub's local_dir layout has it: the final file, its
.metadata record (commit and etag) under local_dir/.cache/huggingface/download, the partial file
a resumed download continues, and the per-file lock hf_hub_download takes too; plus specdeck's own
record of what the directory was downloaded from (so a later verify needs no repo named)."""

from __future__ import annotations

import base64
import hashlib
import json
import os
import time

try:  # the agent runs on Linux hosts; keep the module importable elsewhere
    import fcntl
except ImportError:  # pragma: no cover
    fcntl = None

from ..core.hashing import Stopped
from ..core.records import replace_file
from .failures import PlanError
from .output import log
from .spec import bad_name


def _short_hash(name):
    return base64.urlsafe_b64encode(hashlib.sha1(name.encode()).digest()).decode()


class LocalPaths:
    """Where hf_hub_download(local_dir=...) keeps a file, its metadata, lock and partial file."""

    def __init__(self, local_dir, path):
        why = bad_name(path)
        if why is None:
            top = os.path.realpath(local_dir)
            inside = os.path.realpath(os.path.join(local_dir, *path.split("/")))
            record = os.path.realpath(os.path.join(local_dir, ".cache", "huggingface", "download", *path.split("/")))
            if os.path.commonpath([top, inside]) != top or inside == top:
                why = "it resolves outside the local directory (through a symlink)"
            elif os.path.commonpath([top, record]) != top:
                # Its partial file, lock and record go there first: a planted .cache link would take them out.
                why = "its download record under .cache/huggingface resolves outside the local directory (through a symlink)"
        if why:
            raise PlanError("BadRequest", "refusing the file name %s: %s; nothing was written" % (ascii(path), why))
        parts = path.split("/")
        self.final = os.path.join(local_dir, *parts)
        self.meta = os.path.join(local_dir, ".cache", "huggingface", "download", *parts) + ".metadata"
        self.lock = self.meta[: -len(".metadata")] + ".lock"
        self.meta_dir = os.path.dirname(self.meta)
        self.meta_name = os.path.basename(self.meta)

    def incomplete(self, etag):
        return os.path.join(self.meta_dir, "%s.%s.incomplete" % (_short_hash(self.meta_name), etag))

    def stray_incompletes(self, etag):
        """Partial files of the same version left by huggingface_hub 2.x (<hash>.<etag>.<uuid>.incomplete)."""
        prefix = "%s.%s." % (_short_hash(self.meta_name), etag)
        try:
            names = os.listdir(self.meta_dir)
        except OSError:
            return []
        return [os.path.join(self.meta_dir, n) for n in names
                if n.startswith(prefix) and n.endswith(".incomplete") and n != prefix + "incomplete"]


def write_metadata(paths, commit, etag):
    """The record hf_hub_download leaves beside a finished file: its commit, etag and time."""
    os.makedirs(paths.meta_dir, exist_ok=True)
    replace_file(paths.meta, "%s\n%s\n%s\n" % (commit, etag, time.time()))


def read_metadata(local_dir):
    """{path: (commit, etag)} from the .metadata records under local_dir."""
    root = os.path.join(local_dir, ".cache", "huggingface", "download")
    out = {}
    for dirpath, _dirs, names in os.walk(root):
        for n in names:
            if not n.endswith(".metadata"):
                continue
            full = os.path.join(dirpath, n)
            rel = os.path.relpath(full, root)[: -len(".metadata")].replace(os.sep, "/")
            try:
                with open(full) as f:
                    commit = f.readline().strip()
                    etag = f.readline().strip()
            except OSError:
                continue
            if etag:
                out[rel] = (commit, etag)
    return out


# Beside huggingface_hub's own records, where `hf download` and snapshot_download never look.
DOWNLOAD_RECORD = os.path.join(".cache", "huggingface", "specdeck-download.json")
RECORD_KEYS = ("repo", "repo_type", "revision", "endpoint")


def write_download_record(spec):
    """What the directory is a download of: the spec's repo, repo type, revision and endpoint."""
    path = os.path.join(spec["local_dir"], DOWNLOAD_RECORD)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    replace_file(path, json.dumps({key: spec.get(key) for key in RECORD_KEYS}) + "\n")


def read_download_record(local_dir):
    """The record write_download_record left in local_dir, or None (none, or not one of ours)."""
    try:
        with open(os.path.join(local_dir, DOWNLOAD_RECORD), encoding="utf-8") as f:
            record = json.load(f)
    except (OSError, ValueError):
        return None
    if not isinstance(record, dict) or not isinstance(record.get("repo"), str):
        return None
    return {key: record.get(key) for key in RECORD_KEYS if isinstance(record.get(key), str)}


class FileLock:
    """The same per-file lock hf_hub_download takes, so two downloads into one folder take turns."""

    def __init__(self, path, stop):
        self.path = path
        self.stop = stop
        self.fd = None

    def __enter__(self):
        if fcntl is None:
            return self
        os.makedirs(os.path.dirname(self.path), exist_ok=True)
        self.fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o664)
        waited = False
        while True:
            try:
                fcntl.flock(self.fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                return self
            except BlockingIOError:
                pass
            except OSError as e:  # a filesystem without flock (some Lustre/NFS mounts): go on unlocked
                log("no file locking on this filesystem (%s); not guarding against a second downloader" % e)
                os.close(self.fd)
                self.fd = None
                return self
            if not waited:
                log("waiting for another process downloading into %s" % self.path[: -len(".lock")])
                waited = True
            if self.stop.wait(0.5):
                os.close(self.fd)
                self.fd = None
                raise Stopped()

    def __exit__(self, *exc):
        if self.fd is not None:
            try:
                fcntl.flock(self.fd, fcntl.LOCK_UN)
            finally:
                os.close(self.fd)
            self.fd = None
