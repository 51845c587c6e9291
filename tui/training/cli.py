"""Training from the command line: train (a training or data-generation job), curves (its curves,
the accept length they predict, ETA, checkpoints) and checkpoints (the list with verdicts)."""

import shlex
import unicodedata

from remote.report.text import line as one_line  # a host's name on one line, as the report shows it

from .. import display
from ..cli.common import EXIT_FAILED, CommandError, connect, emit, env_option, report_error
from ..cli.slurm_options import add_slurm_options, slurm_params
from ..cli.slowdown_options import add_slowdown_option, slowdown_params
from ..cli.stall_options import add_stall_option, stall_params
from .. import config
from . import model


def add_commands(commands):
    p = commands.add_parser("train", help="start a drafter training (or data generation) job; prints its id")
    p.set_defaults(func=cmd_train)
    p.add_argument("host")
    p.add_argument("--save-dir", metavar="DIR", help="where the run writes checkpoints (each is inspected when complete)")
    p.add_argument("--name", help="the job's name")
    p.add_argument("--datagen", action="store_true", help="a data-generation job (progress: samples done of total)")
    p.add_argument("--start-from", metavar="PATH", help="the drafter the run starts from (each checkpoint is compared with it)")
    p.add_argument("--target", metavar="PATH", help="the target model directory (each checkpoint is checked against it)")
    p.add_argument("--break-even", type=float, metavar="LENGTH", help="the accept length serving must beat")
    p.add_argument("--env", action="append", default=[], metavar="KEY=VALUE", help="environment addition (repeatable)")
    _measure_arguments(p, "measure each servable checkpoint's real accept length (the A/B benchmark) against TARGET")
    p.add_argument("--score-data", metavar="DIR", help="score each checkpoint as it lands: the accept length it will reach on --target, "
                   "predicted from the target's hidden states in DIR (a job under the ML interpreter)")
    p.add_argument("--score-k", type=int, metavar="K", help="drafts per cycle the score counts (default 5)")
    add_stall_option(p)
    add_slowdown_option(p)
    add_slurm_options(p)

    p = commands.add_parser("curves", help="a training run's curves, predicted accept length, ETA and checkpoints")
    p.set_defaults(func=cmd_curves)
    p.add_argument("host")
    p.add_argument("job")
    p.add_argument("--points", type=int, default=2000, metavar="N", help="at most N steps (a longer run comes in buckets)")
    p.add_argument("--plateau-s", type=float, default=1800.0, metavar="SECONDS",
                   help="alert when the loss has not fallen for this long (default 1800)")

    p = commands.add_parser("checkpoints", help="the checkpoints a training run wrote, with verdicts")
    p.set_defaults(func=cmd_checkpoints)
    p.add_argument("host")
    p.add_argument("job")
    p.add_argument("--measure", metavar="NAME", help="queue a measurement of checkpoint NAME (the run's measure options unless given)")
    _measure_arguments(p, "the target to measure against (default: the run's measure options)")
    p.add_argument("--export", metavar="NAME", help="start `specforge export` of SpecForge checkpoint NAME as a job; its output "
                   "(NAME-hf or NAME-sglang in the save directory) is then listed and inspected")
    p.add_argument("--to", choices=("hf", "sglang"), help="what --export makes (default hf)")
    p.add_argument("--draft-config", metavar="JSON", help="SpecForge's draft model config for --export "
                   "(default: the run's model.draft_model_config=)")
    p.add_argument("--vocab-mapping", metavar="PT", help="for --export (default: the run's model.vocab_mapping_path=)")
    p.add_argument("--embedding-source", metavar="TARGET", help="for --export --to hf: the target model supplying the embedding")
    p.add_argument("--export-python", metavar="PATH", help="run PATH -m specforge.cli for --export (default: the run's SpecForge)")
    p.add_argument("--score", action="store_true", help="score every checkpoint (one job): the accept length each will reach on the "
                   "target, predicted from its hidden states (--data), printed beside the trainer's figures, the best marked ^")
    p.add_argument("--data", metavar="DIR", help="for --score: the target's hidden states (speculators' data directory or SpecForge's)")
    p.add_argument("--k", type=int, metavar="K", help="for --score: drafts per cycle (default 5)")
    p.add_argument("--target", metavar="PATH", help="for --score: the target (default the run's --target)")
    p.add_argument("--samples", type=int, metavar="N", help="for --score: score at most N samples")
    p.add_argument("--split", choices=("val", "train", "all"), help="for --score: speculators' rows (default val, held out)")


