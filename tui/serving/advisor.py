"""The K advisor from the command line: advise (which K to serve with, and why: a server's live
accept length at every K' <= K against the cycle times of the newest K sweep of its target and
drafter), coverage (the share of the target's tokens a drafter's vocabulary holds, from a text
or a running server's output, as a job under the host's ML interpreter), and the lines `bench
--k 1,2,3` prints for a sweep."""

import os
import shlex
import sys

from remote.core.protocol import RemoteError
from remote.serving.advice import margin_words

from .. import config
from ..cli.common import EXIT_FAILED, CommandError, connect, emit
from ..display import safe_text
from .model import line_of
from . import position_text

def wait_for_result(client, job, quiet, status):
    """Follow a host job (a benchmark, a coverage count) until it ends, writing `JOB  STATUS` on
    stderr each time `status(job, progress)` says something new (nothing when `quiet`, as with
    --json); returns the job as it ended."""
    from ..jobs.follow import follow_job

    said = []

    def show(job):
        line = "%s  %s" % (job["id"], status(job, job.get("progress") or {}))
        if not said or line != said[-1]:
            said.append(line)
            if not quiet:
                sys.stderr.write(line + "\n")

    return follow_job(client, job, on_change=show)


ADVICE_KEYS = ("k_current", "per_k", "best_k", "reason", "break_even")
ADVICE_ROW_KEYS = ("k", "accept_length", "cycle_ms", "tokens_per_s", "speedup", "measured")


def add_commands(commands):
    p = commands.add_parser("advise", help="which K to serve with, and why (live accept length at every K, a sweep's cycle times)")
    p.set_defaults(func=cmd_advise)
    p.add_argument("host")
    p.add_argument("job", help="a running server job (or attached uN), or a finished K sweep benchmark job")
    p.add_argument("--sweep", metavar="JOB", help="the K sweep whose cycle times to use (default: the newest of the same target and drafter)")

    p = commands.add_parser("coverage", help="the share of the target's tokens a drafter's vocabulary can ever propose")
    p.set_defaults(func=cmd_coverage)
    p.add_argument("host")
    p.add_argument("drafter", help="the EAGLE-3 drafter (a directory on the host)")
    p.add_argument("--target", metavar="PATH", help="the target whose tokenizer reads the text (with --job: default the server's)")
    source = p.add_mutually_exclusive_group(required=True)
    source.add_argument("--text", metavar="FILE", help="a text file here (sent to the host), or host:PATH for one there")
    source.add_argument("--job", metavar="SERVER_JOB", help="a running server: the tokens it generates for the built-in prompts")
    p.add_argument("--top", type=int, default=20, metavar="N", help="missing tokens listed (default 20)")
    p.add_argument("--trust-remote-code", action="store_true", help="for a tokenizer that ships its own code (Kimi's)")


def parse_ks(text):
    """`1,2,3,4,5` -> [1, 2, 3, 4, 5]; a single `3` -> [3]."""
    try:
        ks = [int(part) for part in str(text).split(",") if part.strip()]
    except ValueError:
        raise CommandError("--k takes a K or a list of them: 3, or 1,2,3,4,5")
    if not ks or min(ks) < 1 or len(set(ks)) != len(ks):
        raise CommandError("--k takes distinct Ks of 1 or more: 3, or 1,2,3,4,5")
    return sorted(ks)


