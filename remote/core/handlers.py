"""The daemon's methods: one function per request kind, named as on the wire."""

import json
import os
import stat
import subprocess
import threading
import time
import uuid

from . import paths
from .jobs import JobStore
from .protocol import BadRequest, NotFound, RemoteError

FOLLOW_POLL_S = 0.1
FOLLOW_BATCH_S = 0.05
FOLLOW_CHUNK_BYTES = 65536
FS_LIST_MAX = 5000


def _param(params, name, kind, default=None, required=False):
    value = params.get(name, default)
    if value is None:
        if required:
            raise BadRequest("missing parameter %r" % name)
        return None
    if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
        raise BadRequest("parameter %r has the wrong type" % name)
    return value


class Handlers:
    def __init__(self, daemon):
        self.daemon = daemon
        self.jobs = JobStore()
        self.methods = {
            "ping": self.ping,
            "daemon.info": self.daemon_info,
            "daemon.shutdown": self.daemon_shutdown,
            "jobs.submit": self.jobs_submit,
            "jobs.list": self.jobs_list,
            "jobs.get": self.jobs_get,
            "jobs.tail": self.jobs_tail,
            "jobs.follow": self.jobs_follow,
            "jobs.stop": self.jobs_stop,
            "stream.cancel": self.stream_cancel,
            "fs.list": self.fs_list,
            "checkpoint.inspect": self.checkpoint_inspect,
            "download.start": self.download_start,
            "download.verify": self.download_verify,
        }

    def dispatch(self, method, params, connection):
        handler = self.methods.get(method)
        if handler is None:
            raise RemoteError("UnknownMethod", "the host agent has no method %r" % method)
        return handler(params, connection)

    # -- daemon

    def ping(self, params, connection):
        return {"time": time.time()}

    def daemon_info(self, params, connection):
        return dict(self.daemon.hello, uptime_s=time.time() - self.daemon.started_at, state_dir=paths.state_dir())

    def daemon_shutdown(self, params, connection):
        self.daemon.stopping.set()
        return {"stopping": True}

    # -- jobs

    def jobs_submit(self, params, connection):
        env = _param(params, "env", dict, {})
        return self.jobs.submit(
            _param(params, "argv", list, required=True),
            cwd=_param(params, "cwd", str),
            env=env,
            interpreter=_param(params, "interpreter", str),
            name=_param(params, "name", str),
            kind=_param(params, "kind", str, "command"),
        )

    def jobs_list(self, params, connection):
        return self.jobs.list(kind=_param(params, "kind", str))

    def jobs_get(self, params, connection):
        return self.jobs.describe(_param(params, "id", str, required=True))

    def jobs_tail(self, params, connection):
        return self.jobs.tail(
            _param(params, "id", str, required=True), _param(params, "offset", int, 0), _param(params, "max_bytes", int, 65536)
        )

    def jobs_stop(self, params, connection):
        grace_s = params.get("grace_s", 10.0)
        if not isinstance(grace_s, (int, float)) or grace_s < 0:
            raise BadRequest("grace_s must be a number of seconds >= 0")
        return self.jobs.stop(_param(params, "id", str, required=True), grace_s=float(grace_s))

    def jobs_follow(self, params, connection):
        """Stream a job's log from byte offset `after` (seq = the offset after each chunk).

        The client names the stream, so frames may arrive before this reply does.
        """
        job_id = _param(params, "id", str, required=True)
        stream_id = _param(params, "stream", str, required=True)
        offset = _param(params, "after", int, 0)
        self.jobs.job_dir(job_id)  # NotFound now rather than in the stream
        if offset < 0:
            offset = self.jobs.tail(job_id, offset, 1)["offset"]
        stop = threading.Event()
        connection.streams[stream_id] = stop
        threading.Thread(target=self._follow, args=(connection, stream_id, job_id, offset, stop), daemon=True).start()
        return {"stream": stream_id, "offset": offset}

    def _follow(self, connection, stream_id, job_id, offset, stop):
        try:
            while not stop.is_set() and not connection.closed.is_set():
                data, next_offset = self.jobs.read_lines_from(job_id, offset)
                if not data:
                    # Only a quiet log makes us look at the process: a busy one is read, not described.
                    if self.jobs.describe(job_id)["process_state"] in ("running", "starting"):
                        stop.wait(FOLLOW_POLL_S)
                        continue
                    data, next_offset = self.jobs.read_lines_from(job_id, offset, final=True)
                    if not data:
                        connection.send({"stream": stream_id, "end": True, "seq": offset, "data": {"job": self.jobs.describe(job_id)}})
                        return
                text = data.decode("utf-8", "replace")
                if not connection.send({"stream": stream_id, "seq": next_offset, "data": {"offset": offset, "text": text}}):
                    return
                offset = next_offset
                if len(data) < FOLLOW_CHUNK_BYTES:
                    stop.wait(FOLLOW_BATCH_S)  # let a chatty log gather into fewer, larger frames
        finally:
            connection.streams.pop(stream_id, None)

    def stream_cancel(self, params, connection):
        stop = connection.streams.pop(_param(params, "stream", str, required=True), None)
        if stop:
            stop.set()
        return {"cancelled": stop is not None}

    # -- files

    def fs_list(self, params, connection):
        path = os.path.abspath(os.path.expanduser(_param(params, "path", str, "~")))
        try:
            names = os.listdir(path)
        except FileNotFoundError:
            raise NotFound("no such directory on the host: %s" % path)
        except NotADirectoryError:
            raise BadRequest("not a directory: %s" % path)
        except PermissionError:
            raise RemoteError("PermissionDenied", "permission denied: %s" % path)
        entries = []
        for name in sorted(names)[:FS_LIST_MAX]:
            try:
                st = os.stat(os.path.join(path, name))
            except OSError:
                continue
            entries.append({"name": name, "dir": stat.S_ISDIR(st.st_mode), "bytes": st.st_size, "mtime": st.st_mtime})
        entries.sort(key=lambda e: (not e["dir"], e["name"]))
        return {"path": path, "parent": os.path.dirname(path), "entries": entries, "truncated": len(names) > FS_LIST_MAX}

    # -- checkpoints

    def checkpoint_inspect(self, params, connection):
        from ..checkpoints import report as checkpoint

        path = os.path.expanduser(_param(params, "path", str, required=True))
        try:
            return checkpoint.inspect(path, sha256=bool(params.get("sha256")))
        except checkpoint.CheckpointIOError as exc:
            raise RemoteError("IOError", str(exc))

    # -- downloads

    def _download_spec(self, params, local_dir_required=True):
        spec = {
            "repo": _param(params, "repo", str, required=True),
            "repo_type": _param(params, "repo_type", str, "model"),
            "revision": _param(params, "revision", str),
            "files": _param(params, "files", list, []),
            "include": _param(params, "include", list, []),
            "exclude": _param(params, "exclude", list, []),
            "local_dir": _param(params, "local_dir", str, required=local_dir_required),
            "endpoint": _param(params, "endpoint", str),
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

    def _agent_under(self, params):
        """argv prefix and env additions that run this agent under the job's interpreter."""
        interpreter = _param(params, "python", str) or self.daemon.hello["capabilities"]["python"]["executable"]
        prefix = paths.agent_argv()
        env = {}
        if prefix[1:2] == ["-m"]:
            env["PYTHONPATH"] = paths.agent_env()["PYTHONPATH"]
        from .jobs import login_path, resolve_executable

        interpreter = resolve_executable(interpreter, os.path.expanduser("~"), login_path())
        return [interpreter] + prefix[1:], env

    def _run_plan(self, command, spec_path, env):
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

    def download_start(self, params, connection):
        spec, spec_path = self._download_spec(params)
        command, env = self._agent_under(params)
        plan = self._run_plan(command, spec_path, env)
        name = "%s -> %s" % (spec["repo"], spec["local_dir"])
        # The spec rides along as the job's meta, so a console can retry or verify it later.
        job = self.jobs.submit(command + ["download", spec_path], env=env, name=name, kind="download", meta=dict(spec, python=params.get("python")))
        job["plan"] = plan
        return job

    def download_verify(self, params, connection):
        spec, spec_path = self._download_spec(params)
        command, env = self._agent_under(params)
        name = "verify %s in %s" % (spec["repo"], spec["local_dir"])
        return self.jobs.submit(command + ["verify", spec_path], env=env, name=name, kind="download", meta=dict(spec, python=params.get("python")))
