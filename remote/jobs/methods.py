"""Wire methods of jobs: submit, list, describe, read and follow logs, stop, forget, and job
events; and what the jobs area gives the daemon: its job store (`daemon.jobs`, which every area
that starts a job uses), the `jobs` topic and its watcher, and the `job_engine` parameter of
every call."""

from ..core import streams, wire
from ..core.protocol import BadRequest
from ..core.streams import Topic, TopicSource
from ..core.wire import method
from ..core.words import LIVE_STATES
from . import engines
from .input import stall_after, with_stall_after
from .store import JobStore
from .supervisor import STOP_GRACE_S
from .watcher import JobWatcher, LogSource


def attach(daemon):
    """The daemon's job store and the topic of its job events."""
    daemon.jobs = JobStore()
    daemon.topics["jobs"] = Topic("jobs")


def job_watcher(daemon):
    return JobWatcher(daemon.jobs, daemon.topics["jobs"])


SERVICES = (job_watcher,)

# `job_engine` (with `job_engine_options`) is a parameter of every method that starts a job.
wire.around_calls(lambda params: engines.requested(params.get("job_engine"), params.get("job_engine_options")))


@method("jobs.submit")
def jobs_submit(call):
    """Start a detached job. Params: `argv` (list of strings, required; argv[0] found on the
    host's login PATH), `cwd` (default: home), `env` (additions), `python` (an interpreter to
    run argv under, as downloads, serving and training name it), `name`, `kind` (any short
    lower-case word: command, download, server, training, ...; default command), `meta` (an
    object kept with the job for the panes of its kind), `notify` (true: the host's notification
    channels say when it ends, however it ends; kept as meta `notify`), `stall_after_s` (a
    stall limit in seconds, 0 for none: its alert when its log has not grown for that long, or
    for a training run no new step; kept as meta `stall_after_s`), `job_engine` (who runs
    it: `local`, the default, a supervisor of ours; or an engine an area registers, such as
    `slurm`: see remote/jobs/engines.py), `job_engine_options` (that engine's own, e.g.
    Slurm's `nodes`, `partition`, `gpus_per_node`, `time`, `account`, `sbatch_args`); every method
    that starts a job takes these two. The job's environment is the user's login environment on the host plus `env`,
    nothing of the daemon's. Reply: the job, as `jobs.get`. Errors: BadRequest, one line naming
    the field (a NUL or a byte that is not UTF-8 in argv, env or cwd, `=` in an env name, argv
    and environment over the kernel's ARG_MAX, a cwd that is no directory, a command not found,
    an unknown engine), NoSpace, and the engine's own (one line; nothing is left of a refused job)."""
    job = call.daemon.jobs.submit(
        call.param("argv", list, required=True),
        cwd=call.param("cwd", str),
        env=call.param("env", dict) or {},
        interpreter=call.param("python", str),
        name=call.param("name", str),
        kind=call.param("kind", str, "command"),
        meta=with_stall_after(dict(call.param("meta", dict) or {}, notify=True) if call.param("notify", bool) else call.param("meta", dict),
                              stall_after(call)),
    )
    call.daemon.services.wake("job-events")
    return job


def with_stall(daemon, job):
    """The job with `stalled_since` while its stall alert is open (the notify service's stall
    rule): the time its progress stopped."""
    notify = daemon.services.get("notify")
    since = notify.stalled_since(job["id"]) if notify is not None and job.get("process_state") in LIVE_STATES else None
    if since is not None:
        job["stalled_since"] = since
    return job


@method("jobs.list")
def jobs_list(call):
    """Every job, oldest first. Params: `kind` (only jobs of that kind). Reply: `{jobs: [...]}`,
    each job as `jobs.get`."""
    return {"jobs": [with_stall(call.daemon, job) for job in call.daemon.jobs.list(kind=call.param("kind", str), fresh=True)]}


