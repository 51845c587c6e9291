"""Wire methods of hub downloads: start a download job, or verify a directory already there."""

import json
import os
import subprocess

from ..core import paths
from ..jobs.input import stall_after, with_stall_after
from ..jobs.login_env import login_environment, login_path, resolve_executable
from ..core.protocol import BadRequest, NotFound, RemoteError
from ..core.wire import method, param
from .interpreters import missing_hub_message, with_huggingface_hub
from .layout import RECORD_KEYS, read_download_record
from .progress import FILES_FILE

PLAN_TIMEOUT_S = 120
FILES_PAGE_DEFAULT = 100
FILES_PAGE_MAX = 1000
FILE_LINE_MAX_BYTES = 64 * 1024  # one file's line of files.jsonl; a longer one is not a file's


def _download_spec(params, local_dir_required=True):
    spec = {
        "repo": param(params, "repo", str, required=True),
        "repo_type": param(params, "repo_type", str, "model"),
        "revision": param(params, "revision", str),
        "files": param(params, "files", list, []),
        "include": param(params, "include", list, []),
        "exclude": param(params, "exclude", list, []),
        "local_dir": param(params, "local_dir", str, required=local_dir_required),
        "endpoint": param(params, "endpoint", str),
    }
    if spec["repo_type"] not in ("model", "dataset"):
        raise BadRequest("repo type must be model or dataset, not %r" % spec["repo_type"])
    spec["local_dir"] = os.path.abspath(os.path.expanduser(spec["local_dir"]))
    return spec


def _write_spec(job_dir, spec):
    with open(os.open(os.path.join(job_dir, "spec.json"), os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600), "w") as f:
        json.dump(spec, f)


def _secret_env(call):
    """The console's hub token, for the job's environment only (never a file, argv or log)."""
    token = call.param("token", str)
    return {"HF_TOKEN": token} if token and token.strip() else {}


def _agent_under(call):
    """(interpreter, argv prefix, env additions) that run this agent under the job's interpreter,
    the interpreter resolved here once (the jobs get its absolute path)."""
    interpreter = call.param("python", str) or call.daemon.hello["capabilities"]["python"]["executable"]
    prefix = paths.agent_argv(user_site=True)  # huggingface_hub may be in the user's site
    env = {}
    if prefix[1:2] == ["-m"]:
        env["PYTHONPATH"] = paths.agent_env()["PYTHONPATH"]
    home = os.path.expanduser("~")
    interpreter = resolve_executable(interpreter, home, "" if os.sep in interpreter else login_path())
    return interpreter, [interpreter] + prefix[1:], env


