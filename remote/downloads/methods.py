"""Wire methods of hub downloads: start a download job, or verify a directory already there."""

import json
import os
import subprocess
import uuid

from ..core import paths
from ..core.jobs import login_path, resolve_executable
from ..core.protocol import BadRequest, RemoteError
from ..core.wire import method, param


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
    spec_dir = os.path.join(paths.state_dir(), "specs")
    os.makedirs(spec_dir, mode=0o700, exist_ok=True)
    spec_path = os.path.join(spec_dir, "%s.json" % uuid.uuid4().hex)
    with open(spec_path, "w") as f:
        json.dump(spec, f)
    return spec, spec_path


def _agent_under(call):
    """argv prefix and env additions that run this agent under the job's interpreter."""
    interpreter = call.param("python", str) or call.daemon.hello["capabilities"]["python"]["executable"]
    prefix = paths.agent_argv()
    env = {}
    if prefix[1:2] == ["-m"]:
        env["PYTHONPATH"] = paths.agent_env()["PYTHONPATH"]
    interpreter = resolve_executable(interpreter, os.path.expanduser("~"), login_path())
    return [interpreter] + prefix[1:], env


def _run_plan(command, spec_path, env):
    run_env = dict(os.environ)
    run_env.pop("PYTHONPATH", None)
    run_env.update(env)
    try:
        out = subprocess.run(
            command + ["download-plan", spec_path], stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=run_env, timeout=120
        )
    except subprocess.TimeoutExpired:
        raise RemoteError("NetworkUnreachable", "resolving the file list took over 120 s; is the hub reachable from the host?")
    lines = out.stdout.decode("utf-8", "replace").strip().splitlines()
    try:
        plan = json.loads(lines[-1])
    except (IndexError, ValueError):
        detail = out.stderr.decode("utf-8", "replace").strip().splitlines()
        raise RemoteError("PlanFailed", "could not resolve the download: %s" % (detail[-1] if detail else "no output"))
    if not plan.get("ok"):
        error = plan.get("error") or {}
        raise RemoteError(error.get("type", "PlanFailed"), error.get("message", "could not resolve the download"))
    return plan


@method("download.start")
def download_start(call):
    """Resolve a repo's files on the hub, then download and verify them as a job of kind `download`.
    Params: `repo`, `repo_type` (model|dataset), `revision`, `files`, `include`, `exclude` (globs),
    `local_dir` (required), `endpoint`, `python` (an interpreter with huggingface_hub).
    Reply: the job (as `jobs.get`); its `progress` follows in job events. Errors: RepoNotFound,
    FileNotFound, RevisionNotFound, AuthRequired, NoSpace, NetworkUnreachable, PlanFailed, before
    any job is made."""
    spec, spec_path = _download_spec(call.params)
    command, env = _agent_under(call)
    _run_plan(command, spec_path, env)
    name = "%s -> %s" % (spec["repo"], spec["local_dir"])
    # The spec rides along as the job's meta, so a console can retry or verify it later.
    return call.daemon.jobs.submit(command + ["download", spec_path], env=env, name=name, kind="download", meta=dict(spec, python=call.params.get("python")))


@method("download.verify")
def download_verify(call):
    """Verify a directory against the hub's hashes without downloading, as a job of kind `download`.
    Params: as `download.start`. Reply: the job."""
    spec, spec_path = _download_spec(call.params)
    command, env = _agent_under(call)
    name = "verify %s in %s" % (spec["repo"], spec["local_dir"])
    return call.daemon.jobs.submit(command + ["verify", spec_path], env=env, name=name, kind="download", meta=dict(spec, python=call.params.get("python")))