def sweep_lines(result):
    """A K sweep's result as lines: a row per K (its tokens/s with their ± across the requests),
    the best K, its margin over the next and whether that margin is clear of the noise, the cost
    model."""
    lines = ["baseline      %.2f tok/s" % result["baseline_tps"], "   K  tok/s    ±       accept  cycle ms  speedup  break-even"]
    for row in result["sweep"]:
        noise = row.get("noise")
        lines.append("  %2d  %7s  %-6s  %6s  %8s  %7s  %s%s" % (
            row["k"], _number(row.get("tokens_per_s"), "%.1f"), "-" if noise is None else "±%.1f%%" % (100.0 * noise),
            _number(row.get("accept_length")), _number(row.get("cycle_ms"), "%.1f"),
            _number(row.get("speedup"), "%.2fx"), _number(row.get("break_even_accept_length")), "   best" if row["k"] == result.get("best_k") else ""))
    margin = result.get("margin") or {}
    if result.get("best_k") is not None:
        said = "best K=%d: %.2fx the baseline" % (result["best_k"], result["speedup"] or 0.0)
        if margin.get("next_k") is not None:
            said += ", %.1f%% over the next best (K=%d)" % (100.0 * margin["over_next_k"], margin["next_k"])
            words = margin_words(result["best_k"], margin["next_k"], margin["over_next_k"], margin.get("noise"),
                                 result.get("requests"))
            if words and margin.get("within_noise") is False:
                said += ", " + words
            elif words:  # the doubt on a line of its own, where it is read
                lines.append(said)
                said = words
        lines.append(said)
    model = result.get("cost_model")
    if model:
        lines.append("cycle time    %.1f ms + %.1f ms per K (least squares over %d Ks, off by at most %.1f ms)" % (
            model["intercept_ms"], model["slope_ms_per_k"], model["points"], model["max_residual_ms"]))
    return lines


def _number(value, pattern="%.2f"):
    return "-" if value is None else pattern % value


def pays_off(row):
    """`yes`/`no` for a K whose accept length and break-even are known, else `-`."""
    if row.get("accept_length") is None or row.get("break_even_accept_length") is None:
        return "-"
    return "yes" if row["accept_length"] >= row["break_even_accept_length"] else "no"


def line_text(line):
    """`2.46 (set: 30 ms x 82 tok/s)`, `2.31 (benchmark j5)`: a break-even line and where it came from."""
    if not line:
        return "-"
    source = line.get("source") or "?"
    return "%.2f (%s)" % (line["accept_length"], safe_text("%s: %s" % (source, line["how"]) if line.get("how") else source))


def break_even_words(advice):
    """Which line the rows' break-even column uses, when it is not the server's own line: a
    sweep's rows are each K's (its cycle time x the baseline), the server's line holds for the
    running K's cycle only."""
    line = line_of(advice.get("break_even"))
    sources = sorted({row.get("break_even_source") for row in advice.get("per_k") or () if isinstance(row.get("break_even_source"), str)})
    swept = [s for s in sources if s.startswith("sweep ")]
    if swept and line:
        return "break-even: each K's from %s's cycle times; this server's line is %s" % (swept[0][len("sweep "):], line_text(line))
    if swept:
        return "break-even: each K's from %s's cycle times" % swept[0][len("sweep "):]
    if line:
        return "break-even: this server's line %s, for its running K" % line_text(line)
    return None


def sweep_command(advice, host=None):
    """`specdeck bench gpu1 /models/target --drafter /models/eagle3 --k 1,2,3,4,5`: the sweep the
    advice asks for, with the host and the server's target and drafter filled in where known
    (a placeholder only for what neither side knows); None when it asks for none."""
    to_run = advice.get("sweep_to_run")
    if not to_run:
        return None
    words = ["specdeck", "bench", host or "HOST", to_run.get("target") or "TARGET", "--drafter", to_run.get("drafter") or "DRAFTER",
             "--k", ",".join(str(k) for k in to_run.get("ks") or ())]
    return safe_text(" ".join(shlex.quote(str(word)) for word in words))