def _run_plan(interpreter, command, job_dir, env, secret_env):
    """The plan the download-plan step leaves in job_dir/plan.json; RemoteError when it is no good.
    It runs in the environment the job will have (the login one), so both see the same hub."""
    run_env = login_environment()
    run_env.pop("PYTHONPATH", None)
    run_env.update(env)
    run_env.update(secret_env)
    try:
        out = subprocess.run(command + ["download-plan", job_dir], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                             stderr=subprocess.PIPE, env=run_env, timeout=PLAN_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        raise RemoteError("NetworkUnreachable", "resolving the file list took over %d s; is the hub reachable from the host?" % PLAN_TIMEOUT_S)
    try:
        with open(os.path.join(job_dir, "plan.json"), encoding="utf-8") as f:
            plan = json.load(f)
    except (OSError, ValueError):
        detail = out.stderr.decode("utf-8", "replace").strip().splitlines()
        raise RemoteError("PlanFailed", "could not resolve the download: %s" % (detail[-1] if detail else "no plan and no error from %s" % interpreter))
    if not plan.get("ok"):
        error = plan.get("error") or {}
        if error.get("type") == "MissingDependency":
            found = with_huggingface_hub(exclude=(interpreter,))
            raise RemoteError("MissingDependency", missing_hub_message(interpreter, found))
        raise RemoteError(error.get("type", "PlanFailed"), error.get("message", "could not resolve the download"))
    return plan


def _submit(call, spec, step, name, plan_first):
    """Reserve the job's directory, put the spec (and the plan) there, then start the job on them.
    A refusal before the start leaves no job and no file behind."""
    interpreter, command, env = _agent_under(call)
    secret_env = _secret_env(call)
    jobs = call.daemon.jobs
    job_id, job_dir = jobs.reserve()
    try:
        _write_spec(job_dir, spec)
        if plan_first:
            _run_plan(interpreter, command, job_dir, env, secret_env)
        # The spec rides along as the job's meta, so a console can retry or verify it later;
        # `action` says which of the two started it (a retry of a verify verifies).
        meta = with_stall_after(dict(spec, python=call.params.get("python"), action=step), stall_after(call))
        return jobs.submit(command + [step, job_dir], env=env, name=name % (spec["repo"], spec["local_dir"]), kind="download",
                           meta=meta, reserved=(job_id, job_dir), secret_env=secret_env)
    except BaseException:
        jobs.discard(job_id)
        raise


@method("download.start")
def download_start(call):
    """Resolve a repo's files on the hub, then download and verify them as a job of kind `download`.
    Params: `repo`, `repo_type` (model|dataset), `revision`, `files`, `include`, `exclude` (globs),
    `local_dir` (required), `endpoint`, `python` (an interpreter with huggingface_hub), `token`
    (the console's hub token: the job gets it in its environment only; without it, the host's own),
    `stall_after_s` (how long no byte may move while it downloads before its `download_stalled`
    alert; 0: never; default 5 min). Reply: the job (as `jobs.get`; its `meta` holds these params but the token, and `action`:
    download, or verify for `download.verify`); its `progress` follows in job events. Errors: RepoNotFound,
    FileNotFound, RevisionNotFound, AuthRequired, NoSpace, NetworkUnreachable, MissingDependency
    (naming this host's interpreters that have huggingface_hub), PlanFailed, before any job is made."""
    return _submit(call, _download_spec(call.params), "download", "%s -> %s", plan_first=True)


@method("download.verify")
def download_verify(call):
    """Verify a directory against the hub's hashes without downloading, as a job of kind `download`.
    Params: as `download.start`; without `repo`, the repo (and the revision and endpoint not given)
    of the specdeck download that made `local_dir`: from the record it left there, else from the
    host's newest download job into it. Reply: the job. Before any job is made: NotFound when
    `local_dir` is not a directory on the host, BadRequest when no repo is given or recorded."""
    params = call.params
    if not params.get("repo"):
        local_dir = os.path.abspath(os.path.expanduser(param(params, "local_dir", str, required=True)))
        if not os.path.isdir(local_dir):
            raise NotFound("nothing to verify: %s is not a directory on the host" % local_dir)
        recorded = _recorded_download(call.daemon.jobs, local_dir)
        if recorded is None:
            raise BadRequest("%s was not made by a specdeck download (it holds no record of its repo): "
                             "name the repo it came from (--repo)" % local_dir)
        params = dict(recorded, **{key: value for key, value in params.items() if value is not None})
    spec = _download_spec(params)
    if not os.path.isdir(spec["local_dir"]):
        raise NotFound("nothing to verify: %s is not a directory on the host" % spec["local_dir"])
    return _submit(call, spec, "verify", "verify %s in %s", plan_first=False)


def _recorded_download(jobs, local_dir):
    """What local_dir was downloaded from: the record the download left there, else the meta of
    the newest download job into it (a directory downloaded before downloads left records)."""
    recorded = read_download_record(local_dir)
    if recorded is not None:
        return recorded
    for job in reversed(jobs.list(kind="download")):
        meta = job.get("meta") or {}
        if meta.get("action", "download") == "download" and meta.get("repo") and meta.get("local_dir") == local_dir:
            return {key: meta[key] for key in RECORD_KEYS if isinstance(meta.get(key), str)}
    return None


@method("download.files")
def download_files(call):
    """A page of a download job's files, each with its state and bytes, in the job's order (the
    job's record carries only a summary: counts, the few files at work, the first failures).
    Params: `id` (a job of kind download), `offset` (default 0), `limit` (default 100, at most
    1000). Reply: `{id, total, offset, files: [{path, bytes_total, bytes_done, bytes_checked,
    state}], updated_at}`; `total` 0 and no files while the job has not resolved its file list.
    The list is written by the job every second or so (less often for a very long one), so a
    page may lag the summary a little. Errors: NotFound (no such job), BadRequest (not a download, a bad page)."""
    jobs = call.daemon.jobs
    job_id = call.param("id", str, required=True)
    offset = call.param("offset", int, 0)
    limit = call.param("limit", int, FILES_PAGE_DEFAULT)
    if offset < 0 or not 1 <= limit <= FILES_PAGE_MAX:
        raise BadRequest("offset must be >= 0 and limit between 1 and %d" % FILES_PAGE_MAX)
    job_dir = jobs.job_dir(job_id)
    job = jobs.describe(job_id)
    if job.get("kind") != "download":
        raise BadRequest("job %s is a %s job, not a download" % (job_id, job.get("kind")))
    total, updated_at, files = read_files_page(os.path.join(job_dir, FILES_FILE), offset, limit)
    return {"id": job_id, "total": total, "offset": offset, "files": files, "updated_at": updated_at}


def read_files_page(path, offset, limit):
    """(total, updated_at, files) of files.jsonl from `offset`: read line by line up to the page's
    end, each line bounded, so a long list costs one pass over its first offset+limit lines and
    a damaged line reads as a file of state `unreadable`, never a failed page."""
    try:
        f = open(path, "rb")
    except OSError:
        return 0, None, []
    with f:
        header = _json_line(_bounded_line(f))
        if not isinstance(header, dict) or not isinstance(header.get("total"), int):
            return 0, None, []
        total, updated_at = max(0, header["total"]), header.get("updated_at")
        files = []
        index = 0
        while index < min(total, offset + limit):
            line = _bounded_line(f)
            if line is None:
                break  # shorter than its header said (a list being replaced reads whole, so: damaged)
            if index >= offset:
                files.append(_file_entry(_json_line(line)))
            index += 1
    return total, updated_at if isinstance(updated_at, (int, float)) else None, files


def _bounded_line(f):
    """The next line (b"" for one over FILE_LINE_MAX_BYTES, which is skipped to its end), None at the end."""
    line = f.readline(FILE_LINE_MAX_BYTES + 1)
    if not line:
        return None
    if len(line) > FILE_LINE_MAX_BYTES and not line.endswith(b"\n"):
        while True:
            rest = f.readline(FILE_LINE_MAX_BYTES)
            if not rest or rest.endswith(b"\n"):
                return b""
    return line


def _json_line(line):
    try:
        return json.loads(line) if line else None
    except ValueError:
        return None


def _file_entry(value):
    """[path, bytes_total, bytes_done, bytes_checked, state] as the wire gives a file."""
    if (isinstance(value, list) and len(value) == 5 and isinstance(value[0], str) and isinstance(value[4], str)
            and all(v is None or (isinstance(v, int) and not isinstance(v, bool)) for v in value[1:4])):
        path, total, done, checked, state = value
        return {"path": path, "bytes_total": total, "bytes_done": done or 0, "bytes_checked": checked or 0, "state": state}
    return {"path": None, "bytes_total": None, "bytes_done": 0, "bytes_checked": 0, "state": "unreadable"}
