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
    """The files a verification found wrong (mismatched or missing), in the job's order, as its
    verdict names them; None when it found more than a verdict names (the record is bounded)."""
    verdict = model.progress(job).get("verdict") or {}
    if verdict.get("files_more"):
        return None
    return [path for path in verdict.get("files") or () if isinstance(path, str)]


def repair_params(job):
    """download.start parameters that fetch again only the files a verification found wrong (the
    download verifies them when they are in), or None when there is nothing to repair. With more
    wrong files than the verdict names, the whole download again: it keeps what is right (each
    file there is hashed) and fetches the rest."""
    params = params_from_meta(job)
    if params is None or job["state"] != "mismatch":
        return None
    files = bad_files(job)
    if files is None:
        return dict(params)
    if not files:
        return None
    return dict(params, files=files, include=[], exclude=[])
