"""Detached jobs: processes that outlive the console, the SSH session and the daemon.

Each job is a directory under jobs_dir():
  job.json      what to run (resolved argv, cwd, env additions, name, kind), when submitted
  run.json      the supervisor's and the process's pid with their start times, pgid, boot id,
                and what holds the job's processes (containment: cgroup, systemd-scope, process-group)
  exit.json     exit code / signal and end time, written by the supervisor when the process ends
  stop.json     present once a stop was asked for (when, and the grace before KILL)
  output.log    stdout and stderr of the process
  progress.json optional, written by jobs that report progress (downloads): a summary, at most
                record.PROGRESS_MAX_BYTES (a bigger one is not read), since every listing carries it
  engine.json   for a job run by an engine other than ours (Slurm: engines.py), that
                engine's record (its id, nodes, state), kept current by the engine's service;
                such a job has no supervisor, run.json or exit.json
run.json and exit.json are reserved (blank) at submit, so that a full disk cannot lose them.

A supervisor process (supervisor.py) starts the job, records its end and carries out a stop,
even while no daemon runs. The daemon itself holds no job state: every answer is read from
disk, which is what lets a restarted daemon re-adopt running jobs.
"""

import errno
import logging
import os
import re
import shutil
import signal
import threading
import time

from . import containment, engines, launch
from . import log as job_log
from ..core import paths
from .counter import raise_counter, read_counter
from .input import disk_error
from .login_env import login_path, resolve_executable
from ..core.protocol import BadRequest, NotFound, RemoteError
from ..core.records import read_json, reserve, write_json
from ..core.words import LIVE_STATES
from .processes import is_same_process, process_start_ticks
from .record import as_object, read_record
from .supervisor import STOP_GRACE_S

log = logging.getLogger("specdeck.jobs")

TAIL_MAX_BYTES = 1024 * 1024
SIGNATURE_FILES = ("job.json", "run.json", "exit.json", "stop.json", "progress.json", "engine.json")
JOB_ID_PATTERN = re.compile(r"j[0-9]{1,18}\Z")


class DamagedJob(NotFound):
    """A job directory whose records are not a job's (hand-edited, or a stray directory)."""

    damaged = True


# ---------------------------------------------------------------- the store


