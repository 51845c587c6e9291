"""Serving from the command line: serve (a server job, optionally waiting until it answers), spec
(its speculation figures over a window, with the accept length at every K' up to its K),
breakeven (the arithmetic, no host needed; with HOST SERVER the server's break-even line, kept
on the host, shown or set) and bench (the A/B benchmark job, or with `--k
1,2,3` a K sweep, followed to its result); advise and coverage are in advisor.py.

The engine runs under the host's ML interpreter: `--python` (the agent runs under it too, which
any engine's venv with Python 3.9+ can do), else what `specdeck config HOST --ml-python`
remembers, else the agent's own interpreter. The engine's own arguments follow `--`.
"""

import argparse
import json
import re
import sys
import time

from remote.core.protocol import RemoteError
from remote.serving import breakeven as breakeven_math

from .. import config
from ..cli.common import EXIT_FAILED, CommandError, connect, emit, env_option, parse_duration
from ..cli.slurm_options import add_slurm_options, slurm_params
from ..cli.stall_options import add_stall_option, stall_params
from ..display import safe_text
from ..freshness import stale_text
from . import advisor, baseline_cli, bench_categories, position_text
from .advisor import line_text
from .baseline_text import against_text, positions_against
from .model import (SERVER_DIED, SERVER_READY, SERVER_STARTING, SGLANG_KEYS, SPEC_KEYS, engine_lines, figure, identity_line, line_of,
                    parse_break_even, per_k, predicted_lines)

STATUS_POLL_S = 1.0
ENGINE_HELP = """The engine runs under --python, else the interpreter `specdeck config HOST --ml-python PATH`
remembers (a venv with vLLM or SGLang), else the agent's. Arguments after -- go to the engine
as they are, e.g.
  specdeck %s HOST /models/target%s -- --max-model-len 4096 --dtype bfloat16"""


def _server_options(p, k_list=False):
    p.add_argument("host")
    p.add_argument("target", help="the target model (a directory on the host, or a hub id)")
    if k_list:  # bench: one K, or a sweep (the baseline once, a server per K)
        p.add_argument("--k", type=advisor.parse_ks, default=[3], metavar="K[,K...]",
                       help="tokens drafted per cycle (default 3); a list, e.g. 1,2,3,4,5, sweeps them")
    else:
        p.add_argument("--k", type=int, default=3, metavar="N", help="tokens drafted per cycle (default 3)")
    p.add_argument("--engine", choices=("vllm", "sglang"), default="vllm")
    p.add_argument("--port", type=int, default=8000, metavar="P", help="the server's port on the host (default 8000)")
    p.add_argument("--gpus", metavar="LIST", help="CUDA_VISIBLE_DEVICES, e.g. 0,1")
    p.add_argument("--env", action="append", default=[], metavar="KEY=VALUE", help="environment addition (repeatable)")