def _measure_arguments(p, target_help):
    p.add_argument("--measure-target", metavar="TARGET", help=target_help)
    p.add_argument("--measure-python", metavar="PATH", help="an interpreter with the serving engine")
    p.add_argument("--measure-gpus", metavar="IDS", help="the GPUs the measurement uses (CUDA_VISIBLE_DEVICES)")
    p.add_argument("--measure-k", type=int, metavar="K", help="drafted tokens per cycle (default 3)")
    p.add_argument("--measure-engine", choices=("vllm", "sglang"), help="the serving engine (default vllm)")
    p.add_argument("--measure-port", type=int, metavar="PORT", help="the port its servers listen on")
    p.add_argument("--measure-requests", type=int, metavar="N", help="requests per server (default 8)")
    p.add_argument("--measure-max-tokens", type=int, metavar="N", help="tokens per request (default 64)")
    p.add_argument("--measure-env", action="append", default=[], metavar="KEY=VALUE", help="the servers' environment (repeatable)")
    p.add_argument("--measure-arg", action="append", default=[], metavar="ARG", help="an engine argument (repeatable; --measure-arg=--dtype)")


def _measure_options(args):
    """The measure options the flags give, or None when no --measure-target was given."""
    if not args.measure_target:
        return None
    options = {"target": args.measure_target, "env": env_option(args.measure_env), "engine_args": list(args.measure_arg)}
    for key in ("python", "gpus", "k", "engine", "port", "requests", "max_tokens"):
        value = getattr(args, "measure_" + key)
        if value is not None:
            options[key] = value
    return options


def cmd_train(args):
    params = {"argv": args.after_dashes, "kind": "datagen" if args.datagen else "training", "env": env_option(args.env)}
    for key, value in (("python", args.python), ("save_dir", args.save_dir), ("name", args.name),
                       ("start_from", args.start_from), ("target", args.target), ("break_even", args.break_even),
                       ("measure", _measure_options(args))):
        if value is not None:
            params[key] = value
    if not params["argv"]:
        raise CommandError("train: give the command after -- (e.g. specdeck train HOST -- speculators train ...)")
    if args.score_data:
        if not args.target:
            raise CommandError("train: --score-data needs --target (the model whose hidden states DIR holds)")
        params["score"] = {"data": args.score_data, "k": args.score_k or 5,
                           "python": args.python or config.remembered(args.host, "ml_python")}
        params["score"] = dict((key, value) for key, value in params["score"].items() if value is not None)
    elif args.score_k is not None:
        raise CommandError("train: --score-k goes with --score-data DIR")
    params.update(stall_params(args))
    params.update(slowdown_params(args))
    params.update(slurm_params(args))
    client = connect(args, args.host)
    try:
        job = client.call("training.start", params)
    finally:
        client.close()
    emit(args, {"id": job["id"]}, lambda: job["id"])
    return 0


