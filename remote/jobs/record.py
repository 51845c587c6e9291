"""A job's record as the wire carries it, read from the files of its directory: the state of
its process (from run.json, exit.json and stop.json), its progress.json, and what its engine
says of a job it runs. The store (store.py) finds and checks job.json, then asks this module."""

import os
import time

from . import engines
from ..core.records import read_json
from ..core.words import LIVE_STATES
from .processes import is_same_process

PROGRESS_MAX_BYTES = 256 * 1024  # a job's progress.json, as its record carries it


def read_record(job_id, job_dir, spec):
    """The record of the job in `job_dir`, whose job.json (`spec`) the store has checked. A
    hand-edited record may raise TypeError, ValueError, AttributeError or KeyError: the store
    names such a job damaged."""
    run, end, stop = (as_object(read_json(os.path.join(job_dir, name))) for name in ("run.json", "exit.json", "stop.json"))
    progress = _progress(os.path.join(job_dir, "progress.json"))
    try:
        log_bytes = os.path.getsize(os.path.join(job_dir, "output.log"))
    except OSError:
        log_bytes = 0
    runner = None
    if spec.get("engine") not in (None, engines.LOCAL):
        runner = engines.get(spec["engine"])
        state = "lost"  # the engine says otherwise
    else:
        state = _process_state(job_dir, spec, run, end, stop)
    job = {
        "id": job_id,
        "name": spec.get("name"),
        "kind": spec.get("kind", "command"),
        "argv": spec.get("argv"),
        "cwd": spec.get("cwd"),
        "state": state,
        "process_state": state,
        "exit_code": end.get("exit_code") if end else None,
        "signal": end.get("signal") if end else None,
        "submitted_at": spec.get("submitted_at"),
        "started_at": run.get("started_at") if run else None,
        "ended_at": end.get("ended_at") if end else None,
        "pid": run.get("pid") if run else None,
        "log_bytes": log_bytes,
        "error": end.get("error") if end else None,
        "containment": run.get("containment", "process-group") if run else None,
        "meta": spec.get("meta", {}),
        "engine": spec.get("engine") or engines.LOCAL,
    }
    if runner is not None:
        runner.describe(job_dir, spec, as_object(read_json(os.path.join(job_dir, "engine.json"))) or {}, job)
        state = job["process_state"]
    if progress is not None:
        job["progress"] = progress
        # A job that reports progress names its own states (downloading, verified, ...): while
        # it runs, and after it ends when its last word was `final` (a job killed mid-way
        # keeps the process's state, not a stale "downloading").
        if progress.get("state") and state not in ("stopped", "lost"):
            if state == "running" or progress.get("final"):
                job["state"] = progress["state"]
    if state in LIVE_STATES and stop is not None:
        job["state"] = "stopping"  # the process still runs: process_state stays as it is
    return job


def as_object(value):
    """A record read from disk when it is a JSON object, else None (missing, blank or damaged)."""
    return value if isinstance(value, dict) else None


def _progress(path):
    """A job's progress.json, when it is no bigger than a record may carry: every `jobs.list`
    and job event holds it, so one that grew with its job (a list of every file) is not read."""
    try:
        size = os.path.getsize(path)
    except OSError:
        return None
    if size > PROGRESS_MAX_BYTES:
        return {"error": "its progress.json is %d bytes, over the %d a job's record carries: not read" % (size, PROGRESS_MAX_BYTES)}
    return as_object(read_json(path))


def _process_state(job_dir, spec, run, end, stop):
    if end is not None:
        if end.get("stopped") or ("stopped" not in end and stop is not None and (end.get("signal") or end.get("exit_code") != 0)):
            return "stopped"
        if end.get("error"):
            return "failed"
        return "succeeded" if end.get("exit_code") == 0 else "failed"
    if run is None:
        # Submitted but the supervisor has not written run.json: starting, unless long ago.
        if time.time() - (spec.get("submitted_at") or 0) < 30:
            return "starting"
        return "lost"
    if is_same_process(run.get("supervisor_pid"), run.get("supervisor_start_ticks"), run.get("boot_id")):
        return "running"
    # The supervisor is gone without writing exit.json: killed, or the host rebooted. Look
    # once more, since it may have written exit.json between our two reads.
    end = as_object(read_json(os.path.join(job_dir, "exit.json")))
    return "lost" if end is None else _process_state(job_dir, spec, run, end, stop)
