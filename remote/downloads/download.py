"""The download job: fetch a repo's files from the hub onto this host, then verify them.

Runs on the GPU host as a detached process of its own, under an interpreter that has
huggingface_hub (imported lazily here, so the stdlib-only agent can import this module and
still get a clear answer when it is missing). Entry point `main(argv)`, each step given the
job's own directory, which holds spec.json (written by the wire method before anything runs):

  download-plan JOB_DIR     writes JOB_DIR/plan.json: the files, sizes, hashes, free space, or
                            the error; exit 0 when the plan is good
  download JOB_DIR          fetch (resuming what is there) and verify the files of plan.json
                            (resolving them again only when there is no plan); exit 0 verified,
                            1 mismatch or corrupt, 2 any other failure
  verify JOB_DIR            verify an existing directory without downloading; the last stdout
                            line is the verdict as JSON

SPEC: {"repo": "org/name", "repo_type": "model"|"dataset", "revision": null|str,
       "files": [...], "include": [globs], "exclude": [globs], "local_dir": str,
       "endpoint": null|str}
Selection: explicit `files` are always taken (a missing one is an error); `include` globs (fnmatch,
a trailing "/" means the whole folder) add matching repo files; with neither, every file is taken;
`exclude` globs drop glob-selected files.

How the bytes move. huggingface_hub's metadata calls (repo_info for the commit, then the
paginated tree listing, or get_paths_info when only explicit files are asked for) give each
file's size, git blob id and LFS sha256 at that commit; the plan then HEADs the smallest file,
since a gated repo's listing is public but its files are not. The bytes come from the same
`resolve/{commit}/{path}` URL that hf_hub_download uses, but through our own ranged GET: since
huggingface_hub 2.x, hf_hub_download writes to a process-unique temporary file and deletes it on
failure, so a second run can no longer continue a partial file. Here a partial file lives where
huggingface_hub 1.x keeps it, `local_dir/.cache/huggingface/download/<hash>.<etag>.incomplete`,
and a second run sends `Range: bytes=<have>-`. Finished files get the same `.metadata` record
hf_hub_download writes, so `hf download --local-dir` sees them as up to date. Each file is hashed
while it arrives (sha256 for LFS files, the git blob sha1 for the others) in a thread of its own,
so verification after the last byte compares digests instead of reading gigabytes again.

progress.json (in JOB_DIR, replaced atomically, at most ~4 times a second):
  {"job": "download"|"verify", "repo", "repo_type", "revision", "local_dir",
   "state": "queued"|"resolving"|"downloading"|"verifying"|"verified"|"mismatch"|"corrupt"|"failed",
   "files": [{"path", "bytes_total", "bytes_done", "bytes_checked", "state"}],
   "bytes_total", "bytes_done", "bytes_checked", "rate_bytes_per_s", "eta_s",
   "verdict": null|{"status": "verified"|"mismatch"|"corrupt"|"error", "message", "file"?},
   "error": null|str, "started_at", "updated_at"}     (times: seconds since the epoch)
File states: queued, checking (hashing a file already there), present (already there and
right), downloading, downloaded, retrying, verifying, verified, mismatch, missing, failed.
`bytes_done` counts bytes on disk (resumed and present ones included); the rate counts only
bytes received by this run; `bytes_checked` counts bytes hashed.

SIGTERM/SIGINT stop the job (exit 2, partial files kept for the next run); SIGHUP does not, so
a job started under nohup outlives its shell. Environment knobs: SPECDECK_DOWNLOAD_WORKERS
(files in parallel, 4), SPECDECK_DOWNLOAD_RETRIES (per file, 5, reset whenever bytes arrive).

No token ever reaches the log, progress.json, plan.json or an error message: every string that
leaves the job is scrubbed of the token huggingface_hub finds (HF_TOKEN, which the console's token
arrives as, in the job's environment only, or the host's login).

The job is split by concern: hub.py talks to the hub (the spec and its file selection, resolving
the file list, classifying failures into PlanError types, HTTP that keeps the token with the hub),
transfer.py moves the bytes (ranged resumable fetch hashed while receiving, file locks, the local
layout and .metadata, free space), progress.py writes progress.json; this module plans, runs and
judges the download, download-plan and verify jobs.
"""

from __future__ import annotations

import http.client
import json
import os
import queue
import re
import signal
import sys
import threading
import time

from ..core import hashing
from ..core.hashing import hash_file
from ..core.hashing import Stopped
from .failures import PlanError, classify, http_error
from .hub import RemoteFile, Resolved, hub_endpoint, hub_headers, hub_token, import_hf, resolve, resolve_url
from .hub_http import Transient, http_open
from .output import fmt_gb, fmt_size, log, one_line, scrub, short
from .spec import load_spec, normalize_spec, select_paths
from .progress import FileState, Progress
from .digests import new_hasher
from .disk_space import mount_point, space_check
from .layout import LocalPaths, read_metadata
from .transfer import Downloader

SPEC_FILE = "spec.json"
PLAN_FILE = "plan.json"


# --------------------------------------------------------------------------- plan


