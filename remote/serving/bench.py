"""The A/B benchmark job: the same prompts through a baseline server (no drafter) and then a
speculative one, on the same GPUs, one after the other; tokens/s of each, the accept length, the
measured cycle time and where the drafter stands against break-even. Given several Ks (`ks`),
it is a K sweep: the baseline once, then one speculative server per K, and the result holds a
row per K, the best K and the cost model (cycle time against K) of advice.py.

Run as `agent serving-bench SPEC.json` (a job of kind `benchmark`); SPEC is what the
`serving.bench` method wrote. Requests go one at a time, so tokens/s is one sequence's decode
rate, the rate break-even is about (after one warm-up request each server, not timed and
outside the accept-length window): a speculative cycle yields accept_length tokens in
cycle_s = accept_length / spec_tps, and breaks even at cycle_s x baseline_tps. progress.json
says which phase runs; its `result` holds the figures; the last stdout line is the result as
JSON.

Through Slurm (`bench --slurm`) the whole job is one Slurm job: the baseline server, the
speculative one(s) and the prompts all run inside one allocation, on its first node, the
servers on that node's loopback as they do here. The A/B then compares servers on the very
same GPUs, as it must, with no second trip through the queue between them and no server
reachable from outside the allocation; only progress.json and the phase logs, in the job's
directory (in the home directory, shared with the nodes), reach the daemon. The job is told its
directory (SPECDECK_JOB_DIR) in its environment, as a supervisor of ours tells a local job.
"""

import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
import uuid

from ..core import paths
from ..core.deadline_http import Deadline, opener
from ..core.feed_source import Budget, SourceError
from ..jobs.store import write_json
from . import advice, breakeven, categories, engines, metrics, positions, request_metrics, scrape
from .request_metrics import BadReply

READY_TIMEOUT_S = 900.0
SCRAPE_MAX_BYTES = 8 << 20
# A completion's whole request (connect to the reply's last byte), and the longest one socket
# operation waits (the first token of a long prompt on a loaded server comes late).
REQUEST_DEADLINE_S = 900.0
OPERATION_TIMEOUT_S = 600.0
WARMUP_REQUESTS = 1
WARMUP_TOKENS = 16
BUILTIN_PROMPTS = (
    "Explain speculative decoding in one paragraph.",
    "Write a Python function that reverses a linked list.",
    "List five uses of a hash map.",
    "Summarise the plot of a heist film in three sentences.",
    "What is the difference between a process and a thread?",
    "Describe how a GPU executes a matrix multiplication.",
    "Give three tips for writing clear commit messages.",
    "Translate 'the model is ready' into French and German.",
)


class Progress:
    def __init__(self, total):
        self.path = os.path.join(os.environ.get("SPECDECK_JOB_DIR", "."), "progress.json")
        self.value = {"state": "starting-baseline", "done": 0, "total": total, "result": None, "error": None}
        self.write()

    def write(self, **changes):
        self.value.update(changes)
        self.value["updated_at"] = time.time()
        final = self.value["state"] in ("done", "failed")
        write_json(self.path, dict(self.value, final=final))


def _post(url, payload, deadline_s=REQUEST_DEADLINE_S):
    """The parsed JSON of a reply to a POST, read up to request_metrics.MAX_REPLY_BYTES: BadReply
    for one larger (said by its Content-Length, or found while reading) or not JSON. The whole
    request, its answer read to the end, is bounded by `deadline_s` on its socket (an engine that
    trickles its answer a byte at a time is a BadReply at the deadline, not a held run)."""
    request = urllib.request.Request(url, data=json.dumps(payload).encode(), headers={"Content-Type": "application/json"})
    most = request_metrics.MAX_REPLY_BYTES
    deadline = Deadline(deadline_s, min(deadline_s, OPERATION_TIMEOUT_S))
    try:
        return _read(opener(deadline).open(request), most)
    except OSError:  # a timeout (urllib's URLError around it before the headers)
        if deadline.passed():
            raise BadReply("no complete reply within %g s" % deadline_s)
        raise  # the engine gone, or one operation over its own timeout: the run's end, as before


