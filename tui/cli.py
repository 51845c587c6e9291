"""`specdeck`: the console, and every console action as a headless command with --json.

  specdeck [HOST]                          open the console (no host: this machine)
  specdeck run HOST -- CMD ARGS...         start a detached job, print its id
  specdeck jobs HOST                       list jobs
  specdeck logs HOST JOB [--follow]        print a job's log
  specdeck stop HOST JOB                   stop a job (TERM, KILL after a grace period)
  specdeck inspect [HOST:]PATH             list and check a safetensors checkpoint
  specdeck compare [HOST:]A [HOST:]B       side by side, with a verdict
  specdeck download HOST REPO [FILE...] --local-dir DIR
  specdeck verify [HOST:]DIR --repo REPO

HOST is an ssh destination (user@host, user@host:port, a ~/.ssh/config alias) or `local`.
"""

import argparse
import json
import os
import re
import sys
import threading
import time

from remote.core.protocol import RemoteError

from . import display
from .client import ConnectError

COMMANDS = ("run", "jobs", "logs", "stop", "inspect", "compare", "download", "verify")
EXIT_FAILED = 1
EXIT_USAGE = 2


class CommandError(Exception):
    """One line for the user, and the exit code."""

    def __init__(self, message, code=EXIT_USAGE):
        super().__init__(message)
        self.code = code


def _connection_options(parser):
    parser.add_argument("--python", default="python3", metavar="PATH", help="interpreter that runs the agent on the host (default python3)")
    parser.add_argument("--accept-new", action="store_true", help="accept and remember an unknown host key (check its fingerprint first)")


def build_parser():
    parser = argparse.ArgumentParser(prog="specdeck", description=__doc__.split("\n")[0])
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")

    p = commands.add_parser("run", help="start a detached job on the host")
    p.add_argument("host")
    p.add_argument("argv", nargs="*", metavar="-- CMD ARGS", help="the command, after --")
    p.add_argument("--name", help="a name for the job (default: the command line)")
    p.add_argument("--cwd", help="working directory on the host (default: home)")
    p.add_argument("--env", action="append", default=[], metavar="KEY=VALUE", help="environment addition (repeatable)")
    p.add_argument("--interpreter", metavar="PATH", help="run CMD with this interpreter, e.g. a venv's python")
    p.add_argument("--kind", default="command", choices=("command", "server", "training", "benchmark"))

    p = commands.add_parser("jobs", help="list the host's jobs")
    p.add_argument("host")

    p = commands.add_parser("logs", help="print a job's log")
    p.add_argument("host")
    p.add_argument("job")
    p.add_argument("-f", "--follow", action="store_true", help="keep printing as the log grows, across reconnects")
    p.add_argument("--tail", type=int, metavar="BYTES", help="start this many bytes before the end")

    p = commands.add_parser("stop", help="stop a job: TERM to its process group, KILL after the grace period")
    p.add_argument("host")
    p.add_argument("job")
    p.add_argument("--grace", type=float, default=10.0, metavar="S", help="seconds between TERM and KILL (default 10)")
    p.add_argument("--wait", action="store_true", help="return once the job has ended")

    p = commands.add_parser("inspect", help="list and check a safetensors checkpoint")
    p.add_argument("path", metavar="[HOST:]PATH")
    p.add_argument("--sha256", action="store_true", help="also hash every file")

    p = commands.add_parser("compare", help="compare two checkpoints: drop-in initialisation or not")
    p.add_argument("a", metavar="[HOST:]A")
    p.add_argument("b", metavar="[HOST:]B")

    for name, help_text in (("download", "download from the Hugging Face Hub on the host, then verify"), ("verify", "verify a downloaded directory against the hub")):
        p = commands.add_parser(name, help=help_text)
        if name == "download":
            p.add_argument("host")
            p.add_argument("repo")
            p.add_argument("files", nargs="*", metavar="FILE")
            p.add_argument("--local-dir", required=True, metavar="DIR")
            p.add_argument("--include", action="append", default=[], metavar="PATTERN")
            p.add_argument("--exclude", action="append", default=[], metavar="PATTERN")
            p.add_argument("--wait", action="store_true", help="follow progress to the end; exit with the verification's code")
        else:
            p.add_argument("dir", metavar="[HOST:]DIR")
            p.add_argument("--repo", required=True)
        p.add_argument("--revision")
        p.add_argument("--repo-type", default="model", choices=("model", "dataset"))
        p.add_argument("--endpoint", metavar="URL", help="a hub mirror (default: the host's HF_ENDPOINT, else the hub)")
        p.add_argument("--host-python", metavar="PATH", help="interpreter with huggingface_hub on the host (default: the agent's)")

    for p in commands.choices.values():
        _connection_options(p)
        p.add_argument("--json", action="store_true", help="machine-readable output")
    return parser