class JobStore:
    def __init__(self, root=None):
        self.root = root or paths.jobs_dir()
        self._id_lock = threading.Lock()
        self._noted = set()  # damaged job directories already named in the daemon's log

    # -- submit

    def submit(self, argv, cwd=None, env=None, interpreter=None, name=None, kind="command", meta=None, reserved=None, secret_env=None,
               engine=None, engine_options=None):
        """Start a job. `reserved`: (job_id, job_dir) from `reserve`, for a caller that put files
        in the directory first. `secret_env`: variables (a token) the job's process gets that are
        never written anywhere: they go to the supervisor over a pipe, not into job.json.
        `engine`: the name of a job engine (engines.py) that runs it instead of a supervisor
        of ours, with its `engine_options`; "local" or None: ours.

        The job's environment is the user's login environment on this host plus `env` and
        `secret_env`; nothing of the daemon's own."""
        if engine is None:
            engine, engine_options = engines.requested_engine()
        runner = None if engine in (None, engines.LOCAL) else engines.get(engine)
        if runner is not None:
            engine_options = runner.check_options(engine_options)
        argv, cwd, env, environment = launch.checked(argv, cwd, env, interpreter, kind, meta, secret_env)
        job_id, job_dir = reserved or self._new_job_dir()
        spec = {
            "id": job_id,
            "name": name or " ".join([os.path.basename(argv[0])] + argv[1:])[:200],
            "kind": kind,
            "argv": argv,
            "cwd": cwd,
            "env": env,
            "submitted_at": time.time(),
            "meta": meta or {},
        }
        if runner is not None:
            return self._submit_to_engine(runner, job_id, job_dir, spec, environment, engine_options, whole=reserved is None)
        try:
            # The two records the supervisor writes later get their space now: a disk that
            # fills while the job runs cannot lose how it ended.
            reserve(os.path.join(job_dir, "run.json"))
            reserve(os.path.join(job_dir, "exit.json"))
            open(os.path.join(job_dir, "output.log"), "ab").close()
            write_json(os.path.join(job_dir, "job.json"), spec)  # last: from now on it is a job
        except OSError as exc:
            self._undo(job_id, job_dir, whole=reserved is None)
            raise disk_error(exc, "a new job", self.root)
        try:
            launch.start_supervisor(job_dir, environment)
        except RemoteError:
            self._undo(job_id, job_dir, whole=reserved is None)
            raise
        return self.describe(job_id)

    def _submit_to_engine(self, runner, job_id, job_dir, spec, environment, options, whole):
        """Hand the job to an engine; job.json is written only once the engine took it, and a
        refusal (or a crash on the way) takes back everything, so nothing is left half-created."""
        spec["engine"] = runner.name
        try:
            open(os.path.join(job_dir, "output.log"), "ab").close()
            record = runner.submit(job_dir, spec, environment, options)
            write_json(os.path.join(job_dir, "engine.json"), record)
            write_json(os.path.join(job_dir, "job.json"), spec)
        except OSError as exc:
            self._undo(job_id, job_dir, whole)
            raise disk_error(exc, "a new job", self.root)
        except BaseException:
            self._undo(job_id, job_dir, whole)
            raise
        return self.describe(job_id)

    def _undo(self, job_id, job_dir, whole):
        """Take back a submit that failed: the whole directory, or what submit put in a reserved one."""
        if whole:
            shutil.rmtree(job_dir, ignore_errors=True)
            return
        for name in ("job.json", "run.json", "exit.json", "output.log", "engine.json"):
            try:
                os.unlink(os.path.join(job_dir, name))
            except OSError:
                pass

    def reserve(self):
        """(job_id, job_dir): a new empty job directory for a caller that writes files there
        before `submit(..., reserved=...)`; `discard` removes one never submitted. Without
        job.json it is no job yet: listings and the job watcher skip it."""
        return self._new_job_dir()

    def discard(self, job_id):
        """Remove a reserved directory that was never submitted."""
        path = os.path.join(self.root, job_id)
        if not os.path.exists(os.path.join(path, "job.json")):
            shutil.rmtree(path, ignore_errors=True)

    def _new_job_dir(self):
        with self._id_lock:
            numbers = [int(n[1:]) for n in os.listdir(self.root) if JOB_ID_PATTERN.match(n)]
            number = max(numbers + [read_counter(self.root)]) + 1
            while True:
                job_id = "j%d" % number
                path = os.path.join(self.root, job_id)
                try:
                    os.mkdir(path, 0o700)
                    try:
                        raise_counter(self.root, number)  # kept up now, so a forget never has to write it
                    except OSError:
                        pass  # a full disk: the directory names the id until forget records it
                    return job_id, path
                except FileExistsError:
                    number += 1
                except OSError as exc:
                    raise disk_error(exc, "a new job", self.root)

    # -- read

    def job_dir(self, job_id):
        if not isinstance(job_id, str) or not JOB_ID_PATTERN.match(job_id):
            raise NotFound("no job %r on this host" % (job_id,))
        path = os.path.join(self.root, job_id)
        if not os.path.isfile(os.path.join(path, "job.json")):
            raise NotFound("no job %s on this host" % job_id)
        return path

    def describe(self, job_id):
        foreign = self._foreign_engine(job_id)
        if foreign is not None:
            job = foreign.foreign_job(job_id)
            if job is None:
                raise NotFound("no job %s on this host" % job_id)
            return job
        try:
            return self._describe(job_id)
        except (TypeError, ValueError, AttributeError, KeyError) as exc:
            # A hand-edited record (a time that is not a number, a field of the wrong type) is a
            # damaged job, skipped like one whose job.json is not a job: never a failed listing.
            reason = "a record holds %s (%s)" % (type(exc).__name__, exc)
            self._note_damaged(job_id, reason)
            raise DamagedJob("job %s is damaged: %s" % (job_id, reason))

    def _describe(self, job_id):
        job_dir = self.job_dir(job_id)
        spec = read_json(os.path.join(job_dir, "job.json"))
        if not isinstance(spec, dict) or not isinstance(spec.get("argv"), list) or not isinstance(spec.get("meta", {}), dict):
            self._note_damaged(job_id, "its job.json is not a job")
            raise DamagedJob("job %s is damaged: its job.json is not a job" % job_id)
        return read_record(job_id, job_dir, spec)

    def _note_damaged(self, job_id, reason):
        if (job_id, reason) not in self._noted:
            self._noted.add((job_id, reason))
            log.warning("skipped job %s: %s (remove its directory, %s, or forget it)", job_id, reason, os.path.join(self.root, job_id))

    def _foreign_engine(self, job_id):
        """The engine that claims a job id that is not ours (a user's own Slurm job), or None."""
        if isinstance(job_id, str) and not JOB_ID_PATTERN.match(job_id):
            return engines.claiming(job_id)
        return None

    def ids(self):
        """Every job id, oldest first."""
        return sorted((n for n in os.listdir(self.root) if JOB_ID_PATTERN.match(n)), key=lambda n: int(n[1:]))

    def signature(self, job_id):
        """What changes when anything about the job does (its files' sizes and times), without
        reading them: the job watcher describes a job again only when this moves."""
        job_dir = os.path.join(self.root, job_id)
        marks = []
        for name in SIGNATURE_FILES:
            try:
                st = os.stat(os.path.join(job_dir, name))
                marks.append((st.st_mtime_ns, st.st_size))
            except OSError:
                marks.append(None)
        return tuple(marks)

    def list(self, kind=None, fresh=False):
        """Every job, oldest first; with `kind`, only those of that kind (the others are not read
        beyond their job.json, so a pane that wants downloads does not pay for every job). A
        damaged job directory is skipped (and named once in the daemon's log). `fresh`: a person
        asked (jobs.list), so engines may ask their scheduler for the user's other jobs now."""
        jobs = []
        for job_id in self.ids():
            if kind is not None and (as_object(read_json(os.path.join(self.root, job_id, "job.json"))) or {}).get("kind", "command") != kind:
                continue
            try:
                jobs.append(self.describe(job_id))
            except NotFound:
                continue  # a directory being created right now, or a damaged one
        for runner in engines.engines():  # the user's jobs that an engine ran without us
            jobs.extend(job for job in runner.foreign_jobs(fresh) if kind is None or job.get("kind") == kind)
        return jobs

    def log_path(self, job_id):
        foreign = self._foreign_engine(job_id)
        if foreign is not None:
            return foreign.foreign_log_path(job_id)
        return os.path.join(self.job_dir(job_id), "output.log")

    def tail(self, job_id, offset=0, max_bytes=65536):
        """A window of the log: `offset` < 0 counts from the end (see job_log.tail)."""
        return job_log.tail(self.log_path(job_id), offset, min(int(max_bytes), TAIL_MAX_BYTES))

    def read_lines_from(self, job_id, offset, max_bytes=65536, final=False, partial=False):
        """Whole lines of the log from offset, as (bytes, next_offset) (see job_log.read_lines_from)."""
        return job_log.read_lines_from(self.log_path(job_id), offset, max_bytes, final, partial)

    # -- stop and forget

    def stop(self, job_id, grace_s=STOP_GRACE_S):
        """Ask the job's supervisor to stop it: TERM to everything the job started, KILL after
        the grace. The supervisor carries it out (a daemon killed meanwhile changes nothing).
        Returns at once; a later stop with a shorter grace shortens it. A job of an engine is
        stopped by the engine (Slurm: scancel), which its service finishes after the grace."""
        foreign = self._foreign_engine(job_id)
        if foreign is not None:
            return foreign.stop_foreign(job_id, grace_s)
        job_dir = self.job_dir(job_id)
        job = self.describe(job_id)
        if job["process_state"] not in LIVE_STATES:
            return job
        stop_path = os.path.join(job_dir, "stop.json")
        if job["engine"] != engines.LOCAL:
            write_json(stop_path, {"requested_at": time.time(), "grace_s": grace_s})
            engines.get(job["engine"]).stop(job_dir, job, grace_s)
            return self.describe(job_id)
        try:
            write_json(stop_path, {"requested_at": time.time(), "grace_s": grace_s})
            stop_signal = signal.SIGUSR1
            job["state"] = "stopping"  # as describe says of a live job with stop.json: described once per stop
        except OSError:
            stop_signal = signal.SIGTERM  # a full disk: the supervisor stops with its default grace
        run = as_object(read_json(os.path.join(job_dir, "run.json")))
        if run is None:
            return job  # the supervisor reads stop.json before it starts the job
        if is_same_process(run.get("supervisor_pid"), run.get("supervisor_start_ticks"), run.get("boot_id")):
            try:
                os.kill(run["supervisor_pid"], stop_signal)
            except ProcessLookupError:
                pass
        return job

    def forget(self, job_ids):
        """Remove ended jobs (directory and log). Refuses the whole request, removing nothing,
        when one of them still runs, or when the id counter cannot be kept (a full disk: an
        id would be given again). Returns {"forgotten": [ids removed], "not_found": [ids]}."""
        if not isinstance(job_ids, list) or not job_ids or not all(isinstance(i, str) for i in job_ids):
            raise BadRequest("ids must be a non-empty list of job ids")
        found, not_found, live = [], [], []
        for job_id in dict.fromkeys(job_ids):
            try:
                if self.describe(job_id)["process_state"] in LIVE_STATES:
                    live.append(job_id)
            except DamagedJob:
                run = as_object(read_json(os.path.join(self.root, job_id, "run.json"))) or {}
                if is_same_process(run.get("supervisor_pid"), run.get("supervisor_start_ticks"), run.get("boot_id")):
                    live.append(job_id)
            except NotFound:
                not_found.append(job_id)
                continue
            found.append(job_id)
        if live:
            raise BadRequest("%s still running: stop %s first" % (
                "job %s is" % live[0] if len(live) == 1 else "jobs %s are" % ", ".join(live), "it" if len(live) == 1 else "them"))
        with self._id_lock:
            if found:  # ids only grow: recorded before anything is removed
                try:
                    raise_counter(self.root, max(int(i[1:]) for i in found + self.ids()))
                except OSError as exc:
                    raise RemoteError("NoSpace" if exc.errno in (errno.ENOSPC, errno.EDQUOT) else "IOError",
                                      "could not keep the job id counter in %s (%s): nothing was forgotten" % (self.root, exc.strerror or exc))
            for job_id in found:
                run = as_object(read_json(os.path.join(self.root, job_id, "run.json"))) or {}
                # Out of the listing at once, then deleted at leisure.
                gone = os.path.join(self.root, ".forgotten-%s-%s" % (job_id, os.urandom(4).hex()))
                os.rename(os.path.join(self.root, job_id), gone)
                shutil.rmtree(gone, ignore_errors=True)
                containment.remove_left_over(run.get("cgroup"))  # of a supervisor that was killed
        return {"forgotten": found, "not_found": not_found}


__all__ = ["JobStore", "RemoteError", "login_path", "resolve_executable", "process_start_ticks", "STOP_GRACE_S"]
