"""What the console reads from a download job (no UI): its progress, size, repo and directory,
whether it downloaded or verified, the parameters to start it again, and the files a failed
verification found wrong, which a repair downloads again."""

RUNNING_STATES = ("queued", "resolving", "downloading", "verifying")
PARAM_KEYS = ("repo", "repo_type", "revision", "files", "include", "exclude", "local_dir", "endpoint", "python")
# File states of a verification that a repair fetches again.
BAD_FILE_STATES = ("mismatch", "missing")


def percent(done, total):
    return "%5.1f%%" % (100.0 * done / total) if total else "    -"


def job_progress(job):
    return job.get("progress") or {}


def bytes_total(job):
    """The download's size, or None while the file list is not resolved yet (it reads 0 then)."""
    progress = job_progress(job)
    if not progress.get("bytes_total") and (job["state"] in ("queued", "resolving") or not progress.get("files")):
        return None
    return progress.get("bytes_total")


def job_repo(job):
    return job_progress(job).get("repo") or job.get("name") or ""


def job_local_dir(job, params=None):
    """Where the files go: known from the parameters, or from the job's own progress report."""
    return (params or {}).get("local_dir") or job_progress(job).get("local_dir")


def job_action(job):
    """`verify` for a job `download.verify` started, else `download`: the host records it in the
    job's meta; jobs recorded before it did are told by their name (`verify REPO in DIR`)."""
    meta = job.get("meta") or {}
    action = meta.get("action") if isinstance(meta, dict) else None
    if action in ("download", "verify"):
        return action
    return "verify" if (job.get("name") or "").startswith("verify ") else "download"


def has_ended(job):
    """By its state, not its process: a verdict is final while the process is still exiting."""
    return job["state"] not in RUNNING_STATES + ("running", "starting", "stopping")


def params_from_meta(job):
    """A download's parameters, if the agent recorded them with the job."""
    meta = job.get("meta") or {}
    if isinstance(meta, dict) and meta.get("repo") and meta.get("local_dir"):
        return {key: meta.get(key) for key in PARAM_KEYS}
    return None


def bad_files(job):
    """The files a verification found wrong (mismatched or missing), in the job's order."""
    progress = job_progress(job)
    found = [entry["path"] for entry in progress.get("files") or () if entry.get("state") in BAD_FILE_STATES and entry.get("path")]
    if found:
        return found
    named = (progress.get("verdict") or {}).get("files") or []
    return [path for path in named if isinstance(path, str)]


def repair_params(job):
    """download.start parameters that fetch again only the files a verification found wrong (the
    download verifies them when they are in), or None when there is nothing to repair."""
    params = params_from_meta(job)
    files = bad_files(job) if job["state"] == "mismatch" else []
    if params is None or not files:
        return None
    return dict(params, files=files, include=[], exclude=[])
