"""The download-plan step: what a spec selects at which commit, each file's size and hash, what
is already on disk, the free space, and whether this host may fetch the files at all (a gated
repo lists its files to anyone); written to plan.json, which the download job then reuses
instead of asking the hub again."""

from __future__ import annotations

import http.client
import json
import os

from .disk_space import mount_point, space_check
from .failures import PlanError, classify, http_error
from .hub import (RemoteFile, Resolved, hub_endpoint, hub_headers, hub_token, import_hf, resolve, resolve_url,
                  revision_label)
from .hub_http import Transient, http_open
from ..core.records import replace_file
from .output import fmt_size, one_line, scrub
from .spec import check_names, normalize_spec

PLAN_FILE = "plan.json"


def plan(spec):
    """The download-plan answer as a dict ({"ok": true, ...} or {"ok": false, "error": ...})."""
    try:
        spec = normalize_spec(spec)
        hf = import_hf()
        resolved, have, need, free = make_plan(spec, hf)
    except PlanError as e:
        return {"ok": False, "error": e.to_json()}
    except Exception as e:  # a bug: still one line
        return {"ok": False, "error": {"type": "InternalError",
                                       "message": scrub(one_line("%s: %s" % (type(e).__name__, e)))}}
    files = []
    for rf in resolved.files:
        d = rf.to_json()
        d["present_bytes"] = have[rf.path]
        files.append(d)
    return {"ok": True, "repo": spec["repo"], "repo_type": spec["repo_type"], "revision": resolved.revision,
            "files": files, "total_bytes": sum(rf.size for rf in resolved.files), "to_fetch_bytes": need,
            "free_bytes": free, "local_dir": spec["local_dir"], "all_paths": resolved.all_paths}


def write_plan(job_dir, answer):
    """plan.json in the job's directory (atomically: the wire method reads it once we exit)."""
    text = scrub(json.dumps(answer, ensure_ascii=False)) + "\n"
    replace_file(os.path.join(job_dir, PLAN_FILE), text, encoding="utf-8")


def read_plan(job_dir, spec):
    """The good plan of this job's spec written by download-plan, or None (then the job plans)."""
    try:
        with open(os.path.join(job_dir, PLAN_FILE), encoding="utf-8") as f:
            answer = json.load(f)
    except (OSError, ValueError):
        return None
    if not isinstance(answer, dict) or not answer.get("ok"):
        return None
    if (answer.get("repo"), answer.get("repo_type"), answer.get("local_dir")) != (
            spec["repo"], spec["repo_type"], spec["local_dir"]):
        return None
    return answer


def resolved_from_plan(spec, hf, answer):
    """The plan's files as resolve() gives them, without asking the hub again."""
    revision = answer["revision"]
    spec["_endpoint_label"] = hub_endpoint(hf, spec)
    spec["_revision_label"] = revision_label(spec, revision)
    files = [RemoteFile(f["path"], f["size"], f.get("sha256"), f.get("blob_id")) for f in answer["files"]]
    check_names([f.path for f in files], spec["repo"])
    return Resolved(revision, files, answer.get("all_paths") or [f.path for f in files])


def make_plan(spec, hf):
    """(resolved, bytes present per path, bytes to fetch, bytes free) of a spec the hub can serve
    and the disk can hold; else the PlanError that says why not."""
    token = hub_token(hf)
    try:
        resolved = resolve(spec, hf)
    except Exception as e:
        raise classify(e, spec, have_token=bool(token))
    _probe(spec, hf, resolved, token)
    have, need, free, base = space_check(spec, resolved)
    if need > free:
        mp = mount_point(base)
        raise PlanError("NoSpace", "needs %s on %s, %s free" % (fmt_size(need), mp, fmt_size(free)),
                        needed_bytes=need, free_bytes=free, path=mp)
    return resolved, have, need, free


def _probe(spec, hf, resolved, token):
    """HEAD the smallest selected file: a gated repo's metadata is public, its files are not."""
    rf = min(resolved.files, key=lambda f: f.size)
    url = resolve_url(hub_endpoint(hf, spec), spec, resolved.revision, rf.path)
    headers = hub_headers(hf)
    try:
        resp = http_open(url, headers, method="HEAD", timeout=30, follow=False)
    except (Transient, OSError, http.client.HTTPException) as e:
        raise classify(e, spec, have_token=bool(token))
    code = resp.getcode()
    resp.close()
    if code >= 400:
        raise http_error(resp, spec, rf.path, bool(token))