def plan(spec):
    """The download-plan answer as a dict ({"ok": true, ...} or {"ok": false, "error": ...})."""
    try:
        spec = normalize_spec(spec)
        hf = import_hf()
        resolved, have, need, free = _plan(spec, hf)
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
    path = os.path.join(job_dir, PLAN_FILE)
    tmp = "%s.tmp%d" % (path, os.getpid())
    with open(tmp, "w", encoding="utf-8") as f:
        f.write(scrub(json.dumps(answer, ensure_ascii=False)) + "\n")
    os.replace(tmp, path)


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
    asked = spec.get("revision") or "main"
    spec["_endpoint_label"] = hub_endpoint(hf, spec)
    spec["_revision_label"] = asked if asked == revision else "%s (%s)" % (asked, revision[:7])
    files = [RemoteFile(f["path"], f["size"], f.get("sha256"), f.get("blob_id")) for f in answer["files"]]
    return Resolved(revision, files, answer.get("all_paths") or [f.path for f in files])


def _plan(spec, hf):
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


# --------------------------------------------------------------------------- verification


def compare(rf, size, digest):
    """None if `rf` matches, else the mismatch line."""
    if size is None:
        return "mismatch in %s: missing (%s expected)" % (rf.path, fmt_size(rf.size))
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
        st = progress_file(progress, rf.path)
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
        return "mismatch", {"status": "mismatch", "message": msg, "file": rf.path,
                            "files": [m[0].path for m in mismatches]}
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


def progress_file(progress, path):
    for f in progress.files:
        if f.path == path:
            return f
    return None


def hash_tree(spec, resolved, progress, stop, workers=None):
    """Hash every selected file from disk: {path: (size or None, digest or None)}."""
    results = {}
    todo = queue.Queue()
    for rf in sorted(resolved.files, key=lambda f: -(f.size or 0)):
        todo.put(rf)

    def work():
        buf = bytearray(hashing.BLOCK_BYTES)
        while not stop.is_set():
            try:
                rf = todo.get_nowait()
            except queue.Empty:
                return
            st = progress_file(progress, rf.path)
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


# --------------------------------------------------------------------------- jobs


def _begin(kind, spec, job_dir):
    """The progress file and the stop event of a download or verify job, signals wired to it."""
    progress = Progress(job_dir, kind, spec)
    stop = threading.Event()
    stop.signum = None
    _install_signals(stop)
    return progress, stop


def _install_signals(stop):
    def handler(signum, _frame):
        stop.set()
        stop.signum = signum

    if threading.current_thread() is threading.main_thread():
        for s in (signal.SIGTERM, signal.SIGINT):  # not SIGHUP: a nohup'd job must outlive its shell
            try:
                signal.signal(s, handler)
            except (OSError, ValueError):
                pass


def _fail(progress, message, verdict=None):
    message = one_line(scrub(message))
    log("error: %s" % message)
    progress.set(state="failed", error=message, verdict=verdict)
    return 2


def run_download(spec, job_dir):
    progress, stop = _begin("download", spec, job_dir)
    t_start = time.monotonic()
    try:
        log("download %s%s at %s into %s" % ("dataset " if spec["repo_type"] == "dataset" else "", spec["repo"],
                                             spec.get("revision") or "main", spec["local_dir"]))
        progress.set(state="resolving")
        try:
            hf = import_hf()
            planned = read_plan(job_dir, spec)
            if planned is not None:  # the start-up planned it a moment ago: do not ask the hub again
                hub_token(hf)
                resolved = resolved_from_plan(spec, hf, planned)
                need, free = planned["to_fetch_bytes"], planned["free_bytes"]
            else:
                resolved, have, need, free = _plan(spec, hf)
        except PlanError as e:
            return _fail(progress, "%s: %s" % (e.type, e.message))
        total = sum(rf.size for rf in resolved.files)
        log("revision %s: %d file%s, %s; %s to fetch, %s free%s" % (
            resolved.revision, len(resolved.files), "" if len(resolved.files) == 1 else "s", fmt_size(total),
            fmt_size(need), fmt_gb(free), " (as planned)" if planned is not None else ""))
        dl = Downloader(spec, hf, resolved, progress, stop)
        progress.files = [dl.progress_state(rf) for rf in resolved.files]
        progress.set(revision=resolved.revision, state="downloading")
        os.makedirs(spec["local_dir"], exist_ok=True)
        t_dl = time.monotonic()
        try:
            digests = dl.run()
        except PlanError as e:
            return _fail(progress, "%s: %s" % (e.type, e.message))
        t_last_byte = time.monotonic()
        fetched = progress.fetched()
        rate = fetched / max(t_last_byte - t_dl, 1e-6)
        progress.final_rate = rate if fetched else 0.0
        log("downloaded %s in %.2f s (%.1f MB/s)" % (fmt_size(fetched), t_last_byte - t_dl, rate / 1e6))
        progress.set(state="verifying")
        results = {}
        for rf in resolved.files:
            path = LocalPaths(spec["local_dir"], rf.path).final
            try:
                size = os.path.getsize(path)
            except OSError:
                size = None
            results[rf.path] = (size, digests.get(rf.path))
        missing_digest = [rf for rf in resolved.files if results[rf.path][1] is None and results[rf.path][0]]
        if missing_digest:
            sub = Resolved(resolved.revision, missing_digest, resolved.all_paths)
            results.update(hash_tree(spec, sub, progress, stop))
        state, verdict = verdict_for(spec, resolved, results, progress)
        log("%s (%.2f s after the last byte; %.1f s in all)" % (verdict["message"], time.monotonic() - t_last_byte,
                                                                 time.monotonic() - t_start))
        progress.set(state=state, verdict=verdict)
        return 0 if state == "verified" else 1
    except Stopped:
        sig = getattr(stop, "signum", None)
        name = signal.Signals(sig).name if sig else "a signal"
        kept = sum(f.bytes_done for f in progress.files)
        return _fail(progress, "stopped by %s; %s on disk are kept for the next run" % (name, fmt_size(kept)))
    except Exception as e:
        return _fail(progress, "internal error: %s: %s" % (type(e).__name__, e))
    finally:
        progress.close()