def _read(reply, most):
    with reply:
        length = reply.headers.get("Content-Length") or ""
        if length.isdigit() and int(length) > most:
            raise BadReply("the reply is %s bytes, over the %d MiB a completion's can be: not read" % (length, most >> 20))
        body = bytearray()
        while True:
            chunk = reply.read(65536)
            if not chunk:
                break
            body += chunk
            if len(body) > most:
                raise BadReply("the reply is over the %d MiB a completion's can be: not read further" % (most >> 20))
    try:
        return json.loads(bytes(body))
    except (ValueError, RecursionError) as exc:
        raise BadReply("the reply is not JSON (%s)" % str(exc)[:80])


def run_requests(url, model, prompts, max_tokens, on_done=None, records=None, kinds=None, deadline_s=REQUEST_DEADLINE_S):
    """(completion tokens, seconds, each request's tokens/s) of the prompts sent one at a time to
    /v1/completions; with `records` (a list), each reply's record (categories.request_record,
    under its category in `kinds`) appended to it. A reply the benchmark cannot use (too large,
    not JSON, a count or metric out of its type or range: request_metrics.py) is recorded as
    refused, with why, and the run goes on; one whose usage is unknown adds no tokens or seconds."""
    tokens, elapsed_s, request_tps = 0, 0.0, []
    for index, prompt in enumerate(prompts):
        kind = kinds[index] if kinds else categories.DEFAULT_CATEGORY
        began = time.monotonic()
        try:
            reply, refused = _post(url + "/v1/completions", {"model": model, "prompt": prompt, "max_tokens": max_tokens,
                                                              "temperature": 0.0, "ignore_eos": True}, deadline_s), None
        except BadReply as exc:
            reply, refused = None, str(exc)
        record = categories.request_record(kind, prompt, reply, time.monotonic() - began, refused)
        elapsed_s += record["seconds"]
        tokens += record["tokens"]
        request_tps.append(record["tokens"] / record["seconds"] if record["seconds"] > 0 else None)
        if records is not None:
            records.append(record)
        if on_done:
            on_done(index + 1)
    return tokens, elapsed_s, request_tps


def _scrape(url):
    """The server's /metrics parsed, read with scrape.py's deadline and size cap; None when it cannot be."""
    try:
        body = scrape.get(url + "/metrics", Budget(5.0, SCRAPE_MAX_BYTES))
    except SourceError:
        return None
    return metrics.parse(body.decode("utf-8", "replace"), time.time())


def _start(spec, drafter, k, log):
    engine_args = spec["engine_args"] + engines.quiet_scrape_args(spec["engine"], spec["python"], spec["engine_args"])
    if drafter:
        engine_args += categories.per_request_args(spec["engine"], spec["python"], spec["engine_args"])
    argv = [spec["python"]] + engines.server_argv(spec["engine"], spec["target"], drafter, k, spec["port"], engine_args=engine_args)
    env = dict(os.environ)
    env.update(engines.server_env(spec.get("gpus"), spec.get("env")))
    log.write(("specdeck bench: starting %s\n" % " ".join(argv)).encode())
    log.flush()
    return subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True)


def _wait_ready(process, url, log_path):
    deadline = time.monotonic() + READY_TIMEOUT_S
    while time.monotonic() < deadline:
        if process.poll() is not None:
            with open(log_path, "rb") as f:
                reason, _ = engines.death_reason(f.read()[-65536:].decode("utf-8", "replace"))
            raise RuntimeError("the server died while starting: %s" % reason)
        if engines.is_ready(url):
            return
        time.sleep(0.5)
    raise RuntimeError("the server did not answer within %d s" % READY_TIMEOUT_S)


def _stop(process):
    if process.poll() is None:
        os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(30)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()


