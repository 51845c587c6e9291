"""Starting a download again (no UI): the parameters it was started with, which the host keeps in
the job's meta, and for a verification that found files wrong, the parameters that download only
those files again (the download verifies them when they are in)."""

from . import model

PARAM_KEYS = ("repo", "repo_type", "revision", "files", "include", "exclude", "local_dir", "endpoint", "python")


def params_from_meta(job):
    """A download's parameters, if the agent recorded them with the job."""
    meta = job.get("meta") or {}
    if isinstance(meta, dict) and meta.get("repo") and meta.get("local_dir"):
        return {key: meta.get(key) for key in PARAM_KEYS}
    return None


def bad_files(job):
    """The files a verification found wrong (mismatched or missing), in the job's order."""
    progress = model.progress(job)
    found = [entry["path"] for entry in progress.get("files") or () if entry.get("state") in model.BAD_FILE_STATES and entry.get("path")]
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