def run_verify(spec, job_dir):
    progress, stop = _begin("verify", spec, job_dir)
    verdict = None
    code = 2
    try:
        progress.set(state="resolving")
        resolved = None
        if not os.path.isdir(spec["local_dir"]):
            raise PlanError("FileNotFound", "%s is not a directory" % spec["local_dir"])
        offline_reason = None
        try:
            hf = import_hf()
            token = hub_token(hf)
            try:
                resolved = resolve(spec, hf)
            except Exception as e:
                err = classify(e, spec, have_token=bool(token))
                if err.type != "NetworkUnreachable":
                    raise err
                offline_reason = err.message
        except PlanError as e:
            if e.type != "MissingDependency":
                raise
            offline_reason = e.message
        if resolved is None:
            resolved = resolve_offline(spec)
            if resolved is None:
                raise PlanError("NetworkUnreachable", offline_reason + "; and no download metadata in %s"
                                % spec["local_dir"])
            log("hub unavailable (%s); using the hashes recorded when the files were downloaded" % offline_reason)
        progress.files = [FileState(rf.path, rf.size) for rf in resolved.files]
        progress.set(revision=resolved.revision, state="verifying")
        log("verifying %d file%s in %s" % (len(resolved.files), "" if len(resolved.files) == 1 else "s",
                                           spec["local_dir"]))
        t0 = time.monotonic()
        results = hash_tree(spec, resolved, progress, stop)
        for rf in resolved.files:  # offline: sizes come from the disk
            if rf.size is None and results[rf.path][0] is not None:
                rf.size = results[rf.path][0]
        state, verdict = verdict_for(spec, resolved, results, progress)
        log("%s (%.2f s)" % (verdict["message"], time.monotonic() - t0))
        progress.set(state=state, verdict=verdict)
        code = 0 if state == "verified" else 1
        verdict = dict(verdict, revision=resolved.revision, files=[
            {"path": rf.path, "size": rf.size, "state": progress_file(progress, rf.path).state}
            for rf in resolved.files])
    except Stopped:
        verdict = {"status": "error", "message": "stopped"}
        _fail(progress, "stopped", verdict)
    except PlanError as e:
        verdict = {"status": "error", "message": scrub(one_line(e.message)), "type": e.type}
        _fail(progress, "%s: %s" % (e.type, e.message), verdict)
    except Exception as e:
        verdict = {"status": "error", "message": scrub(one_line("%s: %s" % (type(e).__name__, e))),
                   "type": "InternalError"}
        _fail(progress, verdict["message"], verdict)
    finally:
        progress.close()
    print(scrub(json.dumps(verdict, ensure_ascii=False)), flush=True)
    return code


USAGE = "usage: download|download-plan|verify JOB_DIR  (JOB_DIR holds spec.json)"


def main(argv=None):
    argv = list(sys.argv[1:] if argv is None else argv)
    if len(argv) != 2 or argv[0] not in ("download", "download-plan", "verify") or not os.path.isdir(argv[1]):
        print(USAGE, file=sys.stderr)
        return 2
    cmd, job_dir = argv
    job_dir = os.path.abspath(job_dir)
    spec_path = os.path.join(job_dir, SPEC_FILE)
    if cmd == "download-plan":
        try:
            answer = plan(load_spec(spec_path))
        except PlanError as e:
            answer = {"ok": False, "error": e.to_json()}
        write_plan(job_dir, answer)
        return 0 if answer.get("ok") else 2
    try:
        spec = load_spec(spec_path)
    except PlanError as e:
        progress = Progress(job_dir, cmd, {})
        try:
            if cmd == "verify":
                verdict = {"status": "error", "message": e.message, "type": e.type}
                _fail(progress, "%s: %s" % (e.type, e.message), verdict)
                print(json.dumps(verdict), flush=True)
                return 2
            return _fail(progress, "%s: %s" % (e.type, e.message))
        finally:
            progress.close()
    if cmd == "download":
        return run_download(spec, job_dir)
    return run_verify(spec, job_dir)


if __name__ == "__main__":
    sys.exit(main())
