"""Measured accept length per checkpoint: the A/B benchmark job of serving (remote/serving/bench.py,
started with its `submit`, the spec checked here as the `serving.bench` method checks its params)
run with a checkpoint the run wrote against its target, on the GPUs the user assigned, its accept
length recorded beside the predicted one.

A run asks for it with `measure` in training.start (target, gpus, k, engine, python, port,
requests, max_tokens, env, engine_args): each checkpoint that inspection finds servable is
queued. One benchmark at a time per run; when several wait, a checkpoint someone asked for by
hand (training.measure) goes first, then the newest one (older automatic ones are skipped: the
newest says most about where the run is going). The state lives in the checkpoint entry
(`measure`: {state queued|running|done|failed|skipped, job, error, result, options}), so a
restarted daemon picks the benchmark up where it was.
"""

import os
import time

from ..core import wire
from ..jobs.store import login_path, resolve_executable
from ..core.protocol import BadRequest, RemoteError
from ..core.words import LIVE_STATES as LIVE
from ..serving import bench, engines

OPTIONS = {"target": str, "gpus": str, "k": int, "engine": str, "python": str, "port": int, "requests": int,
           "max_tokens": int, "env": dict, "engine_args": list}
DEFAULTS = {"k": 3, "requests": 8, "max_tokens": 64}


def options_from(value, run_target=None):
    """The measurement options checked (BadRequest when wrong), with the defaults; None for none."""
    if value is None:
        return None
    if not isinstance(value, dict):
        raise BadRequest("measure must be an object: {target, gpus, k, engine, python, port, ...}")
    options = dict(DEFAULTS)
    for name, kind in OPTIONS.items():
        if value.get(name) is not None:
            options[name] = wire.param(value, name, kind)
    unknown = sorted(set(value) - set(OPTIONS))
    if unknown:
        raise BadRequest("unknown measure option(s): %s" % ", ".join(unknown))
    options.setdefault("target", run_target)
    if not options.get("target"):
        raise BadRequest("measure needs a target (the model the drafter serves)")
    return options


def queue(entry, options, by_hand=False):
    """Mark a checkpoint entry to be measured with `options`."""
    entry["measure"] = {"state": "queued", "options": options, "by_hand": by_hand, "queued_at": time.time(),
                        "job": None, "error": None, "result": None}


def servable(entry):
    """Only a checkpoint inspection passed can be served (broken, incompatible ones are not tried)."""
    return entry.get("verdict") == "ok"


def pending(entries):
    return any((e.get("measure") or {}).get("state") in ("queued", "running") for e in entries)


def advance(daemon, entries):
    """Look at the run's benchmark and start the next one; True when an entry changed."""
    changed = False
    running = [e for e in entries if (e.get("measure") or {}).get("state") == "running"]
    for entry in running:
        changed |= _check(daemon, entry)
    if any((e.get("measure") or {}).get("state") == "running" for e in entries):
        return changed
    queued = [e for e in entries if (e.get("measure") or {}).get("state") == "queued"]
    if not queued:
        return changed
    by_hand = [e for e in queued if e["measure"].get("by_hand")]
    chosen = by_hand[0] if by_hand else queued[-1]
    for entry in queued:
        if entry is not chosen and not entry["measure"].get("by_hand"):
            entry["measure"].update(state="skipped", error="checkpoint %s, written later, was measured instead" % chosen["name"])
    _start(daemon, chosen)
    return True


def _start(daemon, entry):
    measure = entry["measure"]
    try:
        job = bench.submit(daemon, bench_spec(daemon, measure["options"], entry["path"]))
    except RemoteError as exc:  # DrafterMismatch, a missing target: the reason is the user's to read
        measure.update(state="failed", error="%s: %s" % (exc.type, exc.message), ended_at=time.time())
        return
    except Exception as exc:  # a measurement that cannot start must not stop the run's curves
        measure.update(state="failed", error="%s: %s" % (type(exc).__name__, exc), ended_at=time.time())
        return
    measure.update(state="running", job=job["id"], started_at=time.time())
    entry["measure_job"] = job["id"]


def bench_spec(daemon, options, drafter):
    """The benchmark's spec from a run's measure options, checked as serving.bench checks its
    params (a drafter the target cannot load: RemoteError DrafterMismatch)."""
    spec = {"engine": options.get("engine") or "vllm", "target": options["target"], "drafter": drafter, "k": options.get("k") or 3,
            "port": options.get("port") or engines.DEFAULT_PORT, "gpus": options.get("gpus"), "env": dict(options.get("env") or {}),
            "engine_args": list(options.get("engine_args") or []), "prompts": None,
            "requests": options.get("requests") or DEFAULTS["requests"], "max_tokens": options.get("max_tokens") or DEFAULTS["max_tokens"]}
    if spec["engine"] not in engines.ENGINES:
        raise BadRequest("engine must be one of %s, not %r" % (", ".join(engines.ENGINES), spec["engine"]))
    if spec["k"] < 1 or spec["requests"] < 1 or spec["max_tokens"] < 1 or not 0 < spec["port"] < 65536:
        raise BadRequest("k, requests and max_tokens must be at least 1, port 1..65535")
    if not all(isinstance(a, str) for a in spec["engine_args"]) or not all(isinstance(v, str) for v in spec["env"].values()):
        raise BadRequest("engine_args and env values must be strings")
    engines.check_drafter(spec["target"], drafter)
    python = options.get("python") or daemon.hello["capabilities"]["python"]["executable"]
    spec["python"] = resolve_executable(python, os.path.expanduser("~"), login_path())
    return spec


def _check(daemon, entry):
    measure = entry["measure"]
    try:
        job = daemon.jobs.describe(measure["job"])
    except RemoteError as exc:  # the benchmark job was removed
        measure.update(state="failed", error=exc.message, ended_at=time.time())
        return True
    if job["process_state"] in LIVE:
        phase = (job.get("progress") or {}).get("state")
        if phase != measure.get("phase"):
            measure["phase"] = phase
            return True
        return False
    progress = job.get("progress") or {}
    result = progress.get("result")
    if progress.get("state") == "done" and result:
        entry["measured_accept_length"] = result.get("accept_length")
        measure.update(state="done", result=dict((k, result.get(k)) for k in (
            "accept_length", "baseline_tps", "spec_tps", "speedup", "cycle_ms", "break_even_accept_length", "verdict", "k")))
        if result.get("accept_length") is None:
            measure.update(state="failed", error="the benchmark finished without an accept length (no drafts counted)")
    else:
        measure.update(state="failed", error=progress.get("error") or "the benchmark job ended (%s, exit %s)" % (
            job["state"], job.get("exit_code")))
    measure["ended_at"] = time.time()
    return True


def public(measure):
    """A measurement as the wire shows it: environment values left out (a token may be one)."""
    if not measure:
        return None
    shown = dict(measure)
    options = dict(shown.get("options") or {})
    if options.get("env"):
        options["env"] = sorted(options["env"])
    shown["options"] = options
    return shown


def break_even_of(entries):
    """The break-even the latest finished measurement found (its own baseline), or None."""
    for entry in reversed(entries):
        result = (entry.get("measure") or {}).get("result") or {}
        if result.get("break_even_accept_length"):
            return result["break_even_accept_length"]
    return None