@method("jobs.get")
def jobs_get(call):
    """One job. Params: `id`. Reply: `{id, name, kind, argv, cwd, state, process_state, exit_code,
    signal, submitted_at, started_at, ended_at, pid, log_bytes, error, containment, meta,
    progress?}`; `state` is the process's (starting, running, succeeded, failed, stopped, lost),
    `stopping` while a stop is under way (process_state stays running), or, for a job that
    reports progress, its own word (downloading, verified, ...). `containment` says what holds
    the job's processes for a stop: `cgroup` (a cgroup v2 of its own), `systemd-scope` (a
    systemd user scope), `process-group` (none: found by scanning); null before it started.
    `engine`: `local`, or the engine that runs it (job_engines.py), which adds its own fields
    (Slurm: `slurm_id`, `nodes`, `pending_reason`, `foreign`, `slurm`; state `pending` while
    the scheduler holds it, process_state `starting` then). Ids other than `j...` are jobs of
    the user's that an engine knows and we did not start (`foreign`: true). `stalled_since`:
    while the job's stall alert is open, when its progress stopped."""
    return with_stall(call.daemon, call.daemon.jobs.describe(call.param("id", str, required=True)))


@method("jobs.tail")
def jobs_tail(call):
    """A window of a job's log. Params: `id`, `offset` (bytes, default 0; < 0 counts from the end
    and starts on a line boundary), `max_bytes` (default 64 KiB, at most 1 MiB). Reply:
    `{offset, next_offset, size, text}`."""
    offset = call.param("offset", int)
    max_bytes = call.param("max_bytes", int)
    return call.daemon.jobs.tail(call.param("id", str, required=True), 0 if offset is None else offset,
                                 65536 if max_bytes is None else max_bytes)


@method("jobs.stop")
def jobs_stop(call):
    """Stop a job: TERM to everything it started (its cgroup where it has one, its process group,
    its descendants, processes marked with its SPECDECK_JOB_TOKEN), KILL after the grace (the
    cgroup killed whole); the job's supervisor carries it out, so a daemon killed meanwhile
    changes nothing. Params: `id`, `grace_s` (default 10, a
    finite number >= 0; a second stop may shorten it). Reply: the job (state `stopping`).
    Returns at once; the end (state `stopped`) follows in job events."""
    grace_s = call.param("grace_s", float)
    grace_s = STOP_GRACE_S if grace_s is None else grace_s
    if grace_s < 0:
        raise BadRequest("grace_s must be a number of seconds >= 0")
    job = call.daemon.jobs.stop(call.param("id", str, required=True), grace_s=grace_s)
    call.daemon.services.wake("job-events")
    return job


@method("jobs.forget")
def jobs_forget(call):
    """Remove ended jobs: their directories and logs. Params: `ids` (list of job ids). Refused
    as a whole, nothing removed, when one still runs (BadRequest naming them) or when the disk
    is too full to keep the id counter (NoSpace). Reply: `{forgotten: [ids removed], not_found:
    [ids of no job on this host]}`; job events say `removed` for each one forgotten."""
    reply = call.daemon.jobs.forget(call.param("ids", list, required=True))
    call.daemon.services.wake("job-events")
    return reply


@method("jobs.follow")
def jobs_follow(call):
    """Stream a job's log. Params: `id`, `stream` (the client's id for it), `after` (byte offset,
    default 0; < 0: the last -after bytes from a line boundary). Frames: `{stream, seq, data:
    {offset, text}}` with seq = the offset after the text; whole lines, or, when none is
    waiting, the unfinished last line as it grows (a progress bar redrawn with \\r); then the
    end frame with `data.job`. Reply: `{stream, seq, snapshot}` as every follow (seq: the byte
    offset it starts from; snapshot: always false), frames may come before it."""
    jobs = call.daemon.jobs
    job_id = call.param("id", str, required=True)
    jobs.describe(job_id)  # NotFound now rather than in the stream
    return streams.follow(call, LogSource(jobs, job_id))


@method("jobs.events")
def jobs_events(call):
    """Stream every change of every job: subscribe once instead of polling. Params: `stream`,
    `after` (a seq from an earlier frame; absent: from now). Frames: first, for a new subscriber
    or one that missed records, `{snapshot: [job...], records: []}`; then `{records: [{event:
    submitted|started|progress|ended|changed|removed, id, job}]}` (a job that ended before it
    was first seen comes as submitted, then ended). Reply: `{stream, seq, snapshot}` (as a stream's opening reply)."""
    daemon = call.daemon
    source = TopicSource(daemon.topics["jobs"], snapshot=daemon.jobs.list)
    return streams.follow(call, source)
