"""How a job reads, the same in the Jobs pane and in `specdeck jobs`, `stop --wait` and `logs -f`:
which states mean it still runs (the host's own list), the figures a row shows (state, runtime,
exit, start time), and how it ended, in one line. Every capability whose work runs as a job
(downloads, servers, training runs) asks here whether one is live or ended badly."""

import time

from remote.core.words import LIVE_STATES, STALLED, STOPPED, how_it_ended, minutes  # the host's words, spelled once

from .. import display

# A job's `state` while its process still runs: the live process states, and `stopping` (a stop
# was asked for and the process has not exited yet).
UNFINISHED_STATES = LIVE_STATES + ("stopping",)
# Process states of a job that ended badly: a non-zero exit or an error, or a supervisor that
# died without recording an exit (`lost`).
FAILED_STATES = ("failed", "lost")

# The figures of a job, in the order both the table and `specdeck jobs` show them: what a
# babysitter reads first comes first; the name, the widest, is last, so a narrow terminal cuts
# the name, never the state, runtime or exit code.
COLUMNS = (("id", "id"), ("kind", "kind"), ("state", "state"), ("runtime", "runtime"), ("exit", "exit"), ("started", "started"),
           ("name", "name"))


def is_ours(job_id):
    """True for an id of a job specdeck started (`j12`); others (`s345`) are the user's jobs that
    a scheduler runs and we only watch."""
    return job_id.startswith("j")


def with_engine_fields(job):
    """The job with the fields every job has in `specdeck jobs --json`, whatever runs it and
    however old the agent: `engine` (local, slurm), `slurm_id`, `nodes`, `pending_reason`, `foreign`."""
    job = dict(job)
    job.setdefault("engine", "local")
    job.setdefault("slurm_id", None)
    job.setdefault("nodes", [])
    job.setdefault("pending_reason", None)
    job.setdefault("foreign", False)
    return job


def id_text(job):
    """`j12`, `j12 (slurm 345)` for a Slurm job of ours, `s345 (not ours)` for a user's own."""
    if job.get("foreign"):
        return "%s (not ours)" % job["id"]
    if job.get("slurm_id"):
        return "%s (slurm %s)" % (job["id"], job["slurm_id"])
    return job["id"]


def state_text(job, now=None):
    """The state, with the reason Slurm gives for a pending job: `pending: Resources`, and how
    long a live job has stood still while its stall alert is open: `training, stalled 8 min`."""
    state = job.get("state") or "?"
    if job.get("stalled_since") and is_live(job):
        return "%s, %s %s" % (state, STALLED, minutes((now or time.time()) - job["stalled_since"]))
    if job.get("pending_reason"):
        return "%s: %s" % (state, job["pending_reason"])
    return state


def process_state(job):
    """The job's process state (`running`, `succeeded`, ...); a job described without one by its state."""
    return job.get("process_state", job.get("state"))


def is_live(job):
    """True while the job's process runs (or is being started)."""
    return process_state(job) in LIVE_STATES


def has_failed(job):
    """True for a job whose process ended badly: an exit code other than 0, an error, or lost."""
    return process_state(job) in FAILED_STATES


def runtime(job, now=None):
    """Seconds it ran (or has run so far), or None before it started."""
    start = job.get("started_at")
    if not start:
        return None
    return (job.get("ended_at") or now or time.time()) - start


def exit_text(job):
    """How a job ended, in a column's words: `0`, `1`, `sig 9`, or `-` while it runs."""
    if job.get("signal"):
        return "sig %d" % job["signal"]
    return "-" if job.get("exit_code") is None else str(job["exit_code"])


def figures(job, now=None):
    """{column key: text} of one job, as the Jobs table and `specdeck jobs` show it."""
    return {
        "id": display.safe_text(id_text(job)),
        "kind": display.safe_text(job.get("kind") or ""),
        "state": display.safe_text(state_text(job)),
        "runtime": display.format_duration(runtime(job, now)),
        "exit": exit_text(job),
        "started": display.format_time(job.get("started_at")),
        "name": display.safe_text(job.get("name") or ""),  # a Slurm job's is anyone's: one line, no controls
    }


def ended_line(job, job_id=None):
    """How a job ended, in one line: `j7 exited 3`, `j7 was killed by signal 9`, `j7 was lost: why`."""
    line = "%s %s" % (job.get("id") or job_id or "the job", how_it_ended(job))
    unexplained = STOPPED not in (job.get("state"), job.get("process_state")) and not job.get("signal") and job.get("exit_code") is None
    return line + ": " + job["error"] if unexplained and job.get("error") else line
