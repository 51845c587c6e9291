"""Hub downloads from the command line: download (with --wait, to the verdict) and verify.

The interpreter with huggingface_hub on the host is --host-python, else the one remembered for
the host (`specdeck config HOST --ml-python PATH`); the hub token is this shell's HF_TOKEN, sent
with the request for the job's environment only, else the host's own login. The hub is
--endpoint, else (on `local`) this shell's HF_ENDPOINT, else the one remembered for the host
(`specdeck config HOST --hub-endpoint URL`), else the host's login HF_ENDPOINT, else the hub.
The directory is --local-dir, else the host's download_dir (`specdeck config HOST
--download-dir DIR`) joined with the repo's name. `verify` without --repo takes the repo from
the record a specdeck download left in the directory.
"""

import json
import os
import posixpath
import sys

from .. import config, display
from ..cli.common import EXIT_USAGE, CommandError, connect, emit, split_host_path
from .model import progress_line

# What the --json summary of a download or verify keeps of the job's verdict: the shape every
# verdict has (remote/checkpoints/verdicts.py), plus the files a mismatch names (the first 20;
# files_more counts the others, which `download.files` lists with their states), and the bytes a
# stopped download keeps for the next run.
VERDICT_EXTRA = ("file", "files", "files_more", "kept_bytes")


def add_commands(commands):
    for name, help_text in (("download", "download from the Hugging Face Hub on the host, then verify"), ("verify", "verify a downloaded directory against the hub")):
        p = commands.add_parser(name, help=help_text)
        p.set_defaults(func=cmd_download if name == "download" else cmd_verify)
        if name == "download":
            p.add_argument("host")
            p.add_argument("repo")
            p.add_argument("files", nargs="*", metavar="FILE")
            p.add_argument("--local-dir", metavar="DIR", help="where on the host (default: the host's download_dir/NAME, "
                                                             "set with `specdeck config HOST --download-dir DIR`)")
            p.add_argument("--include", action="append", default=[], metavar="PATTERN")
            p.add_argument("--exclude", action="append", default=[], metavar="PATTERN")
            p.add_argument("--wait", action="store_true", help="follow progress to the end; exit with the verification's code")
        else:
            p.add_argument("dir", metavar="[HOST:]DIR")
            p.add_argument("--repo", help="default: the repo of the specdeck download that made DIR")
        p.add_argument("--revision")
        p.add_argument("--repo-type", default="model", choices=("model", "dataset"))
        p.add_argument("--endpoint", metavar="URL", help="a hub mirror (default: on local this shell's HF_ENDPOINT; then the one "
                                                         "remembered for the host, the host's HF_ENDPOINT, the hub)")
        p.add_argument("--host-python", metavar="PATH", help="interpreter with huggingface_hub on the host (default: what `specdeck config HOST --ml-python` remembers, else the agent's)")


def hub_endpoint(args, host):
    """--endpoint; on `local` this shell's HF_ENDPOINT (the job would otherwise get the login
    environment's); the one remembered for the host; else None: the host's own HF_ENDPOINT."""
    if args.endpoint:
        return args.endpoint
    if config.host_key(host) == config.LOCAL:
        shell = (os.environ.get("HF_ENDPOINT") or "").strip()
        if shell:
            return shell
    return config.remembered(host, "hub_endpoint")


def default_local_dir(host, repo):
    """The host's download_dir joined with the repo's name, or a usage error saying how to name one."""
    base = config.remembered(host, "download_dir")
    if not base:
        raise CommandError("no --local-dir given and no download directory remembered for %s: pass --local-dir DIR, "
                           "or remember one with `specdeck config %s --download-dir DIR`" % (config.host_key(host), config.host_key(host)))
    return posixpath.join(base, repo.rstrip("/").split("/")[-1])


def _download_params(args, host, local_dir):
    return {
        "repo": args.repo,
        "repo_type": args.repo_type,
        "revision": args.revision,
        "local_dir": local_dir,
        "endpoint": hub_endpoint(args, host),
        "python": args.host_python or config.remembered(host, "ml_python"),
        "token": config.hub_token(),
        "files": getattr(args, "files", []),
        "include": getattr(args, "include", []),
        "exclude": getattr(args, "exclude", []),
    }


def wait_for_download(args, client, job):
    """Follow a download job to its verdict; the exit code is the verification's."""
    from ..jobs.follow import follow_job

    last_line = ""

    def show(job):
        nonlocal last_line
        line = display.safe_text(progress_line(job))
        if line != last_line and not args.json:
            # The \r that redraws the line is the CLI's own: past the guard, the line made safe.
            err = getattr(sys.stderr, "raw", sys.stderr)
            err.write(("\r" + line.ljust(len(last_line))) if sys.stderr.isatty() else line + "\n")
            err.flush()
            last_line = line

    job = follow_job(client, job, on_change=show)
    if last_line and sys.stderr.isatty() and not args.json:
        sys.stderr.write("\n")
    progress = job.get("progress") or {}
    error = progress.get("error") or job.get("error")
    if error and error.startswith("NetworkUnreachable:") and "--endpoint" not in error:
        error += "; a hub mirror the host can reach goes in --endpoint URL"
    verdict = job_verdict(job, error)
    if args.json:
        print(json.dumps({"id": job["id"], "state": job["state"], "exit_code": job["exit_code"], "verdict": verdict, "error": error}))
    else:
        print("%s: %s" % (job["state"], verdict["message"]))
    code = job.get("exit_code")
    return code if code in (0, 1, 2) else EXIT_USAGE


def job_verdict(job, error=None):
    """The job's verdict as every verdict is shaped: `{status, message}` (and the files of a mismatch)."""
    from remote.checkpoints.verdicts import verdict

    found = (job.get("progress") or {}).get("verdict") or {}
    if found.get("status") not in (None, "error"):
        shaped = verdict(found["status"], found.get("message") or found["status"])
    else:  # the job failed before a verdict: its error (with the CLI's next step) is the message
        shaped = verdict("error", error or found.get("message") or "the job ended %s" % job["state"])
    shaped.update((key, found[key]) for key in VERDICT_EXTRA if key in found)
    return shaped


def cmd_download(args):
    local_dir = args.local_dir or default_local_dir(args.host, args.repo)
    client = connect(args, args.host, reconnect=args.wait)
    job = client.call("download.start", _download_params(args, args.host, local_dir), timeout=180)
    if not args.wait:
        emit(args, {"id": job["id"]}, job["id"])
        return 0
    if not args.json:
        print(job["id"])
    return wait_for_download(args, client, job)


def cmd_verify(args):
    host, path = split_host_path(args.dir)
    client = connect(args, host, reconnect=True)
    params = _download_params(args, host, path)
    if not args.repo:
        # The host takes the repo, revision and endpoint the download recorded; only what was typed overrides them.
        params = {key: value for key, value in dict(params, endpoint=args.endpoint).items() if value is not None}
    job = client.call("download.verify", params, timeout=180)
    return wait_for_download(args, client, job)
