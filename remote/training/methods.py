"""Wire methods of training: start a training or data-generation job, its curves and the accept
length they predict, its checkpoints with verdicts, and the live stream of its records."""

import os
import re
import time

from ..core import feed_wire
from ..jobs.input import check_command, stall_after, with_stall_after
from ..core.protocol import BadRequest, NotFound
from ..core.records import read_json
from ..core.wire import method
from ..notify.pace import with_slowdown
from . import checkpoints, curves, export, measure, scores, stepstore
from .run import STATE_FILE
from .sampler import TrainingFeed

# The daemon starts these with itself (see remote/core/wire.py, area_services).
SERVICES = (TrainingFeed,)
MAX_POINTS = 5000


def _option(argv, names):
    """The integer value of the first of `names` in argv (`--epochs 3` or `--epochs=3`), or None."""
    for index, word in enumerate(argv):
        for name in names:
            if word == name and index + 1 < len(argv) and re.match(r"^\d+$", argv[index + 1]):
                return int(argv[index + 1])
            if word.startswith(name + "=") and word[len(name) + 1:].isdigit():
                return int(word[len(name) + 1:])
    return None


@method("training.start")
def training_start(call):
    """Start a training or data-generation job. Params: `argv` (list, required: any command,
    speculators, SpecForge, a script), `python` (the interpreter to run argv under), `save_dir`
    (where the run writes checkpoints; watched), `name`, `kind` (training|datagen, default
    training), `cwd`, `env`, `start_from` (the drafter the run starts from, compared with each
    checkpoint), `target` (the target model directory, each checkpoint checked against its
    config.json), `steps_total`, `epochs_total` (for the ETA; default read from argv's
    --max-steps, --epochs / --num-epochs), `break_even` (the accept length serving must beat),
    `measure` (optional: measure each servable checkpoint's real accept length with the A/B
    benchmark of `serving.bench`, one at a time: `{target (default the run's target), gpus, k
    (default 3), engine, python (an interpreter with the engine), port, requests (default 8),
    max_tokens (default 64), env, engine_args}`), `stall_after_s` (its stall limit: an alert
    when no new step, or sample, comes for that long; 0: none; default ten times its median
    interval between steps, at least 2 min), `slowdown` (`{fraction, for_s, median_s}`, each
    optional: its `slowdown` alert when its pace stays under `fraction` (default 0.5; 0: never) of
    its median over the last `median_s` (default 1 h) for `for_s` (default 10 min)), `score`
    (optional: score each servable checkpoint as it lands, the accept length predicted from the
    target's hidden states, as training.score: `{data, target (default the run's), k (default 5),
    samples, split, device, python (the ML interpreter)}`). Reply: the job, as `jobs.get`."""
    argv = call.param("argv", list, required=True)
    check_command(argv, call.param("python", str))  # before argv is read for --epochs
    kind = call.param("kind", str, "training")
    if kind not in ("training", "datagen"):
        raise BadRequest("kind must be training or datagen, not %r" % kind)
    save_dir = call.param("save_dir", str)
    if save_dir:
        save_dir = os.path.abspath(os.path.expanduser(save_dir))
    meta = {
        "save_dir": save_dir, "start_from": call.param("start_from", str), "target": call.param("target", str),
        "steps_total": call.param("steps_total", int) or _option(argv, ("--max-steps", "--max_steps")),
        "epochs_total": call.param("epochs_total", int) or _option(argv, ("--epochs", "--num-epochs", "--num_epochs")),
        "break_even": call.param("break_even", float), "python": call.param("python", str),
    }
    meta = with_slowdown(with_stall_after(meta, stall_after(call)), call)
    meta["measure"] = measure.options_from(call.param("measure", dict), meta["target"])
    meta["score"] = scores.options_from(call.param("score", dict), meta["target"])
    job = call.daemon.jobs.submit(argv, cwd=call.param("cwd", str), env=call.param("env", dict, {}), interpreter=call.param("python", str),
                                  name=call.param("name", str), kind=kind, meta=meta)
    call.daemon.services.wake("job-events")
    feed = call.daemon.services.get(TrainingFeed.name)
    if feed is not None:
        feed.refresh()
    return job