def _phase(spec, drafter, k, prompts, progress, offset, state, records=None):
    url = engines.base_url(spec["port"])
    log_name = state if drafter is None or len(sweep_ks(spec)) == 1 else "%s-k%d" % (state, k)
    log_path = os.path.join(os.environ.get("SPECDECK_JOB_DIR", "."), "%s.log" % log_name)
    with open(log_path, "ab") as log:
        process = _start(spec, drafter, k, log)
        try:
            _wait_ready(process, url, log_path)
            progress.write(state=state, k=k if drafter else None)
            # Not timed: a fresh server's first request pays for warming up (allocations, kernel
            # selection), which one sequence's decode rate should not carry.
            run_requests(url, spec["target"], prompts[:WARMUP_REQUESTS], min(WARMUP_TOKENS, spec["max_tokens"]))
            before = _scrape(url)
            tokens, elapsed_s, request_tps = run_requests(url, spec["target"], prompts, spec["max_tokens"],
                                                          lambda n: progress.write(done=offset + n), records, spec.get("kinds"))
            after = _scrape(url)
        finally:
            _stop(process)
    figures = metrics.window(before, after) if before and after else {}
    return tokens / elapsed_s if elapsed_s > 0 else None, figures, request_tps


BY_REQUEST_KEYS = ("categories", "lengths", "worst", "flagged", "ks_used", "missing", "k_schedule", "k_in_force", "per_position_note")


def _by_request(records, baseline_records, k, schedule):
    """One K's figures from its requests' own metrics: by category and length, the worst and the
    flagged requests, and, K changing with the batch size (`schedule`), the per-position figures
    over only the drafts that reached each position (or marked not knowable)."""
    summary = categories.summarise(records, baseline_records, k)
    if not schedule:
        return summary
    over_all = positions.over_requests([r["decoding"] for r in records if r["decoding"]])
    summary.update(k_schedule=schedule, k_in_force=positions.k_words(k, schedule), per_position=over_all["per_position"],
                   per_position_conditional=over_all["per_position_conditional"])
    if over_all.get("per_position_note") or summary["missing"]:
        summary["per_position_note"] = over_all.get("per_position_note") or positions.not_knowable(k, schedule)
    return summary


def sweep_ks(spec):
    """The Ks a benchmark runs: `ks` (a sweep) or its one `k`."""
    return list(spec.get("ks") or [spec["k"]])


def measured_k(k, spec_tps, figures, baseline_tps, request_tps=None):
    """One K's row: tokens/s, accept length, per-position rates, the cycle time they imply
    (a cycle yields accept_length tokens in accept_length / tokens_per_s), the speedup and the
    break-even this cycle time needs; with each request's tokens/s (`request_tps`, the prompts
    in the order every K got them), how far its tokens/s can be trusted (advice.spread)."""
    accept_length = figures.get("accept_length")
    cycle_s = accept_length / spec_tps if accept_length and spec_tps else None
    break_even_length = cycle_s * baseline_tps if cycle_s and baseline_tps else None
    return {
        "k": k, "tokens_per_s": spec_tps, "accept_length": accept_length, "per_position": figures.get("per_position"),
        "per_position_conditional": figures.get("per_position_conditional"), "per_k": figures.get("per_k"), "cycle_ms": cycle_s * 1000.0 if cycle_s else None,
        "speedup": spec_tps / baseline_tps if spec_tps and baseline_tps else None,
        "break_even_accept_length": break_even_length, "verdict": breakeven.verdict(accept_length, break_even_length),
        "request_tps": list(request_tps or []), "noise": advice.spread(request_tps),
    }


def _prompts(spec):
    """(prompts, their categories) repeated to `requests`: the given ones (categories: `kinds`, one
    per prompt, or all of one category), else the built-in set in its categories."""
    if spec.get("prompts"):
        prompts = list(spec["prompts"])
        kinds = list(spec.get("kinds") or [categories.DEFAULT_CATEGORY] * len(prompts))
    else:
        kinds, prompts = [list(column) for column in zip(*categories.BUILTIN_SET)]
    picked = [i % len(prompts) for i in range(spec["requests"])]
    return [prompts[i] for i in picked], [kinds[i] for i in picked]