def add_commands(commands):
    p = commands.add_parser("serve", help="start an inference server (with a drafter, or a baseline) as a job",
                            usage="specdeck serve HOST TARGET [--drafter PATH] [--wait] [options] [-- ENGINE_ARGS...]",
                            epilog=ENGINE_HELP % ("serve", " --drafter /models/eagle3"), formatter_class=argparse.RawDescriptionHelpFormatter)
    p.set_defaults(func=cmd_serve)
    _server_options(p)
    p.add_argument("--drafter", metavar="PATH", help="an EAGLE-3 drafter; without one, a baseline server")
    p.add_argument("--wait", action="store_true", help="exit 0 once the server answers, 1 if it died (its last lines on stderr)")
    p.add_argument("--break-even", metavar="LINE", help="set the target's break-even on the host: an accept length (2.46) or CYCLE_MS@BASELINE_TPS (30@82)")
    p.add_argument("--force", action="store_true", help="start it although `specdeck doctor` finds an error (a method that does not fit the drafter)")
    add_stall_option(p)
    add_slurm_options(p)

    p = commands.add_parser("spec", help="a server's accept length and speculation figures")
    p.set_defaults(func=cmd_spec)
    p.add_argument("host")
    p.add_argument("job", nargs="?", help="a server job (or an attached server uN)")
    p.add_argument("--url", help="a server started some other way, by its URL on the host")
    p.add_argument("--log", metavar="PATH", help="with --url: its log file on the host, read when /metrics cannot be")
    p.add_argument("--window", default=None, metavar="DURATION", help="over the last 30s, 5m, 8h, 1d (default: all the sampler has, an hour at most)")

    p = commands.add_parser("breakeven", help="the accept length speculation needs to pay off; a server's line on its host",
                            usage="specdeck breakeven --cycle-ms MS --baseline-tps TPS [--k N] [--target-tps TPS]\n"
                                  "       specdeck breakeven HOST SERVER [--set 2.46|CYCLE_MS@BASELINE_TPS | --clear]")
    p.set_defaults(func=cmd_breakeven)
    p.add_argument("host", nargs="?", help="with SERVER: the host whose server's line to show or set (the arithmetic needs none)")
    p.add_argument("server", nargs="?", help="a server job (or an attached server uN): its target's line, kept on the host")
    p.add_argument("--set", metavar="LINE", help="set the line for the server's target: an accept length (2.46) or CYCLE_MS@BASELINE_TPS (30@82)")
    p.add_argument("--clear", action="store_true", help="remove the line set by hand (the server's meta or a benchmark's holds again)")
    p.add_argument("--cycle-ms", type=float, metavar="MS", help="one draft+verify cycle of the speculative server")
    p.add_argument("--baseline-tps", type=float, metavar="TPS", help="the baseline's tokens/s per sequence")
    p.add_argument("--k", type=int, metavar="N", help="tokens drafted per cycle (the most a cycle yields is K+1)")
    p.add_argument("--target-tps", type=float, metavar="TPS", help="the tokens/s you want")

    p = commands.add_parser("bench", help="A/B benchmark: the same prompts through a baseline and a speculative server",
                            usage="specdeck bench HOST TARGET --drafter PATH [options] [-- ENGINE_ARGS...]",
                            epilog=ENGINE_HELP % ("bench", " --drafter /models/eagle3"), formatter_class=argparse.RawDescriptionHelpFormatter)
    p.set_defaults(func=cmd_bench)
    _server_options(p, k_list=True)
    p.add_argument("--drafter", required=True, metavar="PATH")
    p.add_argument("--prompts", metavar="FILE", help="one prompt a line, or a JSON object {\"prompt\", \"category\"} a line: "
                   "figures per category (default: a built-in set in categories code, maths, chat, long context)")
    p.add_argument("--requests", type=int, default=16, metavar="N", help="requests per server (default 16)")
    p.add_argument("--max-tokens", type=int, default=64, metavar="N", help="tokens per request (default 64)")
    add_slurm_options(p)
    advisor.add_commands(commands)


def engine_python(args):
    """The host's interpreter with the engine: --python, else `config HOST --ml-python`, else
    None (the host then uses the agent's own)."""
    return args.python or config.remembered(args.host, "ml_python")


def _start_params(args):
    params = {"target": args.target, "drafter": args.drafter, "k": args.k, "engine": args.engine, "port": args.port,
              "gpus": args.gpus, "python": engine_python(args), "env": env_option(args.env), "engine_args": getattr(args, "after_dashes", [])}
    params.update(slurm_params(args))  # serve and bench: the server (or the benchmark) as a Slurm job
    return params


def cmd_serve(args):
    params = dict(_start_params(args), **stall_params(args))
    if args.force:
        params["force"] = True
    line = _line_params(args.break_even, "--break-even") if args.break_even else None
    client = connect(args, args.host)
    try:
        job = client.call("serving.start", params, timeout=120)
        if line is not None:
            client.call("serving.set_break_even", dict(line, id=job["id"]))
    except RemoteError as exc:
        raise CommandError(exc.message, EXIT_FAILED)
    baseline_cli.print_warnings(job)
    # Through Slurm the URL is the node's, known once Slurm runs the job: until then, its Slurm id.
    url = job["meta"].get("url")
    where = url or "Slurm job %s (its URL once it runs: serve --wait, or spec)" % job.get("slurm_id")
    if not args.wait:
        reply = {"id": job["id"], "url": url}
        if job.get("slurm_id"):
            reply["slurm_id"] = job["slurm_id"]
        emit(args, reply, "%s  %s" % (job["id"], where))
        return 0
    if not args.json:
        print("%s  %s  (waiting for it to answer)" % (job["id"], url or "Slurm job %s" % job.get("slurm_id")), flush=True)
    return _wait_ready(args, client, job["id"])