def _job(call):
    job = call.daemon.jobs.describe(call.param("id", str, required=True))
    if job["kind"] not in ("training", "datagen"):
        raise BadRequest("job %s is a %s job, not training" % (job["id"], job["kind"]))
    return job


def checkpoint_list(job_dir, meta):
    saved = checkpoints.Journal(job_dir).load() if meta.get("save_dir") else []
    listed = []
    break_even = meta.get("break_even") or measure.break_even_of(saved)
    best_scored = scores.best(saved)
    for entry in saved:
        listed.append({
            "path": entry["path"], "name": entry["name"], "step": entry.get("step"), "epoch": entry.get("epoch"),
            "format": entry.get("format"), "verdict": checkpoints.judge(entry, break_even),
            "reasons": entry.get("reasons", []), "best": entry.get("best", False), "latest": entry.get("latest", False),
            "hint": entry.get("hint"), "best_meta": entry.get("best_meta"), "bytes": entry.get("bytes"),
            "validation": entry.get("validation"), "predicted_accept_length": entry.get("predicted_accept_length"),
            "predicted_from": entry.get("predicted_from"),
            "measured_accept_length": entry.get("measured_accept_length"), "against_start": entry.get("against_start"),
            "against_target": entry.get("against_target"), "complete_at": entry.get("complete_at"),
            "measure": measure.public(entry.get("measure")), "export": entry.get("export"),
            "exported_from": entry.get("exported_from"), "scored_accept_length": entry.get("scored_accept_length"),
            "score": entry.get("score"), "best_by_accept_length": entry["name"] == best_scored,
        })
    return listed


@method("training.curves")
def training_curves(call):
    """A run's curves, indexed by step. Params: `id` (a training job), `points` (default 2000):
    a run with no more steps than that comes whole, every step its own entry; a longer one in
    buckets of consecutive steps, each the mean of its steps, with `count`, `step_min`/`step_max`
    (`step` is the last), `loss_min`/`loss_max`, `predicted_accept_length_min`/`_max` and the
    per-position figures of its last step. `start`/`end`: only the records read within that
    window (default the whole run). Reply: `{id, process_state, exit_code, steps: [{time,
    step, epoch, loss, lr, step_ms, tokens_per_s, full_acc: [...], cond_acc: [...], loss_k:
    [...], predicted_accept_length, count, step_min, step_max, loss_min, loss_max,
    predicted_accept_length_min, predicted_accept_length_max}], validation: [{time, epoch,
    step, loss, full_acc, cond_acc, predicted_accept_length}], latest, predicted_accept_length
    (the run's one prediction: the newest validation's when the run has validation records,
    else the newest step's; remote/training/curves.py defines it), prediction: {accept_length,
    from (validation | training steps | null), step, epoch, full_acc (what it was computed
    from)}, steps_per_s, eta_s, progress,
    break_even (the run's, else the one its last checkpoint measurement found),
    break_even_source (run|measured|null), verdict: {verdict (ABOVE | BELOW), judged (measured:
    the newest measured checkpoint; predicted: the prediction above), accept_length} or null,
    alerts: [text], notices: [text] (log lines cut,
    checkpoint links refused), error (following the run failed: why, else null), checkpoints:
    [as training.checkpoints], bucket_steps (1: whole), best (the checkpoint the trainer keeps as
    best, by its loss or metric), best_by_accept_length (the one whose scored accept length is
    highest; null until one is scored)}`. `plateau_s` (default 1800): the loss
    not falling for this long raises an alert."""
    job = _job(call)
    points = max(10, min(call.param("points", int, 2000), MAX_POINTS))
    start, end = call.param("start", float), call.param("end", float)
    job_dir = call.daemon.jobs.job_dir(job["id"])
    if stepstore.exists(job_dir):
        steps, validation, width, nan_step = stepstore.read(job_dir, points, start, end)
    else:
        steps, validation, width, nan_step = _from_history(call, job, points, start, end)
    state = read_json(os.path.join(job_dir, STATE_FILE)) or {}
    latest = state.get("latest") or (steps[-1] if steps else None)
    last_validation = state.get("validation") or (validation[-1] if validation else None)
    progress = job.get("progress") or {}
    rate, eta = curves.rate_and_eta(steps, job["meta"].get("steps_total"), job["meta"].get("epochs_total"))
    if progress.get("eta_s") is not None and job["process_state"] == "running":
        rate, eta = progress.get("steps_per_s") or rate, progress["eta_s"]
    if job["process_state"] not in ("running", "starting"):
        eta = 0.0 if job.get("exit_code") == 0 else None
    predicted = curves.prediction(latest, last_validation)
    listed = checkpoint_list(job_dir, job["meta"])
    break_even, source = job["meta"].get("break_even"), "run"
    if break_even is None:
        measured = [c["measure"]["result"]["break_even_accept_length"] for c in listed
                    if ((c.get("measure") or {}).get("result") or {}).get("break_even_accept_length")]
        break_even, source = (measured[-1], "measured") if measured else (None, None)
    verdict = curves.against_break_even(predicted, listed, break_even)
    feed = call.daemon.services.get(TrainingFeed.name)
    return {
        "id": job["id"], "process_state": job["process_state"], "exit_code": job.get("exit_code"), "steps": steps,
        "validation": validation, "latest": latest, "predicted_accept_length": predicted["accept_length"], "prediction": predicted,
        "steps_per_s": rate, "eta_s": eta,
        "progress": progress, "break_even": break_even, "break_even_source": source, "verdict": verdict,
        "alerts": alerts(job, steps, call.param("plateau_s", float, 1800.0), nan_step),
        "notices": list((state.get("notices") or {}).values()), "error": feed.run_error(job["id"]) if feed else None,
        "checkpoints": listed, "bucket_steps": width,
        "best": next((c["name"] for c in listed if c["best"]), None),
        "best_by_accept_length": next((c["name"] for c in listed if c["best_by_accept_length"]), None),
    }


