"""The wire's methods: each area registers its own from its own module, with a docstring
that gives the parameters and the reply; `reference()` turns the registry into the
document that lists them all (docs/wire.md is generated from it).

A method is `function(call)`: `call.params` (a dict), `call.connection` (the client's
connection, for streams) and `call.daemon` (services, the job store, the stream hub).
"""

import contextlib
import importlib
import inspect
import math
import os

from .protocol import BadRequest, NotFound, RemoteError
from .regular_files import path_problem

# The modules whose import registers methods, in the order the reference lists them. The
# composition root (remote/areas.py) installs them: the core names no area.
AREAS = []

METHODS = {}

# Contexts every call is served in, each made from the call's params (an area's `around_calls`).
CALL_CONTEXTS = []


class Call:
    """One request as a method sees it."""

    __slots__ = ("daemon", "connection", "params")

    def __init__(self, daemon, connection, params):
        self.daemon = daemon
        self.connection = connection
        self.params = params

    def param(self, name, kind, default=None, required=False):
        return param(self.params, name, kind, default, required)

    def path_param(self, name, default=None, required=False):
        """A path of the host: a string with `~` expanded; BadRequest when no file could have
        that name (a NUL byte), rather than a ValueError deep inside the method."""
        value = param(self.params, name, str, default, required)
        if value is None:
            return None
        problem = path_problem(value)
        if problem is not None:
            raise BadRequest("parameter %r: %s" % (name, problem))
        return os.path.expanduser(value)

    def service(self, name):
        """The daemon's service `name` (telemetry, serving, training, ...); NotFound when this
        daemon runs without it."""
        found = self.daemon.services.get(name)
        if found is None:
            raise NotFound("this agent's daemon runs no %s service" % name)
        return found

    def history(self):
        """The daemon's history store (the history area's, remote/history/); NoHistory when it has none."""
        history = getattr(self.daemon, "history", None)
        if history is None:
            raise NoHistory("this agent's daemon keeps no history store (see the history service's status)")
        return history.store


class NoHistory(RemoteError):
    """The one error every method that reads the history store gives when there is none."""

    def __init__(self, message):
        super().__init__("NoHistory", message)


def method(name):
    """Register the decorated function as wire method `name`."""

    def register(function):
        if name in METHODS and METHODS[name] is not function:
            raise RuntimeError("wire method %s registered twice" % name)
        METHODS[name] = function
        function.wire_name = name
        return function

    return register


def around_calls(context):
    """Serve every call inside `context(params)` (a context manager): how a parameter that every
    method takes (the jobs area's `job_engine`) works with no method knowing of it."""
    if context not in CALL_CONTEXTS:
        CALL_CONTEXTS.append(context)
    return context


def install_areas(modules):
    """Use `modules` (names) as the areas: their import registers methods, their `SERVICES` run."""
    AREAS[:] = list(modules)


def load_areas():
    for module in AREAS:
        importlib.import_module(module)
    return METHODS


def attach_areas(daemon):
    """Let each area give the daemon what its methods and services share (a module's
    `attach(daemon)`: the job store, the history store's slot), in area order."""
    for module in AREAS:
        attach = getattr(importlib.import_module(module), "attach", None)
        if attach is not None:
            attach(daemon)


def area_services():
    """The service classes each area asks the daemon to run (a module's `SERVICES`), in area order.
    Each is made with the daemon as its only argument (a class, or a function that returns the service)."""
    return [service for module in AREAS for service in getattr(importlib.import_module(module), "SERVICES", ())]


def param(params, name, kind, default=None, required=False):
    """params[name] checked against `kind` (int, float, str, list, dict, bool); BadRequest if wrong."""
    value = params.get(name, default)
    if value is None:
        if required:
            raise BadRequest("missing parameter %r" % name)
        return None
    if kind is float:
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
            raise BadRequest("parameter %r must be a finite number" % name)
        return float(value)
    if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
        raise BadRequest("parameter %r has the wrong type" % name)
    return value


def dispatch(daemon, connection, method_name, params):
    function = METHODS.get(method_name)
    if function is None:
        raise RemoteError("UnknownMethod", "the host agent has no method %r" % method_name)
    with contextlib.ExitStack() as contexts:
        for context in CALL_CONTEXTS:
            contexts.enter_context(context(params))
        return function(Call(daemon, connection, params))


# ---------------------------------------------------------------- the reference

