"""Wire methods of serving: start a server job (refusing a drafter the target cannot load),
attach one started elsewhere, ask whether it is up, its speculation figures over a window, follow
them live, and the break-even line set by hand (kept on the host). The A/B benchmark job and
the K advice are in bench_methods.py."""

import os

from ..core import feed_wire
from ..jobs import engines as job_engines
from ..jobs.input import stall_after, with_stall_after
from ..jobs.store import login_path, resolve_executable
from ..core.protocol import BadRequest, NotFound
from ..core.wire import method
from ..core.words import LIVE_STATES as LIVE
from . import baselines, breakeven, doctor, engines, location, positions, root_cause
from .sampler import RECORDED, ServingFeed, attached_entries, how_it_ended

# The daemon starts these with itself (see remote/core/wire.py, area_services).
SERVICES = (ServingFeed,)
FIRST_READ_WAIT_S = 3.0



def sampler(call):
    return call.service(ServingFeed.name)


def _interpreter(call):
    python = call.param("python", str) or call.daemon.hello["capabilities"]["python"]["executable"]
    return resolve_executable(python, os.path.expanduser("~"), login_path())


def _server_params(call):
    engine = call.param("engine", str, "vllm")
    if engine not in engines.ENGINES:
        raise BadRequest("engine must be one of %s, not %r" % (", ".join(engines.ENGINES), engine))
    for name in ("k", "port", "engine_args", "env"):
        if name in call.params and call.params[name] is None:
            raise BadRequest("parameter %r is null: give a value or leave it out" % name)
    k = call.param("k", int, 3)
    if k < 1:
        raise BadRequest("k (tokens drafted per cycle) must be at least 1")
    port = call.param("port", int, engines.DEFAULT_PORT)
    if not 0 < port < 65536:
        raise BadRequest("port must be 1..65535")
    engine_args = call.param("engine_args", list, [])
    env = call.param("env", dict, {})
    if not all(isinstance(a, str) for a in engine_args) or not all(isinstance(v, str) for v in env.values()):
        raise BadRequest("engine_args and env values must be strings")
    return {
        "engine": engine, "target": call.param("target", str, required=True), "drafter": call.param("drafter", str),
        "k": k, "port": port, "gpus": call.param("gpus", str), "env": env, "engine_args": engine_args,
    }