def split_host_path(text):
    """`host:path` like scp; a bare path is on this machine."""
    match = re.match(r"^([^/:]+):(.*)$", text)
    if match and not os.path.exists(text):
        host, path = match.groups()
        return (None if host == "local" else host), path or "."
    return None, text


def accept_new_policy(args):
    return (lambda host_key: True) if args.accept_new else (lambda host_key: False)


def connect(args, host, reconnect=False):
    from .connection import open_client

    return open_client(host, python=args.python, accept_new=accept_new_policy(args), reconnect=reconnect)


def emit(args, value, human):
    if args.json:
        print(json.dumps(value, indent=None if isinstance(value, dict) and len(value) < 3 else 2))
    else:
        print(human() if callable(human) else human)


# ------------------------------------------------------------------ jobs


def cmd_run(args):
    argv = args.argv
    if not argv:
        raise CommandError("nothing to run: give the command after --, e.g. specdeck run HOST -- python train.py")
    env = {}
    for item in args.env:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise CommandError("--env wants KEY=VALUE, not %r" % item)
        env[key] = value
    client = connect(args, args.host)
    job = client.call(
        "jobs.submit", {"argv": argv, "cwd": args.cwd, "env": env, "interpreter": args.interpreter, "name": args.name, "kind": args.kind}
    )
    emit(args, {"id": job["id"]}, job["id"])
    return 0


def format_jobs(jobs):
    rows = [("ID", "KIND", "NAME", "STATE", "STARTED", "RUNTIME", "EXIT")]
    for job in jobs:
        exit_text = "-" if job["exit_code"] is None else str(job["exit_code"])
        if job.get("signal"):
            exit_text = "sig %d" % job["signal"]
        rows.append(
            (job["id"], job["kind"], (job["name"] or "")[:48], job["state"], display.format_time(job["started_at"]),
             display.format_duration(display.job_runtime(job)), exit_text)
        )
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    return "\n".join("  ".join(cell.ljust(width) for cell, width in zip(row, widths)).rstrip() for row in rows)


def cmd_jobs(args):
    jobs = connect(args, args.host).call("jobs.list")
    emit(args, jobs, lambda: format_jobs(jobs) if jobs else "no jobs on this host")
    return 0


def cmd_logs(args):
    out = sys.stdout
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
        out.flush()
        return 0
    client = connect(args, args.host, reconnect=True)
    done = threading.Event()
    result = {}

    def on_data(data, seq):
        if args.json:
            out.write(json.dumps({"offset": data["offset"], "text": data["text"]}) + "\n")
        else:
            out.write(data["text"])
        out.flush()

    def on_end(data):
        result.update(data)
        done.set()

    client.subscribe("jobs.follow", {"id": args.job, "after": -args.tail if args.tail else 0}, on_data, on_end)
    try:
        while not done.wait(0.5):
            pass
    except KeyboardInterrupt:
        return 130
    job = result.get("job") or {}
    if result.get("error"):
        raise CommandError(result["error"], EXIT_FAILED)
    return 0 if job.get("exit_code") == 0 else EXIT_FAILED


def cmd_stop(args):
    client = connect(args, args.host)
    job = client.call("jobs.stop", {"id": args.job, "grace_s": args.grace})
    if args.wait:
        while job["process_state"] in ("running", "starting"):
            time.sleep(0.2)
            job = client.call("jobs.get", {"id": args.job})
    emit(args, job, lambda: "%s %s" % (job["id"], job["state"]))
    return 0


# ------------------------------------------------------------------ checkpoints


def _inspect_report(args, target, sha256=False):
    from remote.checkpoints import report as checkpoint

    host, path = split_host_path(target)
    if host is None:
        try:
            return checkpoint.inspect(path, sha256=sha256)
        except checkpoint.CheckpointIOError as exc:
            raise CommandError(str(exc))
    try:
        return connect(args, host).call("checkpoint.inspect", {"path": path, "sha256": sha256}, timeout=3600)
    except RemoteError as exc:
        raise CommandError(exc.message)


def cmd_inspect(args):
    from .checkpoint_view import format_inspect

    report = _inspect_report(args, args.path, args.sha256)
    emit(args, report, lambda: format_inspect(report))
    return EXIT_FAILED if any(p["level"] == "error" for p in report["problems"]) else 0