def cmd_curves(args):
    client = connect(args, args.host)
    try:
        reply = client.call("training.curves", {"id": args.job, "points": args.points, "plateau_s": args.plateau_s})
    finally:
        client.close()

    def text():
        latest = reply.get("latest") or {}
        predicted = reply.get("prediction") or {}
        said = model.number(predicted.get("accept_length"))
        if predicted.get("from") == "validation" and predicted.get("epoch") is None:
            said += " (validation, step %s)" % predicted.get("step", "-")
        elif predicted.get("from") == "validation":
            said += " (validation, epoch %s)" % predicted.get("epoch", "-")
        elif predicted.get("from"):
            said += " (training steps, step %s)" % predicted.get("step", "-")
        shown = model.step_figures(latest)
        lines = ["step %s  epoch %s  loss %s  predicted accept length %s  eta %s" % (
            shown["step"], shown["epoch"], shown["loss"], said, display.format_duration(reply.get("eta_s")))]
        if predicted.get("full_acc"):
            # The accuracies the prediction is 1 + the sum of, from the record it was taken from.
            lines.append("full acc (%s) %s" % (predicted["from"], " ".join("%.3f" % v for v in predicted["full_acc"])))
        judged = reply.get("verdict")
        if reply.get("break_even") is not None:
            lines.append("break-even %.2f (%s): %s" % (reply["break_even"], one_line(reply.get("break_even_source")), (
                "%s (%s %.2f)" % (judged["verdict"], judged["judged"], judged["accept_length"]) if judged else "-")))
        for entry in reply.get("validation", []):
            at = "epoch %s" % entry["epoch"] if entry.get("epoch") is not None else "step %s" % entry.get("step")
            lines.append("validation %s: loss %s, predicted accept length %s" % (
                at, model.loss_text(entry.get("loss")), model.number(entry.get("predicted_accept_length"))))
        for alert in reply.get("alerts", []):
            lines.append("alert: " + one_line(alert))
        for notice in reply.get("notices") or []:
            lines.append("notice: " + one_line(notice))
        if reply.get("error"):
            lines.append("error: following the run failed: " + one_line(reply["error"]))
        lines += [_checkpoint_line(c) for c in reply.get("checkpoints", [])]
        best = model.best_line(reply.get("checkpoints", []))
        if best:
            lines.append(one_line(best))
        return "\n".join(lines)

    emit(args, reply, text)
    failure = model.run_failure(reply)
    if failure:
        report_error("RunFailed", failure, args.json)
        return EXIT_FAILED
    return 0


def _checkpoint_line(entry):
    """One checkpoint as the Training pane's row says it (model.py), with its path and format: one
    line whatever its directory's name holds (a newline or escape shows as `\\n`, `\\x1b`)."""
    shown = {key: one_line(value) for key, value in model.checkpoint_figures(entry).items() if value is not None}
    predicted = shown["predicted"] + (" (%s)" % shown["predicted_from"] if shown.get("predicted_from") else "")
    # Scored (checkpoints --score) beside the trainer's prediction, once there is a score.
    scored = "  scored %s" % shown["scored"] if entry.get("scored_accept_length") is not None else ""
    line = "checkpoint %s  step %s  %s  predicted %s%s  measured %s  %s" % (
        shown["path"], shown["step"], shown["format"], predicted, scored, shown["measured"], shown["verdict"])
    if entry.get("best"):
        line += "  (best)"
    if entry.get("best_by_accept_length"):
        line += "  (best by accept length)"
    if entry.get("latest"):
        line += "  (latest)"
    if entry.get("exported_from"):
        line += "  (exported from %s)" % one_line(entry["exported_from"])
    if entry.get("hint") and not entry.get("export"):
        line += "  - " + one_line(entry["hint"])  # SpecForge's export, speculators' interrupted/ resume
    if shown.get("measure_error"):
        line += "  (%s)" % shown["measure_error"]
    return line


def shell_line(argv):
    """`argv` as a shell reads it, on one line: shlex's quoting, and a word holding a control
    character as bash's $'...' with the character's escape (`$'ck\\nrow'`), so a name can neither
    break the line nor run as a second command when pasted."""
    words = []
    for word in argv:
        if word.isprintable():
            words.append(shlex.quote(word))
        else:
            quoted = word.replace("\\", "\\\\").replace("'", "\\'")
            words.append("$'%s'" % "".join(c if unicodedata.category(c) == "Zs" else one_line(c) for c in quoted))
    return " ".join(words)


def _export_params(args):
    params = {"id": args.job, "checkpoint": args.export}
    for key, value in (("to", args.to), ("draft_config", args.draft_config), ("vocab_mapping", args.vocab_mapping),
                       ("embedding_source", args.embedding_source), ("python", args.export_python)):
        if value is not None:
            params[key] = value
    return params