@method("serving.start")
def serving_start(call):
    """Start an inference server as a job of kind `server`. Params: `target` (model path or id,
    required), `drafter` (an EAGLE-3 drafter; absent: a baseline server), `k` (drafted tokens
    per cycle, default 3), `engine` (vllm|sglang, default vllm), `port` (default 8000), `gpus`
    (CUDA_VISIBLE_DEVICES), `python` (an interpreter with the engine), `env` (additions),
    `engine_args` (list, appended to the engine's command line), `stall_after_s` (how long
    requests may wait with no token generated before its `server_stalled` alert; 0: never;
    default 2 min). A drafter is first compared
    with the target's config.json and refused (error DrafterMismatch, with the reasons) when it
    cannot load, and then checked as `serving.doctor` checks it: an error finding (a method
    that does not fit the drafter) refuses it too (DrafterMismatch, each with its symptom) unless
    `force` is true; the reply's `doctor` holds the findings. A target or drafter given as a path that is not on the host is refused
    (NotFound, naming the path). Reply: the job, as `jobs.get`; its meta holds {engine, target,
    drafter, k, port, url, listen, gpus, python, engine_args, stall_after_s?}. A server that dies gets `progress.error`:
    how it ended and the engine's first error line (`exited 1: ValueError: ...`).

    Here the server listens on 127.0.0.1 (`listen`) and meta's `url` is where it answers. Run
    through Slurm (`job_engine: slurm`) it listens on every interface of the node Slurm gives
    it (0.0.0.0: this login node must reach it there) and meta's `url` is null: its URL, made
    from that node's address (Slurm's NodeAddr), is known once the job runs, and `serving.status`
    gives it (before that: `starting`, with Slurm's pending reason); readiness, the speculation
    figures and alerts read it there."""
    spec = _server_params(call)
    engines.check_paths(spec["target"], spec["drafter"])
    force = call.param("force", bool, False)
    if spec["drafter"] and not force:
        engines.check_drafter(spec["target"], spec["drafter"])
    interpreter = _interpreter(call)
    job_engine, _options = job_engines.requested_engine()
    listen = location.listen_host(job_engine)
    argv = engines.server_argv(spec["engine"], spec["target"], spec["drafter"], spec["k"], spec["port"], host=listen,
                               engine_args=spec["engine_args"] + engines.quiet_scrape_args(spec["engine"], interpreter, spec["engine_args"]))
    checked = doctor.gate(spec, argv, force)
    url = engines.base_url(spec["port"]) if listen == location.LOCAL_HOST else None
    meta = {"engine": spec["engine"], "target": spec["target"], "drafter": spec["drafter"], "k": spec["k"] if spec["drafter"] else None,
            "port": spec["port"], "url": url, "listen": listen, "gpus": spec["gpus"], "python": interpreter, "engine_args": spec["engine_args"]}
    meta = with_stall_after(meta, stall_after(call))
    what = "%s + %s (K=%d)" % (os.path.basename(spec["target"].rstrip("/")), os.path.basename(spec["drafter"].rstrip("/")), spec["k"]) \
        if spec["drafter"] else "%s baseline" % os.path.basename(spec["target"].rstrip("/"))
    job = call.daemon.jobs.submit(argv, env=engines.server_env(spec["gpus"], spec["env"]), interpreter=interpreter,
                                  name="%s %s :%d" % (spec["engine"], what, spec["port"]), kind="server", meta=meta)
    call.daemon.services.wake("job-events")
    return dict(job, doctor=checked) if checked else job


def _server_url(call, server_id):
    """(url, job or None, log path or None, why) of a server job or an attached server; url is
    None, and `why` says why, for a Slurm server not running yet (or whose node Slurm cannot
    place)."""
    if server_id.startswith("u"):
        entry = attached_entries().get(server_id)
        if entry is None:
            raise NotFound("no attached server %s" % server_id)
        return entry["url"], None, entry.get("log_path"), None
    job = call.daemon.jobs.describe(server_id)
    if job["kind"] != "server" or not ((job.get("meta") or {}).get("url") or location.is_remote(job)):
        raise BadRequest("job %s is not a server" % server_id)
    url, why = location.server_url(call.daemon, job)
    return url, job, call.daemon.jobs.log_path(server_id), why


@method("serving.status")
def serving_status(call):
    """Is a server up? Params: `id` (a server job, or an attached server `uN`). Reply: `{id,
    url, node, ready, state, reason, last_lines}`: `state` is starting, ready, died (the job ended) or
    unreachable (an attached server that does not answer); `node` is the Slurm node a server run
    through Slurm answers on (`url` is made from its address; both null while Slurm has it
    pending, `reason` then says why: `waiting in Slurm's queue: Resources`); for a dead server `reason` is the
    engine's first error line (the root cause vLLM says is "above"; else the log line that says
    why: out of memory, a shape mismatch, ...), `ended` how the job ended with that line
    (`exited 1: ValueError: ...`) and `last_lines` its log's end; `break_even` its line (as
    `serving.stats` gives it)."""
    server_id = call.param("id", str, required=True)
    url, job, log_path, why = _server_url(call, server_id)
    node = location.node_of(job) if job is not None and location.is_remote(job) else None
    if job is not None and job["process_state"] not in LIVE:
        text = call.daemon.jobs.tail(server_id, -65536, 65536)["text"]
        reason, last_lines = engines.death_reason(text)
        reason = root_cause.first_error_in(log_path) or reason
        return {"id": server_id, "url": url, "node": node, "ready": False, "state": "died", "last_lines": last_lines,
                "reason": reason or "the server %s without a word in its log" % how_it_ended(job),
                "ended": how_it_ended(job, reason), "break_even": sampler(call).break_even(server_id)}
    if url is None:  # a Slurm server still in the queue: nothing to ask yet
        return {"id": server_id, "url": None, "node": node, "ready": False, "state": "starting", "reason": why, "last_lines": [],
                "break_even": sampler(call).break_even(server_id)}
    ready = engines.is_ready(url)
    if ready:
        sampler(call).wake(server_id)  # its source may be waiting out a backoff from the starting minutes
    reply = {"id": server_id, "url": url, "node": node, "ready": ready, "state": "ready" if ready else "starting", "reason": None,
             "last_lines": [], "break_even": sampler(call).break_even(server_id)}
    if job is None and not ready:
        reply["state"] = "unreachable"
    return reply