def _from_history(call, job, points, start, end):
    """A run recorded before runs had a step store: its curves from the history store, by time."""
    store = call.history()
    start = start or (job.get("started_at") or job["submitted_at"]) - 1.0
    end = end or (job.get("ended_at") or time.time()) + 5.0
    steps, validation, _ = curves.read_curves(store, job["id"], start, end, max((end - start) / points, 0.001))
    nan_step = next((entry.get("step") for entry in steps if entry.get("loss") == "nan"), None)
    return steps, validation, None, nan_step


def alerts(job, steps, plateau_s, nan_step=None):
    """What a user must know about a run: a NaN loss (at step `nan_step`, which the step store
    finds even inside a bucket), a loss that stopped falling, a bad end."""
    found = []
    if nan_step is not None:
        found.append("the loss became NaN at step %s" % nan_step)
    finite = [(e["time"], e["loss"]) for e in steps if isinstance(e.get("loss"), float)]
    if finite and finite[-1][0] - finite[0][0] > plateau_s:
        cut = finite[-1][0] - plateau_s
        before = min(loss for t, loss in finite if t < cut)
        after = min(loss for t, loss in finite if t >= cut)
        if after >= before:
            found.append("the loss has not fallen below %.4g for %s" % (
                before, "%d min" % (plateau_s // 60) if plateau_s >= 120 else "%d s" % plateau_s))
    if job["process_state"] not in ("running", "starting", "stopped") and job.get("exit_code") not in (0, None):
        found.append("the run ended with exit code %s" % job["exit_code"])
    elif job["process_state"] == "failed" and job.get("signal"):
        found.append("the run was killed by signal %s" % job["signal"])
    return found


@method("training.checkpoints")
def training_checkpoints(call):
    """The checkpoints a run wrote, each inspected once complete. Params: `id`. Reply:
    `{checkpoints: [...]}`, each `{path, name, step (the last step its weights hold: from its
    training_state.json, else its name, else its epoch's last step), epoch, format, verdict (ok,
    broken, incompatible, needs export (SpecForge's training state), above break-even, below
    break-even: measured, else predicted), reasons, best, latest (SpecForge's `-latest` link),
    hint (what to do first: `specforge export`, or how to resume from speculators' interrupted/;
    null otherwise), best_meta (SpecForge's {step, metric, score} when this is its best), bytes,
    validation (its epoch's, SpecForge: its step's), predicted_accept_length, predicted_from
    (validation: its epoch's validation; training steps: the step record at its step),
    measured_accept_length, against_start: {verdict, reasons}, against_target: {verdict,
    reasons}, complete_at, measure: {state (queued, running, done, failed, skipped), job (the
    benchmark job), phase, error, result: {accept_length, baseline_tps, spec_tps, speedup,
    cycle_ms, break_even_accept_length, verdict, k}, options} or null, export: {state (running,
    done, failed), job, to, output_dir, argv, error} or null (training.export), exported_from (the
    SpecForge checkpoint this directory was exported from, or null), scored_accept_length (the
    accept length the score job predicts from the target's hidden states: training.score),
    score: {state (queued, running, done, failed), job, phase, error, options, result: {k,
    predicted_accept_length, predicted_accept_length_per_k, unconditional_shares,
    conditional_rates, accept_length_histogram, chains, chains_cut, bound, samples_scored,
    positions, split, held_out, data, notes, device, profile}} or null, best_by_accept_length
    (the highest scored accept length of the run)}`. A checkpoint directory
    that links out of the save directory is not read (its verdict: unreadable, and why)."""
    job = _job(call)
    return {"checkpoints": checkpoint_list(call.daemon.jobs.job_dir(job["id"]), job["meta"])}


@method("training.measure")
def training_measure(call):
    """Measure one checkpoint's real accept length: the A/B benchmark of `serving.bench` with the
    checkpoint as drafter, queued behind the run's current one (one at a time per run). Params:
    `id` (a training job), `checkpoint` (its name, as training.checkpoints lists it, or its
    path), `measure` (options as in training.start; default the run's own, which must then
    exist). Reply: `{id, checkpoint, state: queued}`; training.follow announces each change."""
    job = _job(call)
    wanted = call.param("checkpoint", str, required=True)
    listed = checkpoint_list(call.daemon.jobs.job_dir(job["id"]), job["meta"])
    entry = next((c for c in listed if wanted in (c["name"], c["path"])), None)
    if entry is None:
        raise NotFound("run %s has no inspected checkpoint %s" % (job["id"], wanted))
    options = measure.options_from(call.param("measure", dict), job["meta"].get("target")) or job["meta"].get("measure")
    if not options:
        raise BadRequest("run %s was started without measure options: give `measure` ({target, python, gpus, ...})" % job["id"])
    if entry["format"] is None or entry["verdict"] in ("broken", "unreadable", "incompatible"):
        raise BadRequest("checkpoint %s cannot be served (%s): nothing to measure" % (entry["name"], entry["verdict"]))
    if (entry.get("measure") or {}).get("state") in ("queued", "running"):
        raise BadRequest("checkpoint %s is already %s for measurement" % (entry["name"], entry["measure"]["state"]))
    call.service(TrainingFeed.name).request_measure(job["id"], entry["name"], options)
    return {"id": job["id"], "checkpoint": entry["name"], "state": "queued"}


@method("training.score")
def training_score(call):
    """Score a run's checkpoints by the accept length they will reach (remote/training/scores.py):
    one score job for the whole set, each checkpoint's drafter in turn on the same samples.
    Params: `id` (a training job), `data` (the target's hidden states), `target` (default the
    run's), `k` (default 5), `samples`, `split`, `device`, `python` (the ML interpreter, torch),
    `checkpoints` (names; default every servable one: SpecForge's training states once
    exported). Checked before the job starts (BadRequest in one line, as score.start). Reply:
    `{id, job (the score job), checkpoints: [names]}`; each checkpoint's `score` and
    `scored_accept_length` follow (training.checkpoints, training.follow)."""
    job = _job(call)
    value = {key: call.param(key, kind) for key, kind in scores.OPTIONS.items()}
    options = scores.options_from(dict((k, v) for k, v in value.items() if v is not None), job["meta"].get("target"))
    job_dir = call.daemon.jobs.job_dir(job["id"])
    entries = checkpoints.Journal(job_dir).load() if job["meta"].get("save_dir") else []
    wanted = call.param("checkpoints", list)
    if wanted is not None:
        missing = [name for name in wanted if name not in set(e["name"] for e in entries)]
        if missing:
            raise NotFound("run %s has no inspected checkpoint %s" % (job["id"], ", ".join(map(str, missing))))
        entries = [e for e in entries if e["name"] in wanted]
    chosen = [e for e in entries if scores.scoreable(e)]
    if not chosen:
        needs = [e["name"] for e in entries if e.get("verdict") == checkpoints.NEEDS_EXPORT]
        raise BadRequest("run %s has no checkpoint to score yet%s" % (job["id"], (
            ": %s %s SpecForge's training state, scored once exported (checkpoints --export NAME)" % (
                ", ".join(needs[:3]), "is" if len(needs) == 1 else "are")) if needs else ""))
    try:
        started = scores.start(call.daemon, job["id"], chosen, options)
    except scores.scoring.Refused as exc:
        raise BadRequest(str(exc))
    feed = call.service(TrainingFeed.name)
    for entry in chosen:
        feed.request_score(job["id"], entry["name"], entry["score"])
    return {"id": job["id"], "job": started["id"], "checkpoints": [e["name"] for e in chosen]}


@method("training.export")
def training_export(call):
    """Start `specforge export` of one SpecForge checkpoint as a job (kind export): its output,
    `{name}-{to}` in the save directory, is listed among the run's checkpoints once the job has
    ended (inspected as safetensors, with its source's step and prediction). Params: `id` (a
    training job), `checkpoint` (its name or path, as training.checkpoints lists it), `to` (hf
    or sglang, default hf), `draft_config` (SpecForge's draft model config; default the run's
    `model.draft_model_config=` override), `vocab_mapping` (default the run's
    `model.vocab_mapping_path=`), `embedding_source` (hf only: the target that supplies the
    embedding), `python` (run `PYTHON -m specforge.cli`; default the run's own SpecForge).
    The job gets the run's environment additions. Reply: `{id, checkpoint, job, to, output_dir,
    argv, state: running}`; training.follow announces the checkpoint's change."""
    job = _job(call)
    wanted = call.param("checkpoint", str, required=True)
    listed = checkpoint_list(call.daemon.jobs.job_dir(job["id"]), job["meta"])
    entry = next((c for c in listed if wanted in (c["name"], c["path"])), None)
    if entry is None:
        raise NotFound("run %s has no inspected checkpoint %s" % (job["id"], wanted))
    params = {key: call.param(key, str) if key == "to" else call.path_param(key) for key in export.OPTIONS}
    params = {key: value for key, value in params.items() if value is not None}
    record = export.start(call.daemon, job, entry, params)
    call.service(TrainingFeed.name).request_export(job["id"], entry["name"], record)
    call.daemon.services.wake("job-events")
    return dict(record, id=job["id"], checkpoint=entry["name"])


@method("training.follow")
def training_follow(call):
    """Stream every run's records as they are read. Params: `stream`, `after` (a seq; absent:
    from now). Frames: first `{snapshot: {job id: progress with age_s, stale}, records: []}`, then `{records:
    [...]}`: a step or validation record (`{job, kind: step|validation, time, step, epoch,
    loss, full_acc, cond_acc, loss_k, lr, step_ms, tokens_per_s, predicted_accept_length}`) or
    `{job, kind: checkpoint, checkpoint}`, or `{job, kind: notice, text, time}` (said once: log lines
    cut, a checkpoint link refused), or `{job, kind: stale, stale: true, age_s, error}` (reading
    the run fails or hangs: its figures are that old). A burst shows its newest 256 records per read (all of them
    are in training.curves). Reply: `{stream, seq, snapshot}` (as a stream's opening reply)."""
    return feed_wire.follow(call, call.service(TrainingFeed.name))
