"""Jobs from the command line: run, jobs, logs, stop, forget."""

import json
import sys
import threading
import time

from ..cli.common import EXIT_FAILED, CommandError, connect, emit, env_option
from ..cli.slurm_options import add_slurm_options, slurm_params
from ..cli.stall_options import add_stall_option, stall_params
from ..display import log_text, safe_text
from . import model


def byte_count(text):
    """A --tail: a whole number of bytes, 0 or more (argparse turns the ValueError into a usage line)."""
    value = int(text)
    if value < 0:
        raise ValueError(text)
    return value


def add_commands(commands):
    p = commands.add_parser("run", help="start a detached job on the host")
    p.set_defaults(func=cmd_run)
    p.add_argument("host")
    p.add_argument("argv", nargs="*", metavar="-- CMD ARGS", help="the command, after --")
    p.add_argument("--name", help="a name for the job (default: the command line)")
    p.add_argument("--cwd", help="working directory on the host (default: home)")
    p.add_argument("--env", action="append", default=[], metavar="KEY=VALUE", help="environment addition (repeatable)")
    p.add_argument("--interpreter", metavar="PATH", help="run CMD with this interpreter, e.g. a venv's python")
    p.add_argument("--kind", default="command", choices=("command", "server", "training", "benchmark"))
    p.add_argument("--notify", action="store_true", help="tell the host's notification channels when it ends, however it ends")
    add_stall_option(p)
    add_slurm_options(p)

    p = commands.add_parser("jobs", help="list the host's jobs")
    p.set_defaults(func=cmd_jobs)
    p.add_argument("host")

    p = commands.add_parser("logs", help="print a job's log")
    p.set_defaults(func=cmd_logs)
    p.add_argument("host")
    p.add_argument("job")
    p.add_argument("-f", "--follow", action="store_true", help="keep printing as the log grows, across reconnects")
    p.add_argument("--tail", type=byte_count, metavar="BYTES", help="start this many bytes before the end")
    p.add_argument("--raw", action="store_true",
                   help="the log's bytes as they are, escape sequences included (default: as text, colours dropped, "
                        "other controls shown as escapes)")

    p = commands.add_parser("stop", help="stop a job: TERM to everything it started, KILL after the grace period")
    p.set_defaults(func=cmd_stop)
    p.add_argument("host")
    p.add_argument("job")
    p.add_argument("--grace", type=float, default=10.0, metavar="S", help="seconds between TERM and KILL (default 10)")
    p.add_argument("--wait", action="store_true", help="return once the job has ended")
    p.add_argument("--yes", action="store_true", help="cancel a Slurm job specdeck did not start without asking")

    p = commands.add_parser("forget", help="remove ended jobs and their logs from the host")
    p.set_defaults(func=cmd_forget)
    p.add_argument("host")
    p.add_argument("jobs", nargs="+", metavar="JOB")


def cmd_run(args):
    argv = args.argv
    if not argv:
        raise CommandError("nothing to run: give the command after --, e.g. specdeck run HOST -- python train.py")
    env = env_option(args.env)
    params = {"argv": argv, "cwd": args.cwd, "env": env, "python": args.interpreter, "name": args.name, "kind": args.kind,
              "notify": args.notify or None}
    params.update(stall_params(args))
    params.update(slurm_params(args))
    client = connect(args, args.host)
    job = client.call("jobs.submit", params)
    if job.get("slurm_id"):
        emit(args, {"id": job["id"], "slurm_id": job["slurm_id"]}, "%s  slurm %s" % (job["id"], job["slurm_id"]))
    else:
        emit(args, {"id": job["id"]}, job["id"])
    return 0


def format_jobs(jobs):
    """The jobs as the Jobs pane's table shows them: the same columns, the same figures."""
    rows = [tuple(label.upper() for label, _ in model.COLUMNS)]
    now = time.time()
    for job in jobs:
        shown = model.figures(job, now)
        rows.append(tuple(shown[key] for _, key in model.COLUMNS))
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    return "\n".join("  ".join(cell.ljust(width) for cell, width in zip(row, widths)).rstrip() for row in rows)


def cmd_jobs(args):
    jobs = [model.with_engine_fields(job) for job in connect(args, args.host).call("jobs.list")["jobs"]]
    emit(args, jobs, lambda: format_jobs(jobs) if jobs else "no jobs on this host")
    return 0


