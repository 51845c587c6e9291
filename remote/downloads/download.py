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

progress.json (in JOB_DIR, replaced atomically, at most ~4 times a second), the same size
whatever the number of files, since the job's record carries it:
  {"job": "download"|"verify", "repo", "repo_type", "revision", "local_dir",
   "state": "queued"|"resolving"|"downloading"|"verifying"|"verified"|"mismatch"|"corrupt"|"failed"|"stopped",
   "file_counts": {"total", "done", "verified", "failed", "working"},
   "current_files": [FILE] (the first 4 at work), "failed_files": [FILE] (the first 5),
   "bytes_total", "bytes_done", "bytes_checked", "rate_bytes_per_s", "eta_s",
   "verdict": null|{"status": "verified"|"mismatch"|"corrupt"|"error"|"stopped", "message", "file"?,
                    "files"? (the first 20 mismatched), "files_more"?,
                    "kept_bytes"? (a stopped download: the bytes on disk for the next run)},
   "error": null|str, "started_at", "updated_at"}     (times: seconds since the epoch)
FILE: {"path", "bytes_total", "bytes_done", "bytes_checked", "state"} (a path cut at 256
characters). files.jsonl beside it holds every file: a header line {"total", "updated_at"},
then [path, bytes_total, bytes_done, bytes_checked, state] per file (download.files pages it).
File states: queued, checking (hashing a file already there), present (already there and
right), downloading, downloaded, retrying, verifying, verified, mismatch, missing, failed;
`done` counts present, downloaded, verifying and verified files, `failed` the failed,
mismatched and missing ones.
`bytes_done` counts bytes on disk (resumed and present ones included); the rate counts only
bytes received by this run, and only the time since its first byte (none before half a second
of transfer); `bytes_checked` counts bytes hashed.

SIGTERM/SIGINT stop the job: state "stopped", no error, a verdict {"status": "stopped"} saying
what is kept on disk (exit 2, partial files kept for the next run); SIGHUP does not, so a job
started under nohup outlives its shell. Environment knobs: SPECDECK_DOWNLOAD_WORKERS
(files in parallel, 4), SPECDECK_DOWNLOAD_RETRIES (per file, 5, reset whenever bytes arrive).

No token ever reaches the log, progress.json, plan.json or an error message: every string that
leaves the job is scrubbed of the token huggingface_hub finds (HF_TOKEN, which the console's token
arrives as, in the job's environment only, or the host's login).

The job is split by concern: spec.py (the spec and its file selection), hub.py (huggingface_hub:
token, endpoint, resolving the files at a commit), failures.py (PlanError and classifying what
failed), hub_http.py (HTTP that keeps the token with the hub), transfer.py (the ranged resumable
fetch), digests.py (hashing while receiving), layout.py (the local layout, .metadata and locks),
disk_space.py (free space), plan.py (the download-plan step), verify.py (hashing from disk and the
verdict), progress.py (progress.json and files.jsonl), output.py (scrubbed log and files); this module runs the
download, download-plan and verify jobs.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import threading
import time

from ..checkpoints.verdicts import verdict as shaped_verdict
from ..core.hashing import Stopped
from .failures import PlanError, classify
from .hub import Resolved, hub_token, import_hf, resolve
from .layout import LocalPaths, write_download_record
from .output import fmt_gb, fmt_size, log, one_line, scrub
from .plan import make_plan, plan, read_plan, resolved_from_plan, write_plan
from .progress import STOPPED, FileState, Progress
from .spec import load_spec
from .transfer import Downloader
from .verify import hash_tree, resolve_offline, verdict_for

SPEC_FILE = "spec.json"


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


def _stopped(progress, stop, message, **extra):
    """A stop that was asked for (SIGTERM, SIGINT): state "stopped", no error; the verdict says
    what is left. Exit 2, as before: the job did not do what it was started for."""
    sig = getattr(stop, "signum", None)
    log("stopped by %s: %s" % (signal.Signals(sig).name if sig else "a signal", message))
    progress.stop_files()
    progress.set(state=STOPPED, error=None, verdict=dict(shaped_verdict(STOPPED, message), **extra))
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
                resolved, have, need, free = make_plan(spec, hf)
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
        try:
            write_download_record(spec)
        except OSError as e:  # only a later verify's convenience: not worth failing the download
            log("could not record the download in %s: %s" % (spec["local_dir"], e.strerror or e))
        t_dl = time.monotonic()
        try:
            digests = dl.run()
        except PlanError as e:
            return _fail(progress, "%s: %s" % (e.type, e.message))
        t_last_byte = time.monotonic()
        fetched = progress.fetched()
        # The rate of the transfer itself: from the first byte, not from the first request.
        rate = fetched / max(t_last_byte - (progress.first_byte_at or t_dl), 1e-6)
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
        kept = sum(f.bytes_done for f in progress.files)
        return _stopped(progress, stop, "%s on disk kept for the next run" % fmt_size(kept), kept_bytes=kept)
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
            {"path": rf.path, "size": rf.size, "state": progress.file_state(rf.path).state}
            for rf in resolved.files])
    except Stopped:
        checked = sum(1 for f in progress.files if f.state in ("verified", "mismatch", "missing"))
        _stopped(progress, stop, "%d of %d file%s checked before the stop" % (
            checked, len(progress.files), "" if len(progress.files) == 1 else "s"))
        verdict = progress.verdict
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