@method("serving.attach")
def serving_attach(call):
    """Sample a server started some other way. Params: `url` (its base URL, required), `log`
    (its log file on the host, read when /metrics cannot be), `name`, `stall_after_s` (as
    `serving.start`'s; kept with it). Reply: `{id, url}`
    (`id` is `uN`, used wherever a server job id is)."""
    url = call.param("url", str, required=True)
    if not url.startswith(("http://", "https://")):
        raise BadRequest("url must start with http:// or https://")
    log_path = call.param("log", str)
    if log_path:
        log_path = os.path.abspath(os.path.expanduser(log_path))
        if not os.path.isfile(log_path):
            raise NotFound("no log file %s on the host" % log_path)
    server_id = sampler(call).attach(url, log_path, call.param("name", str), stall_after(call))
    call.daemon.services.wake(ServingFeed.name)
    return {"id": server_id, "url": url}


@method("serving.detach")
def serving_detach(call):
    """Stop sampling an attached server. Params: `id`. Reply: `{id, detached}`."""
    server_id = call.param("id", str, required=True)
    return {"id": server_id, "detached": sampler(call).detach(server_id)}


@method("serving.stats")
def serving_stats(call):
    """A server's speculation figures over a window. Params: `id`, `window_s` (absent: the
    server's whole life, while its first hour is kept; an attached server's since the sampler
    first read it). A window reaching back past a vLLM server's start counts from its start
    (its counters count from there), so nothing it did before the sampler's first read is lost. Reply: `{accept_length, per_position, per_k,
    draft_acceptance_rate, num_drafts, accepted_tps, drafted_tps, generation_tps, window_s,
    source, engine, running, waiting, kv_cache_usage, reset, server, time, age_s, stale, error?,
    notes?}`; `source` is metrics, or log when only the server's log lines could be read;
    `reset`: a counter went down inside the window (the server restarted) and the parts on both
    sides were added up; `age_s`: seconds since the newest figure was read (at this reply),
    `stale`: older than the server's interval plus its read deadline (1.8 s; 30 s for log
    figures), so the figures are not current; `error`: why the last read failed (a scrape past
    its 0.8 s deadline or 4 MiB cap, a redirect to another host, a NaN or negative counter);
    `notes`: series the server exports beyond the caps (positions from 32, over 64 label
    sets), left out; `break_even`: the server's line, `{accept_length, source, how}` (source
    `set`: by hand, `serving.set_break_even`; `server meta`: its job's meta; `benchmark jN`: the
    newest A/B benchmark of its target and drafter), null when none is known. `predicted`: what the
    served drafter's speculation_profile.json (beside it, from `specdeck score`) predicts at the
    server's K, `{path, written_at, method, k, served_k, accept_length, per_position,
    per_position_conditional, mean_accept_length, conditions, notes, error}` (null for a drafter
    without one; `error` with every figure null when the profile was refused: not a regular file,
    over 1 MiB, wrong types, weights newer than it). `identity`: `{holds, one_plus_shares,
    accept_length, message}`, whether accept length is 1 + the sum of the per-position shares
    (null when the engine gives no per-position figures); a violation is carried, not averaged. `per_k`: `[{k, accept_length}]` for every K' up to the server's K, from the
    per-position counts (the share of drafts reaching position i is its accepted count over
    the drafts, so K' drafts yield 1 + the sum of the first K' shares); a K' beyond the running
    K was not measured and is not given. A server job that is not running is NotFound, saying how it ended and
    the engine's first error line.

    An SGLang server (its /metrics has SGLang's gauges: a job of engine sglang, or an attached
    URL) adds `engine: sglang`, `speculative` (the active settings its /get_server_info, else
    /server_info, gives: `{algorithm, draft_model_path, num_steps, eagle_topk, num_draft_tokens,
    avg_accept_length, version}`; null until it answered, `notes` then say why), `gauges` (its
    gauges, each the latest value: `{accept_length, accept_rate, generation_tps, running,
    waiting, kv_cache_usage, age_s}`) and `reading`: `window` when its log (a job's, or an
    attached server's `log`) has decode lines in the window: accept_length,
    draft_acceptance_rate and generation_tps are then the means over those lines (source `log
    windows`, with `lines`, `log_age_s` since the newest came and `windows`, the 5-second
    windows, at most 60); else `latest`: they are the gauges' latest values (source `gauges`,
    `window_s` null), never a window."""
    return _window_figures(call, call.param("id", str, required=True), call.param("window_s", float))


