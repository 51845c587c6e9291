"""How a download reads, the same in the Downloads pane and in `specdeck download --wait` and
`verify`: the states of a download still at work, the verdicts it ends with, and the figures of
its progress (done, rate, ETA, size, repo) as text. No UI: the pane styles what it takes here."""

from remote.downloads.progress import FINAL_STATES as VERDICT_STATES  # noqa: F401 (the host's words for how a download ended)

from .. import display
from ..jobs import model as jobs

# A download job's `state` while it works (remote/downloads/progress.py writes them).
ACTIVE_STATES = ("queued", "resolving", "downloading", "verifying")
# The states before its file list is known: a total of 0 then means "not known yet".
UNRESOLVED_STATES = ACTIVE_STATES[:2]
# The states of a file a verification found wrong, which a repair downloads again.
BAD_FILE_STATES = ("mismatch", "missing")

# The figures of a download in the order the pane's table shows them: (label, key in figures()).
COLUMNS = (("id", "id"), ("kind", "kind"), ("state", "state"), ("done", "percent"), ("rate", "rate"), ("ETA", "eta"),
           ("size", "size"), ("repo", "repo"))


def progress(job):
    return job.get("progress") or {}


def is_active(job):
    """True while the download resolves, downloads or verifies."""
    return job["state"] in ACTIVE_STATES


def has_ended(job):
    """By its state, not its process: a verdict is final while the process is still exiting."""
    return job["state"] not in ACTIVE_STATES + jobs.UNFINISHED_STATES


def bytes_total(job):
    """The download's size, or None while the file list is not resolved yet (it reads 0 then)."""
    found = progress(job)
    if not found.get("bytes_total") and (job["state"] in UNRESOLVED_STATES or not file_counts(job).get("total")):
        return None
    return found.get("bytes_total")


def file_counts(job):
    """{total, done, verified, failed, working}: the files of a download by how far they got."""
    counts = progress(job).get("file_counts")
    return counts if isinstance(counts, dict) else {}


def files_line(job, of_total=True):
    """`2,950 of 3,000 files, 2,900 verified, 12 failed` (`2,950 done, ...` without the total),
    or "" before the file list is known."""
    counts = file_counts(job)
    total = counts.get("total")
    if not total:
        return ""
    done = counts.get("done") or 0
    if of_total:
        parts = ["{:,} of {:,} file{}".format(done, total, "" if total == 1 else "s")]
    else:
        parts = ["{:,} done".format(done)]
    parts += ["{:,} {}".format(counts[key], key) for key in ("verified", "failed") if counts.get(key)]
    return ", ".join(parts)


def percent(done, total):
    """` 42.0%`, five cells wide; `    -` while the total is not known."""
    return "%5.1f%%" % (100.0 * done / total) if total else "    -"


def repo(job):
    return progress(job).get("repo") or job.get("name") or ""


def local_dir(job, params=None):
    """Where the files go: known from the parameters, or from the job's own progress report."""
    return (params or {}).get("local_dir") or progress(job).get("local_dir")


def action(job):
    """`verify` for a job `download.verify` started, else `download`: the host records it in the
    job's meta; jobs recorded before it did are told by their name (`verify REPO in DIR`)."""
    meta = job.get("meta") or {}
    recorded = meta.get("action") if isinstance(meta, dict) else None
    if recorded in ("download", "verify"):
        return recorded
    return "verify" if (job.get("name") or "").startswith("verify ") else "download"


def figures(job):
    """{key: text} of one download: what the pane's row and the CLI's progress line show. Rate and
    ETA only while it works: an ended download's last rate is no figure of now."""
    found = progress(job)
    done, total = found.get("bytes_done") or 0, bytes_total(job)
    active = is_active(job)
    eta = found.get("eta_s")
    return {
        "id": display.safe_text(job["id"]),  # each a host's text: shown with its controls as escapes
        "kind": display.safe_text(action(job)),  # download or verify
        "state": display.safe_text(job["state"]),
        "percent": percent(done, total),
        "rate": display.format_rate(found.get("rate_bytes_per_s")) if active else "-",
        "eta": display.format_duration(eta) if active and eta is not None else "-",
        "done": display.format_decimal_bytes(done),
        "size": display.format_decimal_bytes(total),  # one unit, decimal as the hub shows sizes
        "repo": display.safe_text(repo(job)),
    }


def progress_line(job):
    """`j4  downloading   42.0%  420.00 MB / 1.00 GB  52.40 MB/s  ETA 0:00:11  2 of 3 files`: one
    line of a download as `specdeck download --wait` writes it while it runs."""
    shown = figures(job)
    line = "%(id)s  %(state)s  %(percent)s  %(done)s / %(size)s  %(rate)s  ETA %(eta)s" % shown
    files = files_line(job)
    return line + "  " + files if files else line
