"""`specdeck score`: the accept length a drafter will reach on a target, predicted on the host
from hidden states the target already produced (a job under the host's ML interpreter, torch,
the GPU when free), with `--vs` a second drafter on the same samples, per position. Without
--wait it prints the job; with --wait it follows the job (progress and ETA on stderr) and prints
the result (--json: every figure, `predicted_accept_length` at the K asked among them).

The job runs under --python, else what `specdeck config HOST --ml-python` remembers, else the
agent's interpreter; it needs torch (and pyarrow to read speculators' loss masks and split).
"""

import os

from remote.core.protocol import RemoteError

from .. import config
from ..cli.common import EXIT_FAILED, CommandError, connect, emit
from ..display import safe_text

JSON_KEYS = ("k", "predicted_accept_length", "predicted_accept_length_per_k", "unconditional_shares", "conditional_rates",
             "accept_length_histogram", "chains", "drafters", "samples_scored", "samples_chosen", "samples_found",
             "samples_skipped", "positions", "off_path_tokens", "data", "layout", "split", "held_out", "target",
             "target_revision", "device", "device_reason", "seconds", "samples_per_s", "peak_rss_bytes", "notes", "profile")


def add_commands(commands):
    p = commands.add_parser("score", help="predict a drafter's accept length on a target from its hidden states, before serving it",
                            usage="specdeck score HOST DRAFTER --target TARGET --data DIR [--k 5] [--samples N] [--vs OTHER] [--wait] [--json]")
    p.set_defaults(func=cmd_score)
    p.add_argument("host")
    p.add_argument("drafter", help="the EAGLE-3 drafter (a directory on the host)")
    p.add_argument("--target", required=True, metavar="PATH", help="the target (its embed_tokens, final norm and lm_head are read, nothing else)")
    p.add_argument("--data", required=True, metavar="DIR", help="hidden states: speculators' data directory (hidden_states/hs_N.safetensors, "
                   "with the target's final layer captured) or SpecForge's prepare_hidden_states output")
    p.add_argument("--k", type=int, default=5, metavar="K", help="drafts per cycle (default 5); figures at every K' <= K")
    p.add_argument("--samples", type=int, metavar="N", help="score at most N samples")
    p.add_argument("--vs", metavar="OTHER", help="a second drafter, scored on the same samples, side by side")
    p.add_argument("--split", choices=("val", "train", "all"), help="speculators' rows: val (held out, the default), train or all")
    p.add_argument("--cpu", action="store_true", help="keep the job off the GPU")
    p.add_argument("--wait", action="store_true", help="follow the job and print its result")


def _number(value, pattern="%.2f"):
    return "-" if value is None else pattern % value


def result_lines(result):
    """The result as `score` prints it: the figure, per position for each drafter, the notes."""
    drafters = result["drafters"]
    names = [safe_text(os.path.basename(d["drafter"].rstrip("/"))) for d in drafters]
    k = result["k"]
    lines = ["predicted accept length  %s at K=%d   (%d positions of %d samples, %s split, on %s)" % (
        _number(result["predicted_accept_length"]), k, result["chains"], result["samples_scored"], result["split"], result["device"])]
    if len(drafters) > 1:
        lines[0] = "predicted accept length at K=%d   (%d positions of %d samples, %s split, on %s)" % (
            k, result["chains"], result["samples_scored"], result["split"], result["device"])
    width = max(12, max(len(n) for n in names))
    head = "  pos  " + "  ".join("%-*s" % (width + 18, n) for n in names)
    lines.append(head)
    lines.append("       " + "  ".join("%-*s" % (width + 18, "share  conditional  K'") for _ in names))
    for j in range(k):
        cells = []
        for d in drafters:
            cells.append("%-*s" % (width + 18, "%5s  %11s  %s" % (_number(d["unconditional_shares"][j], "%.3f"),
                                                                  _number(d["conditional_rates"][j], "%.3f"),
                                                                  _number(d["predicted_accept_length_per_k"][j]["accept_length"]))))
        lines.append("  %3d  %s" % (j + 1, "  ".join(cells)))
    lines.append("  (share: of all chains, the first N drafts all accepted; conditional: draft N accepted when the N-1 before it were;")
    lines.append("   K': the accept length a server drafting K' tokens would see, its bonus token counted)")
    for name, d in zip(names, drafters):
        histogram = "  ".join("%s:%d" % (length, count) for length, count in sorted(d["accept_length_histogram"].items(), key=lambda kv: int(kv[0])))
        lines.append("accept lengths %s  %s%s" % (name, histogram, "   (lower bound: %d chains cut)" % d["chains_cut"] if d.get("bound") else ""))
    profile = result.get("profile") or {}
    if profile.get("path"):
        lines.append("profile       %s" % safe_text(profile["path"]))
    if profile.get("note"):
        lines.append("note          %s" % safe_text(profile["note"]))
    for note in result.get("notes") or ():
        lines.append("note          %s" % safe_text(note))
    return lines


def _status(job, progress):
    said = progress.get("state", job["state"])
    if progress.get("total"):
        said += "  %d/%d samples" % (progress.get("done", 0), progress["total"])
        if progress.get("samples_per_s"):
            said += "  %.1f/s" % progress["samples_per_s"]
        if progress.get("eta_s") is not None and progress.get("done", 0) < progress["total"]:
            said += "  ETA %ds" % int(progress["eta_s"])
    return said


def cmd_score(args):
    from ..serving.advisor import wait_for_result

    params = {"drafter": args.drafter, "target": args.target, "data": args.data, "k": args.k, "samples": args.samples,
              "vs": args.vs, "split": args.split, "device": "cpu" if args.cpu else None,
              # The ML interpreter, as serve's: --python, else `config HOST --ml-python`, else the agent's.
              "python": args.python or config.remembered(args.host, "ml_python")}
    client = connect(args, args.host, reconnect=args.wait)
    try:
        job = client.call("score.start", params, timeout=300)
    except RemoteError as exc:
        raise CommandError(exc.message, EXIT_FAILED)
    if not args.wait:
        emit(args, {"id": job["id"], "name": job.get("name")}, "%s  %s  (follow it: specdeck logs %s %s -f; or score --wait)"
             % (job["id"], safe_text(job.get("name") or ""), args.host, job["id"]))
        return 0
    if not args.json:
        print(job["id"], flush=True)
    job = wait_for_result(client, job, args.json, _status)
    progress = job.get("progress") or {}
    result = progress.get("result")
    if not result:
        raise CommandError("score %s failed: %s" % (job["id"], progress.get("error") or "the job ended (%s) without a result" % job["state"]),
                           EXIT_FAILED)
    emit(args, dict((key, result.get(key)) for key in JSON_KEYS), lambda: "\n".join(result_lines(result)))
    return 0