def _read_now_if_unread(call, service, server_id):
    """A server with no good read yet (just started, or just turned ready while its source
    waited out a backoff from its starting minutes) is read now, and its first figures waited
    for a moment, rather than answering with the error from before it was up."""
    source = service.source(server_id)
    if source is not None and (source.snapshots or source.from_log):
        return
    reads_before = (service.source_status(server_id) or {}).get("reads", 0) if source is not None else 0
    if source is None:
        call.daemon.services.wake(ServingFeed.name)  # not discovered yet: its worker reads at once
    else:
        service.wake(server_id)
    service.await_read(lambda: (service.source_status(server_id) or {}).get("reads", 0) > reads_before, FIRST_READ_WAIT_S)


def _window_figures(call, server_id, window_s):
    if window_s is not None and window_s <= 0:
        raise BadRequest("window_s must be positive")
    _server_url(call, server_id)
    service = sampler(call)
    _read_now_if_unread(call, service, server_id)
    figures = service.window_figures(server_id, window_s)
    if figures is None:
        _url, job, log_path, why = _server_url(call, server_id)
        if why is not None and job is not None and job["process_state"] in LIVE:
            raise NotFound("server %s is not being sampled yet: %s" % (server_id, why))
        if job is not None and job["process_state"] not in LIVE:
            raise NotFound("server %s is not running: it %s" % (server_id, how_it_ended(job, root_cause.first_error_in(log_path))))
        raise NotFound("server %s is not being sampled (not running)" % server_id)
    figures["baseline"] = baselines.view(baselines.STORE.of_server(call.daemon, server_id))
    _url, job, _log, _why = _server_url(call, server_id)
    # K changing with the batch size makes the counters' shares not those of drafts reaching a position.
    return positions.both_ways(figures, *positions.schedule_from_argv(((job or {}).get("meta") or {}).get("engine_args")))