def run(spec):
    prompts, kinds = _prompts(spec)
    spec = dict(spec, kinds=kinds)
    ks = sweep_ks(spec)
    schedule, _k = positions.schedule_from_argv(spec["engine_args"])
    progress = Progress((1 + len(ks)) * len(prompts))
    try:
        # One baseline for every K: it does not depend on K.
        baseline_records = []
        baseline_tps, _, _ = _phase(spec, None, None, prompts, progress, 0, "baseline", baseline_records)
        rows, phases = [], [("baseline", baseline_records)]
        for index, k in enumerate(ks):
            progress.write(state="starting-speculative", k=k)
            records = []
            spec_tps, figures, request_tps = _phase(spec, spec["drafter"], k, prompts, progress, (1 + index) * len(prompts),
                                                    "speculative", records)
            rows.append(dict(measured_k(k, spec_tps, figures, baseline_tps, request_tps),
                             **_by_request(records, baseline_records, k, schedule)))
            phases.append(("K=%d" % k, records))
        result = advice.sweep_result(rows, baseline_tps) if len(ks) > 1 else dict(rows[0], spec_tps=rows[0]["tokens_per_s"])
        if len(ks) > 1:
            best = next(row for row in rows if row["k"] == result.get("best_k")) if result.get("best_k") else rows[-1]
            result.update((key, best.get(key)) for key in BY_REQUEST_KEYS if key in best)
        result.update(baseline_tps=baseline_tps, requests=len(prompts), max_tokens=spec["max_tokens"],
                      bad_replies=categories.refused_replies(phases))
        progress.write(state="done", result=result)
        print(json.dumps(result))
        return 0
    except Exception as exc:
        progress.write(state="failed", error="%s: %s" % (type(exc).__name__, exc))
        print("specdeck bench failed: %s" % exc, file=sys.stderr)
        return 1


def main(argv):
    with open(argv[1]) as f:
        spec = json.load(f)
    return run(spec)


def submit(daemon, spec):
    """Start the benchmark job for a SPEC already checked (engine, target, drafter, k or ks,
    port, gpus, env, engine_args, python, prompts, requests, max_tokens): the spec written under
    the state directory, the job submitted (under the engine the wire call asks for: a Slurm
    job runs it all in its allocation); returns the job. For callers inside the daemon
    (training's measurements) that have no wire call to go through."""
    spec_dir = os.path.join(paths.state_dir(), "specs")
    os.makedirs(spec_dir, mode=0o700, exist_ok=True)
    spec_path = os.path.join(spec_dir, "bench-%s.json" % uuid.uuid4().hex)
    with open(spec_path, "w") as f:
        json.dump(spec, f)
    prefix = paths.agent_argv()
    env = dict(spec["env"])
    if prefix[1:2] == ["-m"]:
        env["PYTHONPATH"] = paths.agent_env()["PYTHONPATH"]
    meta = dict((k, spec.get(k)) for k in ("engine", "target", "drafter", "k", "ks", "port", "gpus", "requests", "max_tokens"))
    ks = sweep_ks(spec)
    name = "bench %s vs %s (K=%s)" % (os.path.basename(spec["target"].rstrip("/")), os.path.basename(spec["drafter"].rstrip("/")),
                                      ",".join(str(k) for k in ks))
    # Its directory first, so that it can be in the job's environment whoever starts the job
    # (a supervisor of ours sets the same; Slurm's batch job has only what it was given).
    job_id, job_dir = reserved = daemon.jobs.reserve()
    env["SPECDECK_JOB_DIR"] = job_dir
    try:
        job = daemon.jobs.submit(prefix + ["serving-bench", spec_path], env=env, name=name, kind="benchmark", meta=meta, reserved=reserved)
    except BaseException:
        daemon.jobs.discard(job_id)
        raise
    daemon.services.wake("job-events")
    return job