class LogText:
    """Where `logs` writes a log, piece by piece as it comes (a progress bar redraws before its
    line ends): display.log_text's cleaning, or with --raw the text as it is. Either way past the
    stdout guard, whose rule would show the bar's \\r as an escape."""

    def __init__(self, raw):
        self.out = getattr(sys.stdout, "raw", sys.stdout)
        self.raw = raw
        self.held = ""

    def write(self, text):
        if not self.raw:
            text, self.held = log_text(self.held + text)
        self.out.write(text)
        self.out.flush()

    def finish(self):
        if self.held:
            self.out.write(safe_text(self.held))
            self.held = ""
        self.out.flush()


def cmd_logs(args):
    out = sys.stdout if args.json else LogText(args.raw)
    if not args.follow:
        client = connect(args, args.host)
        offset = -args.tail if args.tail else 0
        while True:
            chunk = client.call("jobs.tail", {"id": args.job, "offset": offset, "max_bytes": 1 << 20})
            if args.json:
                print(json.dumps({"offset": chunk["offset"], "text": chunk["text"]}))
            else:
                out.write(chunk["text"])
            if chunk["next_offset"] >= chunk["size"]:
                break
            offset = chunk["next_offset"]
        if args.json:
            out.flush()
        else:
            out.finish()
        return 0
    client = connect(args, args.host, reconnect=True)
    done = threading.Event()
    result = {}

    def on_data(data, seq):
        if args.json:
            out.write(json.dumps({"offset": data["offset"], "text": data["text"]}) + "\n")
            out.flush()
        else:
            out.write(data["text"])

    def on_end(data):
        result.update(data)
        done.set()

    after = 0
    if args.tail:  # from the window's first whole line, as without --follow
        after = client.call("jobs.tail", {"id": args.job, "offset": -args.tail, "max_bytes": args.tail})["offset"]
    client.subscribe("jobs.follow", {"id": args.job, "after": after}, on_data, on_end)
    from .follow import wait_for_event

    try:
        wait_for_event(client, done)
    except KeyboardInterrupt:
        return 130
    if not args.json:
        out.finish()
    job = result.get("job") or {}
    if result.get("error"):
        raise CommandError(result["error"], EXIT_FAILED)
    if job.get("exit_code") != 0:  # the log alone does not say the job failed: one line does
        raise CommandError(model.ended_line(job, args.job), EXIT_FAILED, "JobFailed")
    return 0


def confirm_foreign_stop(args, job):
    """A Slurm job specdeck did not start is cancelled only when the user says so: --yes, or
    `y` at the question on a terminal."""
    if args.yes:
        return
    what = "%s is Slurm job %s, which specdeck did not start (%s)" % (job["id"], job.get("slurm_id"), job.get("name") or "no name")
    if args.json or not sys.stdin.isatty():
        raise CommandError("%s: add --yes to cancel it" % what)
    answer = input("%s. Cancel it? [y/N] " % what)
    if answer.strip().lower() not in ("y", "yes"):
        raise CommandError("not cancelled")


def cmd_stop(args):
    client = connect(args, args.host, reconnect=args.wait)
    if not model.is_ours(args.job):
        confirm_foreign_stop(args, client.call("jobs.get", {"id": args.job}))
    job = client.call("jobs.stop", {"id": args.job, "grace_s": args.grace})
    if args.wait:
        from .follow import follow_job  # (and its queue) only for a command that waits

        job = follow_job(client, job)
    emit(args, job, lambda: "%s %s" % (job["id"], job["state"]))
    return 0


def cmd_forget(args):
    """Forgets every ended job named; an id of no job is named on stderr, and the exit is 1."""
    reply = connect(args, args.host).call("jobs.forget", {"ids": args.jobs})
    if reply["forgotten"] or args.json:
        emit(args, reply, lambda: "forgot %s" % " ".join(reply["forgotten"]))
    if reply["not_found"]:
        if not args.json:
            missing = reply["not_found"]
            print("specdeck: no job%s %s on this host" % ("s" if len(missing) > 1 else "", ", ".join(missing)), file=sys.stderr)
        return EXIT_FAILED
    return 0
