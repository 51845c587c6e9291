"""Job engines: the seam through which a job runs somewhere other than under a supervisor of
ours (a batch scheduler such as Slurm), while it stays one of our jobs (`j12`, its directory
under jobs_dir(), its log followed by offset, its events, stop and forget).

The core imports no area, so an engine area registers itself here when the composition root
(remote/areas.py) imports it; the job store asks this registry. An engine:

- `submit(job_dir, spec, environment, options)` starts the job (spec as job.json will hold
  it, environment the job's whole environment, options the engine's own, already checked by
  `check_options`) and returns its record (a JSON object), which the store writes to
  `engine.json` before job.json. Whatever it raises, the store removes the job directory:
  a refused job leaves nothing behind.
- `describe(job_dir, spec, record, job)` fills the engine's fields (state, process_state,
  exit_code, ...) into `job`, the core's description, from the record; it reads, never asks
  the scheduler (listings stay cheap: the engine's own service keeps engine.json current).
- `stop(job_dir, job, grace_s)` asks for the stop at once; the store has written stop.json,
  which the engine's service reads to finish it (KILL after the grace) even after a restart.
- Jobs the engine knows of that are not ours (the user's own Slurm jobs): ids the engine
  `claims` (never `j...`), listed by `foreign_jobs(fresh)` (fresh: a person asked, so the
  engine may ask its scheduler now; else what it last heard, so that a service listing jobs
  every second costs the scheduler nothing), described by `foreign_job(id)` (None
  when there is none), their log at `foreign_log_path(id)`, stopped by `stop_foreign(id, grace_s)`.
"""

import threading

from ..core.protocol import BadRequest, NotFound

_ENGINES = {}
_requested = threading.local()  # the engine the wire call being served asks for (see `requested`)

LOCAL = "local"


class JobEngine:
    """What an engine offers; the defaults say "nothing of that kind"."""

    name = None

    def check_options(self, options):
        return dict(options or {})

    def submit(self, job_dir, spec, environment, options):
        raise NotImplementedError

    def describe(self, job_dir, spec, record, job):
        raise NotImplementedError

    def stop(self, job_dir, job, grace_s):
        raise NotImplementedError

    def claims(self, job_id):
        return False

    def foreign_jobs(self, fresh=False):
        return []

    def foreign_job(self, job_id):
        return None

    def foreign_log_path(self, job_id):
        raise NotFound("no job %s on this host" % job_id)

    def stop_foreign(self, job_id, grace_s):
        raise NotFound("no job %s on this host" % job_id)


def register(engine):
    """Make `engine` (a JobEngine) available under its name; the last registration wins (an
    area imported twice in tests registers a fresh instance)."""
    _ENGINES[engine.name] = engine
    return engine


def get(name):
    """The engine called `name`; BadRequest naming the ones there are."""
    engine = _ENGINES.get(name)
    if engine is None:
        known = ", ".join(sorted([LOCAL] + list(_ENGINES)))
        raise BadRequest("no job engine %r in this agent (engines: %s)" % (name, known))
    return engine


def engines():
    return list(_ENGINES.values())


class requested:
    """`with requested(name, options):` while a wire call is served (wire.dispatch): every job
    that call starts, whichever area starts it (jobs.submit, serving.start, training.start,
    ...), runs under that engine, unless the area names one itself. This is how `job_engine`
    and `job_engine_options` work for every method that starts a job, with no area knowing of
    them. Checked here, so a wrong one is refused before the method does anything."""

    def __init__(self, name, options):
        if name is not None and not isinstance(name, str):
            raise BadRequest("parameter 'job_engine' has the wrong type")
        if options is not None and not isinstance(options, dict):
            raise BadRequest("parameter 'job_engine_options' has the wrong type")
        self.value = None if name in (None, LOCAL) else (get(name).name, dict(options or {}))

    def __enter__(self):
        self.before = getattr(_requested, "value", None)
        _requested.value = self.value
        return self

    def __exit__(self, *exc):
        _requested.value = self.before


def requested_engine():
    """(name, options) of the engine the current wire call asks for, or (None, None)."""
    return getattr(_requested, "value", None) or (None, None)


def claiming(job_id):
    """The engine that claims a job id that is not ours, or None."""
    for engine in _ENGINES.values():
        if engine.claims(job_id):
            return engine
    return None