@method("serving.history")
def serving_history(call):
    """One speculation series of a server over a window, from the history store (recorded once
    a second while the server runs). Params: `id`, `metric` (one of accept_length,
    draft_acceptance_rate, accepted_tps, drafted_tps, generation_tps, running, waiting,
    kv_cache_usage, per_position), `since_s` (default 3600) or `start`/`end`, `resolution_s`.
    Reply: `{metric, resolution_s, series: [{labels, points: [[time, min, mean, max], ...]}]}`
    (per_position has one series per `position` label). A bucket's mean of accept length is the
    mean of its seconds, not weighted by drafts: `serving.stats` gives a window's exact value."""
    metric = call.param("metric", str, required=True)
    if metric not in RECORDED + ("per_position",):
        raise BadRequest("no serving series %r (there are: %s)" % (metric, ", ".join(RECORDED + ("per_position",))))
    start, end = feed_wire.history_window(call)
    labels = {"job": call.param("id", str, required=True)}
    series, resolution_s = feed_wire.query_history(call, ServingFeed.name, metric, labels, start, end, call.param("resolution_s", float))
    return {"metric": metric, "resolution_s": resolution_s, "series": series}


@method("serving.follow")
def serving_follow(call):
    """Stream every server's speculation figures, one record per server per second. Params:
    `stream`, `after` (a seq; absent: from now). Frames: first `{snapshot: {id: record},
    records: []}`, then `{records: [record...]}` with records as `serving.stats` (over the last
    second) plus `server`, each with `age_s` and `stale`, and `recent`: the figures over the last
    10 s, exactly as `serving.stats` with `window_s` 10 gives them at that moment (what to show
    as "now": vLLM's counters grow in bursts, so one second's rates swing from 0 to several
    times the true rate); when a server's figure turns stale (its
    reads fail or hang) a record of its last figures comes with `stale: true`, `age_s` and
    `error`, again every 5 s while it lasts. Reply: `{stream, seq, snapshot}` (as a stream's
    opening reply)."""
    return feed_wire.follow(call, sampler(call))


@method("serving.set_break_even")
def serving_set_break_even(call):
    """Set a break-even line by hand, kept on the host (break_evens.json in its state directory)
    where the `below_break_even` alert is raised, so it holds with no console open and for
    every laptop. Params: `id` (a server: the line is set for its target, every server of it;
    an attached server `uN` keeps its own) or `target` (a model path or id); `accept_length`
    (a number; null removes the line set by hand), or `cycle_ms` and `baseline_tps` (the line
    is their product: 30 ms x 82 tok/s = 2.46). Reply: `{id, target, break_even}`:
    `break_even` is the server's line after the change (`{accept_length, source, how}` as
    `serving.stats` gives it; null when none), or with `target` alone the one set for it."""
    server_id, target = call.param("id", str), call.param("target", str)
    if bool(server_id) == bool(target):
        raise BadRequest("give a server (id) or a target, one of them")
    cycle_ms, baseline_tps = call.param("cycle_ms", float), call.param("baseline_tps", float)
    accept_length, how = call.param("accept_length", float), None
    if cycle_ms is not None or baseline_tps is not None:
        if accept_length is not None:
            raise BadRequest("give accept_length or cycle_ms and baseline_tps, not both")
        try:
            accept_length = breakeven.break_even(cycle_ms, baseline_tps)["break_even_accept_length"]
        except ValueError as exc:
            raise BadRequest(str(exc))
        how = "%g ms x %g tok/s" % (cycle_ms, baseline_tps)
    elif "accept_length" not in call.params:
        raise BadRequest("give accept_length (null removes the line), or cycle_ms and baseline_tps")
    if server_id and not server_id.startswith("u") and call.daemon.jobs.describe(server_id)["kind"] != "server":
        raise BadRequest("job %s is not a server" % server_id)  # (describe: NotFound for no such job)
    service = sampler(call)
    try:
        held_for, entry = service.set_break_even(server_id, target, accept_length, how)
    except ValueError as exc:
        raise BadRequest(str(exc))
    except KeyError:
        raise NotFound("no attached server %s" % server_id)
    if server_id:
        line = service.break_even(server_id)
    else:
        line = {"accept_length": entry["accept_length"], "source": "set", "how": entry["how"]} if entry else None
    return {"id": server_id, "target": None if server_id and server_id.startswith("u") else held_for, "break_even": line}