def cmd_compare(args):
    from remote.checkpoints import report as checkpoint

    from .checkpoint_view import format_compare

    result = checkpoint.compare(_inspect_report(args, args.a), _inspect_report(args, args.b))
    emit(args, result, lambda: format_compare(result))
    return 0 if result["verdict"] == "compatible" else EXIT_FAILED


# ------------------------------------------------------------------ downloads


def _download_params(args, local_dir):
    return {
        "repo": args.repo,
        "repo_type": args.repo_type,
        "revision": args.revision,
        "local_dir": local_dir,
        "endpoint": args.endpoint,
        "python": args.host_python,
        "files": getattr(args, "files", []),
        "include": getattr(args, "include", []),
        "exclude": getattr(args, "exclude", []),
    }


def progress_line(job):
    progress = job.get("progress") or {}
    done, total = progress.get("bytes_done") or 0, progress.get("bytes_total") or 0
    percent = 100.0 * done / total if total else 0.0
    eta = progress.get("eta_s")
    return "%s  %s  %5.1f%%  %s / %s  %s  ETA %s" % (
        job["id"], job["state"], percent, display.format_bytes(done), display.format_bytes(total),
        display.format_rate(progress.get("rate_bytes_per_s")), display.format_duration(eta) if eta is not None else "-",
    )


def wait_for_download(args, client, job):
    """Follow a download job to its verdict; the exit code is the verification's."""
    last_line = ""
    while job["process_state"] in ("running", "starting"):
        time.sleep(0.5)
        job = client.call("jobs.get", {"id": job["id"]})
        line = progress_line(job)
        if line != last_line and not args.json:
            sys.stderr.write(("\r" + line.ljust(len(last_line))) if sys.stderr.isatty() else line + "\n")
            sys.stderr.flush()
            last_line = line
    if last_line and sys.stderr.isatty() and not args.json:
        sys.stderr.write("\n")
    progress = job.get("progress") or {}
    verdict = progress.get("verdict") or {}
    if args.json:
        print(json.dumps({"id": job["id"], "state": job["state"], "exit_code": job["exit_code"], "verdict": verdict, "error": progress.get("error")}))
    else:
        print("%s: %s" % (job["state"], verdict.get("message") or progress.get("error") or job.get("error") or ""))
    code = job.get("exit_code")
    return code if code in (0, 1, 2) else EXIT_USAGE


def cmd_download(args):
    client = connect(args, args.host)
    try:
        job = client.call("download.start", _download_params(args, args.local_dir), timeout=180)
    except RemoteError as exc:
        raise CommandError(exc.message)
    if not args.wait:
        emit(args, {"id": job["id"]}, job["id"])
        return 0
    if not args.json:
        print(job["id"])
    return wait_for_download(args, client, job)


def cmd_verify(args):
    host, path = split_host_path(args.dir)
    client = connect(args, host)
    try:
        job = client.call("download.verify", _download_params(args, path), timeout=180)
    except RemoteError as exc:
        raise CommandError(exc.message)
    return wait_for_download(args, client, job)


# ------------------------------------------------------------------ entry


def open_console(argv):
    parser = argparse.ArgumentParser(prog="specdeck", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("host", nargs="?", default="local", help="ssh destination, or local (default)")
    _connection_options(parser)
    args = parser.parse_args(argv)
    from .app import SpecdeckApp

    SpecdeckApp(host=args.host, python=args.python, accept_new=args.accept_new).run()
    return 0


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    if not argv or argv[0] not in COMMANDS:
        if argv and argv[0] in ("-h", "--help"):
            build_parser().print_help()
            return 0
        return open_console(argv)
    command_argv = []
    if argv[0] == "run" and "--" in argv:
        # Everything after -- is the job's own command line, options and all.
        split = argv.index("--")
        argv, command_argv = argv[:split], argv[split + 1 :]
    args = build_parser().parse_args(argv)
    if args.command == "run":
        args.argv = args.argv + command_argv
    handler = globals()["cmd_" + args.command]
    try:
        return handler(args)
    except CommandError as exc:
        sys.stderr.write("specdeck: %s\n" % exc)
        return exc.code
    except ConnectError as exc:
        sys.stderr.write("specdeck: %s\n" % exc)
        return EXIT_USAGE
    except RemoteError as exc:
        sys.stderr.write("specdeck: %s\n" % exc.message)
        return EXIT_FAILED
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:  # `specdeck jobs HOST | head`: the reader left, nothing to say
        sys.stderr.close()
        return 0


if __name__ == "__main__":
    sys.exit(main())
