"""What a job's submit checks before anything is written, and the start of its supervisor.

A submit refuses bad input (a kind, meta, argv, env, cwd, an exec too big for the kernel) before
a directory exists; the job's environment is the user's login environment on this host plus its
`env` and `secret_env`, nothing of the daemon's own. The supervisor gets that environment over a
pipe, so a secret is never written to the job's directory.
"""

import json
import re
import subprocess

from ..core import paths
from ..core.protocol import BadRequest, RemoteError
from .input import check_command, check_cwd, check_env, check_exec_size
from .login_env import login_environment, resolve_executable

KIND_PATTERN = re.compile(r"[a-z][a-z0-9_-]{0,31}\Z")  # any kind: command, download, server, training, ...


def checked(argv, cwd, env, interpreter, kind, meta, secret_env):
    """(argv with its executable resolved, cwd, env, the job's whole environment), or BadRequest."""
    if not isinstance(kind, str) or not KIND_PATTERN.match(kind):
        raise BadRequest("a job kind is a short lower-case word (command, download, server, training), not %r" % (kind,))
    if meta is not None and not isinstance(meta, dict):
        raise BadRequest("meta must be an object")
    check_command(argv, interpreter)
    env = check_env(env or {}, "env")
    secret_env = check_env(secret_env or {}, "secret env")
    cwd = check_cwd(cwd)
    environment = login_environment()
    environment.update(env)
    environment.update(secret_env)
    if interpreter:
        argv = [resolve_executable(interpreter, cwd, environment["PATH"])] + list(argv)
    else:
        argv = [resolve_executable(argv[0], cwd, environment["PATH"])] + list(argv[1:])
    check_exec_size(argv, environment)
    return argv, cwd, env, environment


def start_supervisor(job_dir, environment):
    """Start the job's supervisor (supervisor.py), which forks itself away and returns at once
    (waiting for it reaps it); RemoteError when it did not start."""
    launcher = subprocess.Popen(
        paths.agent_argv() + ["supervise", job_dir],
        stdin=subprocess.PIPE,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        env=paths.agent_env(),
        close_fds=True,
    )
    _, errors = launcher.communicate(json.dumps(environment).encode("utf-8", "surrogatepass"))
    if launcher.returncode != 0:
        lines = errors.decode("utf-8", "replace").strip().splitlines()
        raise RemoteError("InternalError", "the job's supervisor did not start: %s" % (lines[-1] if lines else "exit %d" % launcher.returncode))
