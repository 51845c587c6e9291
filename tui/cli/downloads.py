"""Hub downloads from the command line: download (with --wait, to the verdict) and verify.

The interpreter with huggingface_hub on the host is --host-python, else the one remembered for
the host (`specdeck config HOST --ml-python PATH`); the hub token is this shell's HF_TOKEN, sent
with the request for the job's environment only, else the host's own login."""

import json
import sys
import time

from remote.core.protocol import RemoteError

from .. import config, display
from .common import EXIT_USAGE, CommandError, connect, emit, split_host_path


def add_commands(commands):
    for name, help_text in (("download", "download from the Hugging Face Hub on the host, then verify"), ("verify", "verify a downloaded directory against the hub")):
        p = commands.add_parser(name, help=help_text)
        p.set_defaults(func=cmd_download if name == "download" else cmd_verify)
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
        p.add_argument("--host-python", metavar="PATH", help="interpreter with huggingface_hub on the host (default: what `specdeck config HOST --ml-python` remembers, else the agent's)")


def _download_params(args, host, local_dir):
    return {
        "repo": args.repo,
        "repo_type": args.repo_type,
        "revision": args.revision,
        "local_dir": local_dir,
        "endpoint": args.endpoint,
        "python": args.host_python or config.remembered(host, "ml_python"),
        "token": config.hub_token(),
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
        job = client.call("download.start", _download_params(args, args.host, args.local_dir), timeout=180)
    except RemoteError as exc:
        raise CommandError(config.name_host(exc.message, args.host))
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
        job = client.call("download.verify", _download_params(args, host, path), timeout=180)
    except RemoteError as exc:
        raise CommandError(config.name_host(exc.message, host))
    return wait_for_download(args, client, job)