def _wait_ready(args, client, job_id):
    """Wait for the server to answer: through Slurm, say why it waits in the queue each time
    that changes; with -v, show its log on stderr as it starts (else the engine's start, a
    hundred lines or more, stays in `specdeck logs`). 0 once it answers, 1 if it died, saying
    why in its own line and the log's last lines that add to it."""
    offset = 0
    said = None
    while True:
        status = client.call("serving.status", {"id": job_id}, timeout=30)
        if not args.json:
            if status["state"] == SERVER_STARTING and status.get("reason") and status["reason"] != said:
                said = status["reason"]
                sys.stderr.write("specdeck: server %s is %s\n" % (job_id, said))
                sys.stderr.flush()
            if args.verbose:
                window = client.call("jobs.tail", {"id": job_id, "offset": offset, "max_bytes": 262144})
                if window["text"]:
                    sys.stderr.write(window["text"])
                    sys.stderr.flush()
                offset = window["next_offset"]
        url = status.get("url")
        if status["state"] == SERVER_READY:
            node = " (node %s)" % status["node"] if status.get("node") else ""
            emit(args, {"id": job_id, "url": url, "node": status.get("node"), "ready": True}, "%s ready at %s%s" % (job_id, url, node))
            return 0
        if status["state"] == SERVER_DIED:
            reason = status["reason"]
            sys.stderr.write("specdeck: server %s died while starting: %s%s\n" % (job_id, reason, _next_step(args, reason)))
            if not args.verbose:  # with -v its log is above already
                for line in [line for line in status["last_lines"] if line.strip() and line.strip() not in reason][-10:]:
                    sys.stderr.write("  %s\n" % line)
            if args.json:
                print(json.dumps({"id": job_id, "url": url, "ready": False, "reason": status["reason"]}))
            return EXIT_FAILED
        time.sleep(STATUS_POLL_S)


MISSING_ENGINE = re.compile(r"No module named '(vllm|sglang)'")


def _next_step(args, reason):
    """What to do about a death the user can fix here: an interpreter without the engine."""
    missing = MISSING_ENGINE.search(reason or "")
    if not missing:
        return ""
    return ("; the interpreter it ran under (%s) has no %s: name one that has it with --python PATH, or once for this host: "
            "specdeck config %s --ml-python PATH" % (engine_python(args) or "the agent's own", missing.group(1), args.host))


def format_figures(figures):
    """The figures `spec` prints: each as the Speculation pane writes it (model.py)."""
    stale = " %s" % stale_text(figures.get("age_s")) if figures.get("stale") else ""
    lines = [
        "accept length     %s%s   (source: %s)" % (figure(figures, "accept_length"), stale, safe_text(str(figures.get("source")))),
        *engine_lines(figures),
        *[line for line in [identity_line(figures)] if line],
        *position_text.lines(figures),
        *predicted_lines(figures),
        *[" " * 18 + said.strip() for said in [positions_against(figures.get("baseline"))] if said],
        "per K             %s   (K' beyond the server's K: not measured)" % per_k(figures),
        "draft acceptance  %s" % figure(figures, "draft_acceptance_rate"),
        "drafts            %s" % figure(figures, "num_drafts"),
        "accepted tok/s    %s   drafted tok/s %s   generated tok/s %s" % (
            figure(figures, "accepted_tps"), figure(figures, "drafted_tps"), figure(figures, "generation_tps")),
        "window            %s" % figure(figures, "window_s"),
        "baseline          %s" % (against_text(figures.get("accept_length"), figures["baseline"]) if figures.get("baseline")
                                  else "none kept for its pair (save one: specdeck baseline HOST SERVER --save)"),
        "break-even        %s" % (line_text(line_of(figures.get("break_even"))) if line_of(figures.get("break_even"))
                                  else "not known (set one: specdeck breakeven HOST SERVER --set 2.46)"),
    ]
    if figures.get("stale"):
        lines.append("stale             these figures are not current: the server's last good read was %s ago" % (
            "?" if figures.get("age_s") is None else "%d s" % figures["age_s"]))
    if figures.get("error"):
        lines.append("note              %s" % figures["error"])
    for note in figures.get("notes") or ():
        lines.append("note              %s" % note)
    return "\n".join(lines)