def cmd_checkpoints(args):
    if sum(bool(x) for x in (args.export, args.measure, args.score)) > 1:
        raise CommandError("checkpoints: --export, --measure and --score are one at a time")
    if not args.score and any(v is not None for v in (args.data, args.k, args.target, args.samples, args.split)):
        raise CommandError("checkpoints: --data, --k, --target, --samples and --split go with --score")
    if args.score:
        return _score(args)
    if not args.export and any(v is not None for v in (args.to, args.draft_config, args.vocab_mapping, args.embedding_source,
                                                       args.export_python)):
        raise CommandError("checkpoints: --to, --draft-config, --vocab-mapping, --embedding-source and --export-python go with --export NAME")
    client = connect(args, args.host)
    try:
        if args.export:
            started = client.call("training.export", _export_params(args))
            emit(args, started, lambda: "checkpoint %s of %s: export started as job %s, into %s\n%s" % (
                one_line(started["checkpoint"]), one_line(started["id"]), one_line(started["job"]), one_line(started["output_dir"]),
                shell_line(started["argv"])))
            return 0
        if args.measure:
            params = {"id": args.job, "checkpoint": args.measure}
            if _measure_options(args):
                params["measure"] = _measure_options(args)
            queued = client.call("training.measure", params)
            emit(args, queued, lambda: "checkpoint %s of %s queued for measurement" % (one_line(queued["checkpoint"]), one_line(queued["id"])))
            return 0
        entries = client.call("training.checkpoints", {"id": args.job})["checkpoints"]
    finally:
        client.close()
    emit(args, {"checkpoints": entries}, lambda: "\n".join(_checkpoint_line(e) for e in entries) or "no checkpoint yet")
    return 0


def _score(args):
    """`checkpoints --score`: one score job over the run's checkpoints, followed to its end (its
    progress on stderr), then each checkpoint's line with its scored accept length, the best by
    it marked beside the trainer's best."""
    from remote.core.protocol import RemoteError
    from remote.training import scores

    from ..scoring.cli import _status

    if not args.data:
        raise CommandError("checkpoints --score: give --data DIR (the target's hidden states, final layer included)")
    params = {"id": args.job, "data": args.data, "k": args.k, "target": args.target, "samples": args.samples, "split": args.split,
              "python": args.python or config.remembered(args.host, "ml_python")}
    params = dict((key, value) for key, value in params.items() if value is not None)
    client = connect(args, args.host, reconnect=True)
    try:
        try:
            started = client.call("training.score", params, timeout=300)
        except RemoteError as exc:
            raise CommandError(exc.message, EXIT_FAILED)
        if not args.json:
            print("%s  scoring %d checkpoints of %s" % (started["job"], len(started["checkpoints"]), one_line(args.job)), flush=True)
        from ..serving.advisor import wait_for_result

        job = wait_for_result(client, client.call("jobs.get", {"id": started["job"]}), args.json, _status)
        entries = client.call("training.checkpoints", {"id": args.job})["checkpoints"]
    finally:
        client.close()
    progress = job.get("progress") or {}
    result = progress.get("result")
    if not result:
        raise CommandError("score %s failed: %s" % (job["id"], progress.get("error") or "the job ended (%s) without a result" % job["state"]),
                           EXIT_FAILED)
    # The job's own figures, whether or not the run's journal has taken them yet.
    by_name = dict(zip(started["checkpoints"], result["drafters"]))
    for entry in entries:
        figures = by_name.get(entry["name"])
        if figures is not None:
            entry["scored_accept_length"] = figures["predicted_accept_length"]
            entry["score"] = dict(entry.get("score") or {}, state="done", job=job["id"], error=None)
    best = scores.best(entries)
    for entry in entries:
        entry["best_by_accept_length"] = entry["name"] == best
    reply = {"checkpoints": entries, "job": job["id"], "k": result["k"], "best": next((e["name"] for e in entries if e.get("best")), None),
             "best_by_accept_length": best, "samples_scored": result["samples_scored"], "split": result["split"],
             "held_out": result["held_out"], "notes": result.get("notes") or []}

    def text():
        lines = [_checkpoint_line(e) for e in entries]
        lines.append(one_line(model.best_line(entries) or "no checkpoint scored"))
        lines.append("scored at K=%d on %d samples (%s split)" % (result["k"], result["samples_scored"], one_line(result["split"])))
        lines += ["note: " + one_line(note) for note in result.get("notes") or ()]
        return "\n".join(lines)

    emit(args, reply, text)
    return 0
