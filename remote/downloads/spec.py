"""A download job's spec (spec.json: the repo, revision, file selection, local_dir and endpoint),
checked and normalized, and the selection it makes from a repo's paths: explicit `files` always,
`include` globs adding, `exclude` globs dropping, every file when neither is given."""

from __future__ import annotations

import fnmatch
import json
import os
import re

from .failures import PlanError


def load_spec(path):
    try:
        with open(path, encoding="utf-8") as f:
            spec = json.load(f)
    except OSError as e:
        raise PlanError("BadRequest", "cannot read spec %s: %s" % (path, e.strerror or e))
    except ValueError as e:
        raise PlanError("BadRequest", "spec %s is not JSON: %s" % (path, e))
    return normalize_spec(spec)


def normalize_spec(spec):
    if not isinstance(spec, dict):
        raise PlanError("BadRequest", "spec must be a JSON object")
    out = dict(spec)
    repo = spec.get("repo")
    if not isinstance(repo, str) or not re.fullmatch(r"[A-Za-z0-9][\w.\-]*(/[\w.\-]+)?", repo or "") \
            or ".." in repo:
        raise PlanError("BadRequest", "repo must look like org/name, got %r" % (repo,))
    repo_type = spec.get("repo_type") or "model"
    if repo_type not in ("model", "dataset"):
        raise PlanError("BadRequest", "repo_type must be model or dataset, got %r" % (repo_type,))
    revision = spec.get("revision")
    if revision is not None and (not isinstance(revision, str) or not revision.strip()):
        raise PlanError("BadRequest", "revision must be null or a non-empty string")
    files = spec.get("files") or []
    include = spec.get("include") or []
    exclude = spec.get("exclude") or []
    for name, value in (("files", files), ("include", include), ("exclude", exclude)):
        if not isinstance(value, list) or not all(isinstance(v, str) and v for v in value):
            raise PlanError("BadRequest", "%s must be a list of non-empty strings" % name)
    clean = []
    for f in files:
        p = f.replace("\\", "/").lstrip("/")
        if p.startswith("./"):
            p = p[2:]
        if not p or any(part in ("", ".", "..") for part in p.split("/")):
            raise PlanError("BadRequest", "bad file path %r" % (f,))
        if p not in clean:
            clean.append(p)
    local_dir = spec.get("local_dir")
    if not isinstance(local_dir, str) or not local_dir.strip():
        raise PlanError("BadRequest", "local_dir must be a non-empty path")
    endpoint = spec.get("endpoint")
    if endpoint is not None:
        if not isinstance(endpoint, str) or not re.match(r"^https?://[^/\s]+", endpoint):
            raise PlanError("BadRequest", "endpoint must be null or an http(s) URL, got %r" % (endpoint,))
        endpoint = endpoint.rstrip("/")
    out.update(repo=repo, repo_type=repo_type, revision=revision, files=clean, include=list(include),
               exclude=list(exclude), local_dir=os.path.abspath(os.path.expanduser(local_dir)),
               endpoint=endpoint)
    return out


def bad_name(name):
    """Why a repo file name would leave its folder (`..`, absolute, empty part, a control
    character), or None for a name that stays inside."""
    if not isinstance(name, str) or not name:
        return "an empty name"
    if any(ord(c) < 32 or 0x7f <= ord(c) < 0xa0 for c in name):
        return "a control character"
    if name.startswith("/") or "\\" in name or re.match(r"^[A-Za-z]:", name):
        return "an absolute path"
    if any(part in ("", ".", "..") for part in name.split("/")):
        return "a `..`, `.` or empty part"
    return None


def check_names(names, repo):
    """Raises a one-line BadRequest naming the first hub file name that would escape local_dir."""
    for name in names:
        why = bad_name(name)
        if why:
            raise PlanError("BadRequest", "refusing %s's file name %s: %s (it would be written outside "
                            "the local directory); nothing was written" % (repo, ascii(name), why))


def _matches(path, patterns):
    for p in patterns:
        if p.endswith("/"):
            p += "*"
        if fnmatch.fnmatch(path, p):
            return True
    return False


def select_paths(all_paths, spec):
    """The repo paths the spec asks for, in repo order; raises FileNotFound for a missing one."""
    files, include, exclude = spec["files"], spec["include"], spec["exclude"]
    known = set(all_paths)
    missing = [f for f in files if f not in known]
    folders = [f for f in missing if any(p.startswith(f.rstrip("/") + "/") for p in all_paths)]
    if folders:
        raise PlanError("BadRequest", "%s is a folder in %s; name its files or use include [\"%s/\"]"
                        % (folders[0], spec["repo"], folders[0].rstrip("/")))
    if missing:
        raise PlanError("FileNotFound", "%s not found in %s at %s" % (
            ", ".join(missing[:5]) + (" (+%d more)" % (len(missing) - 5) if len(missing) > 5 else ""),
            spec["repo"], spec.get("_revision_label") or spec.get("revision") or "main"))
    chosen = set(files)
    if include or not files:
        for p in all_paths:
            if (not include or _matches(p, include)) and not _matches(p, exclude):
                chosen.add(p)
    return [p for p in all_paths if p in chosen]