FRAMES = (
    ("hello", "first frame from the agent: `{type: hello, protocol, agent_version, build, capabilities, "
     "hostname, user, daemon_pid, daemon_started_at}`"),
    ("request", "`{id, method, params}`; `id` is the client's, echoed in the reply"),
    ("reply", "`{id, ok: true, result}` or `{id, ok: false, error: {type, message}}`; every request gets one"),
    ("stream", "`{stream, seq, data}`: one record (or a batch) of an open stream; `seq` only grows, "
     "so a client resumes with `after: seq` (an integer within ±2^53) and drops what it has already seen. "
     "A stream's opening reply is `{stream, seq, snapshot}`: cut before any frame came, a client resumes "
     "`after` that seq, or from now when `snapshot` is true (its first frame holds the whole state)"),
    ("stream end", "`{stream, end: true, seq, data}`: the stream is over (the job ended, or it was cancelled); "
     "`data.error` says why when it failed"),
    ("notice", "`{type: notice, level, message}`: something the client should log (a bad frame skipped)"),
)

ERRORS = (
    ("BadRequest", "a parameter is missing, of the wrong type or out of range"),
    ("NotFound", "no such job, stream, file or directory on the host"),
    ("UnknownMethod", "the agent has no such method (an older agent)"),
    ("TooLarge", "the reply would exceed the 16 MiB frame bound"),
    ("PermissionDenied", "the host refused access to a path"),
    ("IOError", "a file could not be read (a checkpoint on a failing disk)"),
    ("NoSpace", "the disk is full"),
    ("InternalError", "the agent failed unexpectedly; the message names the exception (a bug)"),
    ("Busy", "the daemon has too much work from this connection, or the history store is not open yet; try again"),
    ("NoHistory", "the daemon keeps no history store: no method that reads history can answer"),
    ("DrafterMismatch", "the drafter cannot serve the target (or the two could not be read to compare them); the message gives the reasons"),
    ("NotACheckpoint", "a path given to compare holds no safetensors checkpoint"),
    # Why a download could not start (or stopped): remote/downloads/failures.py's PLAN_ERROR_TYPES.
    ("RepoNotFound", "no such repository on the hub (or not visible with this token)"),
    ("FileNotFound", "a file asked for is not in the repository at that revision"),
    ("RevisionNotFound", "no such revision (branch, tag or commit) in the repository"),
    ("AuthRequired", "the hub wants a token (a gated or private repository), or refused the one given"),
    ("NetworkUnreachable", "the hub cannot be reached from the host (offline, or it answered 5xx)"),
    ("HubError", "the hub answered something unexpected"),
    ("MissingDependency", "the interpreter for downloads has no huggingface_hub; the message names interpreters that have it"),
    ("PlanFailed", "resolving the file list failed without a typed reason; the message has its last line"),
    # A job engine's (remote/slurm/commands.py).
    ("NoSlurm", "a job asked for Slurm on a host without a working Slurm (no sbatch on the login PATH)"),
    ("SlurmError", "Slurm refused or failed a request (a bad partition, an unknown account, over a time limit); the message is Slurm's own line"),
)
# Every type above is raised somewhere in remote/, and every type raised is above: a test
# (tests/test_core_wire_reference.py) finds them in the sources and compares.


def reference():
    """The wire reference as Markdown: every method (with its docstring), frame type and error type."""
    load_areas()
    lines = [
        "# The wire",
        "",
        "Generated from the registry in `remote/core/wire.py` (`python -m remote wire-reference`); "
        "a test fails when it is stale or when a method has no docstring.",
        "",
        "One JSON object per line, UTF-8, at most 16 MiB. Unknown fields are ignored.",
        "",
        "## Frames",
        "",
    ]
    lines += ["- **%s**: %s" % (name, text) for name, text in FRAMES]
    lines += ["", "## Error types", ""]
    lines += ["- **%s**: %s" % (name, text) for name, text in ERRORS]
    lines += ["", "## Methods", ""]
    for function in sorted(METHODS.values(), key=lambda f: (AREAS.index(f.__module__) if f.__module__ in AREAS else len(AREAS), f.wire_name)):
        lines += ["### `%s`" % function.wire_name, "", "In `%s.py`." % function.__module__.replace(".", "/"), ""]
        lines += [inspect.cleandoc(function.__doc__ or ""), ""]
    return "\n".join(lines).rstrip() + "\n"
