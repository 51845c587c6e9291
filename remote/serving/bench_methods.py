"""Wire methods of choosing what to serve with: the A/B benchmark job (a baseline server, then
a speculative one or a sweep of Ks, on the same GPUs) and the advice on which K to serve with,
from a server's live figures and a sweep's cost model."""

from ..core.protocol import BadRequest
from ..core.wire import method
from . import advice, bench, engines, positions
from .methods import _interpreter, _server_params, _server_url, _window_figures, sampler


@method("serving.bench")
def serving_bench(call):
    """Start an A/B benchmark as a job of kind `benchmark`: the same prompts through a baseline
    server, then a speculative one, on the same GPUs, one after the other. Params: `target`,
    `drafter` (required), `k`, `ks` (a list of Ks: a K sweep, the baseline once then one
    server per K), `engine`, `port`, `gpus`, `python`, `env`, `engine_args`, `prompts` (a list
    of strings; absent: a built-in set in categories code, maths, chat and long context),
    `categories` (one per prompt), `requests` (default 16), `max_tokens` (per request,
    default 64). The speculative server runs with per-request metrics (vLLM's
    `--per-request-spec-decode-metrics summary`, where it has them), and the result adds
    `categories` and `lengths` (`[{category|length, accept_length, histogram, tokens_per_s,
    baseline_tps, speedup, requests, per_position, per_position_conditional}]`), `worst` and
    `flagged` requests (`{category, accept_length, first_words, why?}`), `ks_used`, `missing`
    (replies without them), `bad_replies` (`{count, shown: [{phase, request, category,
    first_words, why}]}`: replies refused and left out of the figures, the run going on: over
    4 MiB, not JSON, or a count or per-request metric out of its type or range, a histogram of
    more than K+1 buckets); with K changing by batch size (`num_speculative_tokens_per_batch_size`
    in a `--speculative-config` of engine_args) `k_schedule`, and per-position figures over only
    the drafts that reached each position, or `per_position_note` saying they are not knowable. Reply: the job; its `progress` (in job events) is `{state:
    starting-baseline|baseline|starting-speculative|speculative|done|failed, k, done, total,
    result?}` with result `{baseline_tps, spec_tps, speedup, accept_length, per_position,
    per_k, cycle_ms, break_even_accept_length, verdict, k}`; a sweep's result gives those of
    its best K and adds `sweep` (a row per K: `{k, tokens_per_s, accept_length, per_position,
    per_k, cycle_ms, speedup, break_even_accept_length, verdict, request_tps, noise}`:
    `request_tps` each request's tokens/s, `noise` the ± of tokens_per_s as a fraction, two
    standard errors across the requests, null with one), `best_k` (the highest measured
    tokens/s), `margin` `{over_baseline, next_k, over_next_k, noise, within_noise}` (`noise`: the
    ± of over_next_k, from the two Ks' requests prompt by prompt; `within_noise`: whether
    over_next_k is inside it, null when unknown) and `cost_model` `{intercept_ms, slope_ms_per_k,
    points, max_residual_ms}` (cycle time against K, least squares)."""
    spec = _server_params(call)
    if not spec["drafter"]:
        raise BadRequest("a benchmark needs a drafter")
    ks = call.param("ks", list)
    if ks is not None:
        if not ks or not all(isinstance(k, int) and not isinstance(k, bool) and 1 <= k <= 32 for k in ks) or len(set(ks)) != len(ks):
            raise BadRequest("ks must be distinct whole numbers from 1 to 32")
        spec.update(ks=sorted(ks), k=max(ks))
    engines.check_paths(spec["target"], spec["drafter"])
    engines.check_drafter(spec["target"], spec["drafter"])
    prompts = call.param("prompts", list)
    if prompts is not None and not all(isinstance(p, (str, list)) for p in prompts):
        raise BadRequest("prompts must be strings or lists of token ids")
    kinds = call.param("categories", list)
    if kinds is not None and (prompts is None or len(kinds) != len(prompts) or not all(isinstance(c, str) for c in kinds)
                              or len(set(kinds)) > bench.categories.MAX_CATEGORIES):
        raise BadRequest("categories must be one string per prompt, at most %d distinct" % bench.categories.MAX_CATEGORIES)
    spec["kinds"] = [c[:bench.categories.MAX_CATEGORY_CHARS] for c in kinds] if kinds else None
    spec.update(python=_interpreter(call), prompts=prompts, requests=call.param("requests", int, 16),
                max_tokens=call.param("max_tokens", int, 64))
    if spec["requests"] < 1 or spec["max_tokens"] < 1:
        raise BadRequest("requests and max_tokens must be at least 1")
    return bench.submit(call.daemon, spec)