def advice_lines(advice, host=None):
    """The advice as lines (the same in `specdeck advise` and the Speculation pane): a row per K
    with its accept length, the cycle time and break-even it needs, whether it pays off and where
    the accept length came from; then the advice, and the sweep to run when one is missing
    (`host`: the name the laptop knows the host by)."""
    lines = ["   K  accept  cycle ms  tok/s    speedup  break-even  pays  from"]
    for row in advice["per_k"]:
        source = row.get("source") or "-"
        if source == "live" and row["k"] == advice.get("k_current"):
            source = "live (running K)"
        elif not row.get("measured"):
            source = row.get("estimate_from") or "estimate"
        elif source == "sweep":
            source = "sweep %s (its prompts)" % advice.get("sweep")
        lines.append("  %2d  %6s  %8s  %7s  %7s  %10s  %4s  %s" % (
            row["k"], _number(row.get("accept_length")), _number(row.get("cycle_ms"), "%.1f"), _number(row.get("tokens_per_s"), "%.1f"),
            _number(row.get("speedup"), "%.2fx"), _number(row.get("break_even_accept_length")), pays_off(row), source))
    said = break_even_words(advice)
    if said:
        lines.append(said)
    if advice.get("k_current"):
        lines.append("K' > %d: beyond what this server measured (it drafts %d); those rows come from a sweep or are estimates, as said"
                     % (advice["k_current"], advice["k_current"]))
    if advice.get("per_position") or advice.get("per_position_note"):
        lines += position_text.lines(advice, 14)
    lines.append(("advice: use " if advice.get("best_k") and not advice["reason"].startswith("no K") else "advice: ") + advice["reason"])
    command = sweep_command(advice, host)
    if command:
        lines.append("run it:  " + command)
    return lines


def cmd_advise(args):
    client = connect(args, args.host)
    try:
        advice = client.call("serving.advise", {"id": args.job, "sweep": args.sweep}, timeout=60)
    except RemoteError as exc:
        raise CommandError(exc.message, EXIT_FAILED)
    result = dict((key, advice.get(key)) for key in ADVICE_KEYS)
    result.update(position_text.json_part(advice))
    result["per_k"] = [dict((key, row.get(key)) for key in ADVICE_ROW_KEYS) for row in advice["per_k"]]
    result["sweep_command"] = sweep_command(advice, args.host)
    emit(args, result, lambda: "\n".join(advice_lines(advice, args.host)))
    return 0


def coverage_lines(result):
    if result.get("full_vocabulary"):
        return ["coverage      1 (%s)" % result["note"]]
    lines = ["coverage      %.4f   %d of %d target tokens inside the draft vocabulary (%s of %s ids, from %s)" % (
        result["coverage"] or 0.0, result["inside"], result["tokens"], _number(result.get("draft_vocab_size"), "%d"),
        _number(result.get("target_vocab_size") or result.get("target_tokenizer_size"), "%d"), result["source"])]
    lines.append("bound         " + "   ".join("K=%d %.2f" % (row["k"], row["accept_length"]) for row in result["bound"] if row["accept_length"] is not None))
    lines.append("              (%s)" % result["note"])
    if result["top_missing"]:
        lines.append("never proposed (most frequent first, of %d distinct):" % result["distinct_missing"])
        for row in result["top_missing"]:
            lines.append("  %7d  %5.2f%%  id %-7d %r" % (row["count"], 100.0 * row["share"], row["id"], row["text"]))
    return lines


def cmd_coverage(args):
    params = {"drafter": args.drafter, "target": args.target, "top": args.top, "trust_remote_code": args.trust_remote_code,
              # The ML interpreter, as serve's: --python, else `config HOST --ml-python`, else the agent's.
              "python": args.python or config.remembered(args.host, "ml_python")}
    if args.job:
        params["server"] = args.job
    elif args.text.startswith("host:"):
        params["text_path"] = args.text[len("host:"):]
    else:
        try:
            with open(args.text, encoding="utf-8", errors="replace") as f:
                params["text"] = f.read()
        except OSError as exc:
            raise CommandError("cannot read %s: %s" % (args.text, exc.strerror))
        params["text_name"] = os.path.abspath(args.text)
    if not args.job and not args.target:
        raise CommandError("--target is needed with --text: its tokenizer reads the text")
    client = connect(args, args.host, reconnect=True)
    try:
        job = client.call("checkpoint.coverage", params, timeout=120)
    except RemoteError as exc:
        raise CommandError(exc.message, EXIT_FAILED)
    job = wait_for_result(client, job, args.json, lambda job, progress: progress.get("state", job["state"]))
    progress = job.get("progress") or {}
    result = progress.get("result")
    if not result:
        raise CommandError("coverage %s failed: %s" % (job["id"], progress.get("error") or "the job ended (%s) without a result" % job["state"]), EXIT_FAILED)
    emit(args, result, lambda: "\n".join(coverage_lines(result)))
    return 0
