"""Judging the files of a download: hashing them from disk a few at a time, comparing sizes and
digests with what the hub (or, offline, the .metadata records) says, and the verdict: verified,
mismatch, or corrupt when the checkpoint inspection finds a broken safetensors file."""

from __future__ import annotations

import os
import queue
import re
import threading

from ..core.hashing import BLOCK_BYTES, Stopped, hash_file
from .digests import new_hasher
from .hub import RemoteFile, Resolved
from .layout import LocalPaths, read_metadata
from .output import fmt_size, log, one_line, short
from .spec import select_paths

VERDICT_FILES_MAX = 20  # the mismatched files a verdict names; the rest are counted in files_more


def compare(rf, size, digest):
    """None if `rf` matches, else the mismatch line."""
    if size is None:
        return "mismatch in %s: missing, %s expected" % (rf.path, fmt_size(rf.size))
    if rf.size is not None and size != rf.size:
        return "mismatch in %s: %s bytes expected, %s found" % (rf.path, format(rf.size, ","), format(size, ","))
    if rf.sha256:
        if digest != rf.sha256:
            return "mismatch in %s: sha256 %s expected, %s found" % (rf.path, short(rf.sha256), short(digest))
    elif rf.blob_id:
        if digest != rf.blob_id:
            return "mismatch in %s: git blob id %s expected, %s found" % (rf.path, short(rf.blob_id), short(digest))
    return None


def _checkpoint_module():
    try:
        from ..checkpoints import report
        return report
    except ImportError as e:
        log("checkpoint inspection unavailable: %s" % e)
        return None


def inspect_checkpoint(spec, resolved):
    """(errors, warnings, note) from remote.checkpoint.inspect, when it exists and applies."""
    if spec["repo_type"] != "model":
        return [], [], None
    wanted = set(rf.path for rf in resolved.files)
    weights = [p for p in resolved.all_paths if p.endswith(".safetensors") or p.endswith(".safetensors.index.json")]
    if not any(p.endswith(".safetensors") for p in wanted):
        return [], [], None
    if any(p not in wanted for p in weights):
        return [], [], "checkpoint inspection skipped: only part of the repo's safetensors files were selected"
    mod = _checkpoint_module()
    if mod is None or not hasattr(mod, "inspect"):
        return [], [], None
    try:
        report = mod.inspect(spec["local_dir"], sha256=False)
    except Exception as e:
        return [], [], "checkpoint inspection failed: %s" % one_line("%s: %s" % (type(e).__name__, e))
    problems = (report or {}).get("problems") or []
    errors = [one_line(p.get("message", "")) for p in problems if p.get("level") == "error"]
    warnings = [one_line(p.get("message", "")) for p in problems if p.get("level") == "warning"]
    return errors, warnings, None


def verdict_for(spec, resolved, results, progress):
    """results: {path: (size or None, digest or None)}. Returns (state, verdict dict)."""
    mismatches = []
    for rf in resolved.files:
        size, digest = results[rf.path]
        line = compare(rf, size, digest)
        st = progress.file_state(rf.path)
        if line is None:
            if st is not None:
                st.state = "verified"
        else:
            mismatches.append((rf, line))
            if st is not None:
                st.state = "missing" if size is None else "mismatch"
    if mismatches:
        rf, line = mismatches[0]
        msg = line + (" (+%d more)" % (len(mismatches) - 1) if len(mismatches) > 1 else "")
        for _rf, l in mismatches:
            log(l)
        # The record carries the first few; every file's state is in files.jsonl (download.files).
        named = [m[0].path for m in mismatches[:VERDICT_FILES_MAX]]
        return "mismatch", {"status": "mismatch", "message": msg, "file": rf.path,
                            "files": named, "files_more": len(mismatches) - len(named)}
    total = sum(rf.size for rf in resolved.files)
    what = "sha256" if all(rf.sha256 for rf in resolved.files) else (
        "git blob id" if not any(rf.sha256 for rf in resolved.files) else "sha256 (LFS) and git blob id")
    msg = "verified %d file%s, %s, %s at %s" % (len(resolved.files), "" if len(resolved.files) == 1 else "s",
                                               fmt_size(total), what, (resolved.revision or "?")[:12])
    errors, warnings, note = inspect_checkpoint(spec, resolved)
    if errors:
        return "corrupt", {"status": "corrupt", "message": "corrupt: %s" % errors[0]
                           + (" (+%d more)" % (len(errors) - 1) if len(errors) > 1 else "")}
    if warnings:
        msg += "; checkpoint: %d warning%s (%s)" % (len(warnings), "" if len(warnings) == 1 else "s", warnings[0])
    if note:
        msg += "; " + note
    if resolved.source != "hub":
        msg += "; expected hashes from %s" % resolved.source
    return "verified", {"status": "verified", "message": msg}


def hash_tree(spec, resolved, progress, stop, workers=None):
    """Hash every selected file from disk: {path: (size or None, digest or None)}."""
    results = {}
    todo = queue.Queue()
    for rf in sorted(resolved.files, key=lambda f: -(f.size or 0)):
        todo.put(rf)

    def work():
        buf = bytearray(BLOCK_BYTES)
        while not stop.is_set():
            try:
                rf = todo.get_nowait()
            except queue.Empty:
                return
            st = progress.file_state(rf.path)
            path = LocalPaths(spec["local_dir"], rf.path).final
            try:
                size = os.path.getsize(path)
            except OSError:
                results[rf.path] = (None, None)
                continue
            if st is not None:
                st.state = "verifying"
                st.bytes_done = size

            def on(n, st=st):
                if st is not None:
                    st.bytes_checked += n

            if rf.size is not None and size != rf.size:
                results[rf.path] = (size, None)
                continue
            try:
                h = hash_file(path, new_hasher(rf, size), progress=on, stop=stop, buf=buf)
            except OSError as e:
                log("%s: cannot read: %s" % (rf.path, e))
                results[rf.path] = (None, None)
                continue
            results[rf.path] = (size, h.hexdigest())

    n = workers or max(1, min(4, os.cpu_count() or 1, len(resolved.files)))
    threads = [threading.Thread(target=work, daemon=True) for _ in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        while t.is_alive():
            t.join(0.5)
    if stop.is_set():
        raise Stopped()
    return results


def resolve_offline(spec):
    """Expected hashes from the .metadata records hf_hub_download and this job leave in local_dir."""
    meta = read_metadata(spec["local_dir"])
    if not meta:
        return None
    spec["_revision_label"] = "local metadata"
    all_paths = sorted(meta)
    chosen = select_paths(all_paths, spec)
    files, commits = [], set()
    for p in chosen:
        commit, etag = meta[p]
        commits.add(commit)
        if re.fullmatch(r"[0-9a-f]{64}", etag):
            files.append(RemoteFile(p, None, etag, None))
        else:
            files.append(RemoteFile(p, None, None, etag))
    if not files:
        return None
    return Resolved(commits.pop() if len(commits) == 1 else None, files, all_paths, source="local metadata")