@method("serving.advise")
def serving_advise(call):
    """Which K to serve with, and why. Params: `id` (a running server job or attached server,
    or a finished K sweep benchmark job), `sweep` (a sweep job whose cost model to use; absent:
    the newest finished sweep of the server's target and drafter), `window_s` (the live figures'
    window; absent: all the sampler has). Reply: `{k_current, per_k: [{k, accept_length,
    cycle_ms, tokens_per_s, speedup, break_even_accept_length, break_even_source, measured, source,
    estimate_from?, cycle_measured?}], best_k, reason, sweep, cost_model, baseline_tps, break_even,
    sweep_to_run}` (`sweep_to_run`: the server's target and drafter and the Ks of the sweep to run,
    when no sweep of them was found; the laptop names the host)
    (`break_even`: the server's line, as `serving.stats` gives it; a row's `break_even_source`
    says which line it is judged against: `sweep jN` (that K's cycle time x the baseline), or
    for the running K without a sweep row the server's line's source)
    (`cycle_measured`: the sweep's own cycle time and tokens/s, when advising from a sweep
    alone; else they come from its cost model): accept lengths up to
    the running K are this server's (source live), beyond it the sweep's (source sweep) or,
    with no sweep row, an estimate (measured false, `estimate_from` says from what); cycle
    times come from the sweep's cost model, so without a sweep best_k is null and `reason`
    says which sweep to run. For a server, `window` holds every figure `serving.stats` gives
    over the same window (its `per_k` the live rows alone), so one question answers the
    Speculation pane's window."""
    job_id = call.param("id", str, required=True)
    window_s = call.param("window_s", float)
    jobs = call.daemon.jobs.list(kind="benchmark")
    if not job_id.startswith("u") and call.daemon.jobs.describe(job_id)["kind"] == "benchmark":
        job = call.daemon.jobs.describe(job_id)
        result = (job.get("progress") or {}).get("result") or {}
        if not result.get("sweep"):
            raise BadRequest("benchmark %s is not a finished K sweep (bench --k 1,2,3,...)" % job_id)
        return advice.advise(None, None, result, job_id)
    figures = _window_figures(call, job_id, window_s)
    _url, job, _log, _why = _server_url(call, job_id)
    meta = (job or {}).get("meta") or {}
    per_position = figures.get("per_position") or []
    sweep_id = call.param("sweep", str)
    if sweep_id:
        sweep = ((call.daemon.jobs.describe(sweep_id).get("progress") or {}).get("result") or {})
        if not sweep.get("sweep"):
            raise BadRequest("benchmark %s is not a finished K sweep" % sweep_id)
    else:
        sweep_id, sweep = advice.find_sweep(jobs, meta.get("target"), meta.get("drafter"))
    reply = advice.advise(meta.get("k") or len(per_position) or None, per_position, sweep, sweep_id,
                          target=meta.get("target"), drafter=meta.get("drafter"))
    line = sampler(call).break_even(job_id)
    advice.judge_against(reply, line, sweep_id)
    reply.update(window_s=figures.get("window_s"), num_drafts=figures.get("num_drafts"), break_even=line, window=figures,
                 **dict((key, figures.get(key)) for key in positions.FIGURE_KEYS if key in figures))
    return reply