def cmd_spec(args):
    if bool(args.job) == bool(args.url):
        raise CommandError("give a server job or --url URL (one of them)")
    window_s = parse_duration(args.window) if args.window else None
    client = connect(args, args.host)
    try:
        if args.url:
            server_id = client.call("serving.attach", {"url": args.url, "log": args.log})["id"]
        else:
            server_id = args.job
        figures = client.call("serving.stats", {"id": server_id, "window_s": window_s}, timeout=30)
        deadline = time.monotonic() + 5.0
        # A server read for the first time has one snapshot: wait for a second to have a window.
        while figures.get("source") == "metrics" and figures.get("window_s") is None and figures.get("engine") != "sglang" and time.monotonic() < deadline:
            time.sleep(0.5)
            figures = client.call("serving.stats", {"id": server_id, "window_s": window_s}, timeout=30)
    except RemoteError as exc:
        raise CommandError(exc.message, EXIT_FAILED)
    result = dict((key, figures.get(key)) for key in SPEC_KEYS)
    result.update(position_text.json_part(figures))
    result["break_even"] = line_of(figures.get("break_even"))
    result["baseline"] = figures.get("baseline")
    result.update((key, figures[key]) for key in SGLANG_KEYS if key in figures)
    emit(args, result, lambda: format_figures(figures))
    return 0


def _line_params(text, option):
    try:
        return parse_break_even(text)
    except ValueError:
        raise CommandError("%s takes an accept length (2.46) or CYCLE_MS@BASELINE_TPS (30@82), not %r" % (option, text))


def cmd_breakeven(args):
    if args.host is not None:
        return _host_break_even(args)
    if args.set is not None or args.clear:
        raise CommandError("--set and --clear need the server: specdeck breakeven HOST SERVER --set 2.46")
    if args.python or args.accept_new:
        raise CommandError("--python and --accept-new mean nothing without HOST: the arithmetic runs on this machine")
    if args.cycle_ms is None or args.baseline_tps is None:
        raise CommandError("give --cycle-ms and --baseline-tps (the arithmetic), or HOST SERVER (a server's line on its host)")
    try:
        result = breakeven_math.break_even(args.cycle_ms, args.baseline_tps, args.k, args.target_tps)
    except ValueError as exc:
        raise CommandError(str(exc))

    def human():
        lines = ["break-even accept length  %.2f  (%.1f ms x %.1f tok/s)" % (result["break_even_accept_length"], args.cycle_ms, args.baseline_tps)]
        if result["target_accept_length"] is not None:
            lines.append("for %.1f tok/s             %.2f" % (args.target_tps, result["target_accept_length"]))
        if result["max_accept_length"] is not None:
            lines.append("most K=%d can give         %.2f" % (args.k, result["max_accept_length"]))
            if result["reachable"]:
                lines.append("needs a per-step acceptance of %.3f" % result["required_acceptance_rate"])
            else:
                lines.append("unreachable: no drafter exceeds %.2f with K=%d" % (result["max_accept_length"], args.k))
        return "\n".join(lines)

    emit(args, result, human)
    return 0


