"""Scored accept length per checkpoint: the score job of remote/scoring (the EAGLE-3 draft chain over
hidden states the target produced) run over a run's checkpoints, so that they are ranked by the
accept length serving would see rather than by the trainer's loss (a run whose loss kept falling
while its accept length peaked half-way keeps the wrong checkpoint as best).

One job scores a whole set (the target's three tensors and the samples read once, each
checkpoint's drafter in turn on every sample): `checkpoints --score` (training.score) sends
every servable checkpoint of the run; a run started with `score` options (train --score-data)
queues each one as it lands, and one job at a time per run takes every checkpoint queued by
then. SpecForge's training states are scored once exported (the export is a checkpoint of its
own). The state lives in the checkpoint entry (`score`: {state queued|running|done|failed, job,
phase, error, result, options}, and `scored_accept_length`), so a restarted daemon follows the
job where it was; the result is kept with the run.
"""

import os
import time

from ..core.protocol import BadRequest, NotFound, RemoteError
from ..core.words import LIVE_STATES as LIVE
from ..scoring import methods as scoring

OPTIONS = {"data": str, "target": str, "k": int, "samples": int, "split": str, "device": str, "python": str}
DEFAULTS = {"k": 5}
RESULT_KEYS = ("k", "predicted_accept_length", "predicted_accept_length_per_k", "unconditional_shares", "conditional_rates",
               "accept_length_histogram", "chains", "chains_cut", "bound")
SET_KEYS = ("samples_scored", "positions", "split", "held_out", "data", "notes", "device")


def options_from(value, run_target=None):
    """The score options checked (BadRequest when wrong, NotFound when the data or target is not
    on the host), with the defaults; None for none."""
    if value is None:
        return None
    if not isinstance(value, dict):
        raise BadRequest("score must be an object: {data, target, k, samples, split, device, python}")
    unknown = sorted(set(value) - set(OPTIONS))
    if unknown:
        raise BadRequest("unknown score option(s): %s" % ", ".join(unknown))
    options = dict(DEFAULTS)
    for name, kind in OPTIONS.items():
        if value.get(name) is not None:
            if not isinstance(value[name], kind) or isinstance(value[name], bool):
                raise BadRequest("score option %s must be a %s" % (name, kind.__name__))
            options[name] = value[name]
    for name in ("data", "target"):
        if options.get(name):
            options[name] = os.path.abspath(os.path.expanduser(options[name]))
    options.setdefault("target", run_target)
    if not options.get("data"):
        raise BadRequest("score needs data: the target's hidden states (speculators' or SpecForge's data directory)")
    if not options.get("target"):
        raise BadRequest("score needs a target (the model whose hidden states the data holds): give the run's --target")
    for name, what in (("data", "data directory"), ("target", "target")):
        if not os.path.exists(options[name]):
            raise NotFound("no %s %s on the host" % (what, options[name]))
    return options


def scoreable(entry):
    """A checkpoint with servable weights (SpecForge's training state is scored once exported)."""
    return entry.get("verdict") == "ok"


def pending(entries):
    return any((e.get("score") or {}).get("state") in ("queued", "running") for e in entries)


def queue(entry, options):
    entry["score"] = {"state": "queued", "options": options, "queued_at": time.time(), "job": None, "error": None, "result": None}


def start(daemon, run_id, entries, options):
    """One score job over `entries` (checkpoints of run `run_id`); each entry then says it runs.
    Raises scoring's Refused (one line) when the set cannot be scored, nothing started."""
    paths = [entry["path"] for entry in entries]
    meta = {"training_job": run_id, "checkpoints": [entry["name"] for entry in entries]}
    name = "score %d checkpoint%s of %s (K=%d)" % (len(entries), "" if len(entries) == 1 else "s", run_id, options.get("k") or 5)
    job = scoring.submit(daemon, paths, options["target"], options["data"], options, name=name, meta=meta)
    for entry in entries:
        entry["score"] = {"state": "running", "options": options, "job": job["id"], "error": None, "result": None,
                          "started_at": time.time(), "phase": None}
        entry["scored_accept_length"] = None
    return job


def advance(daemon, run_id, entries):
    """Follow the run's score jobs and start the next for the checkpoints queued meanwhile; True
    when an entry changed."""
    changed = False
    jobs = {}
    for entry in entries:
        score = entry.get("score") or {}
        if score.get("state") == "running":
            jobs.setdefault(score["job"], []).append(entry)
    for job_id, waiting in jobs.items():
        changed |= _check(daemon, job_id, waiting)
    if any((e.get("score") or {}).get("state") == "running" for e in entries):
        return changed
    queued = [e for e in entries if (e.get("score") or {}).get("state") == "queued"]
    if not queued:
        return changed
    try:
        start(daemon, run_id, queued, queued[-1]["score"]["options"])
    except (scoring.Refused, RemoteError, OSError) as exc:
        said = str(exc) if isinstance(exc, scoring.Refused) else "%s: %s" % (type(exc).__name__, exc)
        for entry in queued:
            entry["score"].update(state="failed", error=said, ended_at=time.time())
    return True


def _check(daemon, job_id, entries):
    try:
        job = daemon.jobs.describe(job_id)
    except RemoteError as exc:  # the score job was removed
        for entry in entries:
            entry["score"].update(state="failed", error=exc.message, ended_at=time.time())
        return True
    progress = job.get("progress") or {}
    if job["process_state"] in LIVE:
        phase = progress.get("state")
        if phase == "scoring" and progress.get("total"):
            phase = "scoring %d/%d" % (progress.get("done") or 0, progress["total"])
        changed = False
        for entry in entries:
            if entry["score"].get("phase") != phase:
                entry["score"]["phase"] = phase
                changed = True
        return changed
    result = progress.get("result")
    names = (job.get("meta") or {}).get("checkpoints") or []
    for entry in entries:
        index = names.index(entry["name"]) if entry["name"] in names else None
        if progress.get("state") == "done" and result and index is not None and index < len(result.get("drafters") or []):
            figures = result["drafters"][index]
            entry["scored_accept_length"] = figures.get("predicted_accept_length")
            kept = dict((key, figures.get(key)) for key in RESULT_KEYS)
            kept.update((key, result.get(key)) for key in SET_KEYS)
            kept["k"] = result.get("k")
            kept["profile"] = (figures.get("profile") or {}).get("path")
            entry["score"].update(state="done", result=kept, phase=None)
        else:
            entry["score"].update(state="failed", phase=None, error=progress.get("error") or "the score job ended (%s, exit %s)" % (
                job["state"], job.get("exit_code")))
        entry["score"]["ended_at"] = time.time()
    return True


def best(entries):
    """The name of the checkpoint with the highest scored accept length (the first of equals), or None."""
    scored = [e for e in entries if isinstance(e.get("scored_accept_length"), (int, float))]
    if not scored:
        return None
    return max(scored, key=lambda e: (e["scored_accept_length"], -scored.index(e)))["name"]