def _host_break_even(args):
    """A server's break-even line on its host: shown, set (--set) or removed (--clear)."""
    if args.server is None:
        raise CommandError("give the server too: specdeck breakeven %s SERVER [--set 2.46]" % args.host)
    if any(value is not None for value in (args.cycle_ms, args.baseline_tps, args.k, args.target_tps)):
        raise CommandError("--cycle-ms, --baseline-tps, --k and --target-tps are the arithmetic, without HOST; on a host: --set 30@82")
    if args.set is not None and args.clear:
        raise CommandError("--set or --clear, not both")
    params = _line_params(args.set, "--set") if args.set is not None else ({"accept_length": None} if args.clear else None)
    client = connect(args, args.host)
    try:
        if params is None:
            status = client.call("serving.status", {"id": args.server}, timeout=30)
            reply = {"id": args.server, "break_even": line_of(status.get("break_even"))}
        else:
            reply = client.call("serving.set_break_even", dict(params, id=args.server), timeout=30)
            reply = {"id": args.server, "target": reply.get("target"), "break_even": line_of(reply.get("break_even"))}
    except RemoteError as exc:
        raise CommandError(exc.message, EXIT_FAILED)
    line = reply["break_even"]
    said = "break-even of %s: %s" % (args.server, line_text(line) if line else "not known (set one: --set 2.46, or run `specdeck bench`)")
    if reply.get("target") and params is not None:
        said += "\nkept on the host for every server of %s" % safe_text(reply["target"])
    emit(args, reply, said)
    return 0


def _figure(value, pattern):
    return "-" if value is None else pattern % value


def cmd_bench(args):
    ks = args.k
    args.k = ks[-1]
    params = _start_params(args)
    params.update(requests=args.requests, max_tokens=args.max_tokens)
    if len(ks) > 1:
        params["ks"] = ks
    if args.prompts:
        try:
            params["prompts"], kinds = bench_categories.read_prompts(args.prompts)
        except OSError as exc:
            raise CommandError("cannot read %s: %s" % (args.prompts, exc.strerror))
        except ValueError as exc:
            raise CommandError(str(exc))
        if kinds:
            params["categories"] = kinds
    client = connect(args, args.host, reconnect=True)
    try:
        job = client.call("serving.bench", params, timeout=120)
    except RemoteError as exc:
        raise CommandError(exc.message, EXIT_FAILED)
    if not args.json:
        print(job["id"], flush=True)
    job = advisor.wait_for_result(client, job, args.json, lambda job, progress: "%s  %d/%d requests" % (
        progress.get("state", job["state"]), progress.get("done", 0), progress.get("total", 0)))
    progress = job.get("progress") or {}
    result = progress.get("result")
    if not result:
        reason = progress.get("error") or job.get("error") or "the benchmark job ended (%s) without a result" % job["state"]
        raise CommandError("benchmark %s failed: %s" % (job["id"], reason), EXIT_FAILED)
    keys = ("baseline_tps", "spec_tps", "speedup", "accept_length", "cycle_ms", "break_even_accept_length")
    baseline = baseline_cli.pair_baseline(client, args.target, args.drafter)
    against = [] if baseline is None else ["against its baseline: %s" % against_text(result.get("accept_length"), baseline)]
    if result.get("sweep"):
        sweep = dict(((key, result.get(key)) for key in keys + ("best_k", "margin", "cost_model", "requests")), baseline=baseline)
        sweep["per_k"] = [dict((key, row.get(key)) for key in ("k", "tokens_per_s", "noise", "accept_length", "cycle_ms", "speedup",
                                                              "break_even_accept_length")) for row in result["sweep"]]
        sweep.update(bench_categories.json_part(result))
        emit(args, sweep, lambda: "\n".join(advisor.sweep_lines(result) + bench_categories.lines(result) + against))
        return 0

    def human():
        return "\n".join([
            "baseline      %s tok/s" % _figure(result["baseline_tps"], "%.2f"),
            "speculative   %s tok/s%s   speedup %s" % (
                _figure(result["spec_tps"], "%.2f"), "" if result.get("noise") is None else " ±%.1f%% (across the requests)" % (100.0 * result["noise"]),
                _figure(result["speedup"], "%.2fx")),
            "accept length %s   cycle %.1f ms   break-even %.2f" % (
                "-" if result["accept_length"] is None else "%.2f" % result["accept_length"], result["cycle_ms"] or 0.0,
                result["break_even_accept_length"] or 0.0),
            result["verdict"],
        ] + position_text.lines(result, 14) + bench_categories.lines(result) + against)

    reply = dict(((key, result.get(key)) for key in keys + ("noise",)), baseline=baseline)
    reply.update(position_text.json_part(result), **bench_categories.json_part(result))
    emit(args, reply, human)
    return 0
