"""What a job submit accepts, checked before anything is made: argv and env as the kernel
takes them (no NUL, no `=` in a name), a working directory one can enter; and a failed write
as one line (NoSpace for a full disk), so that bad input never reaches the supervisor."""

import errno
import os

from .protocol import BadRequest, RemoteError


def check_command(argv, interpreter):
    if not isinstance(argv, list) or not argv or not all(isinstance(a, str) for a in argv):
        raise BadRequest("argv must be a non-empty list of strings")
    for index, item in enumerate(argv):
        if "\0" in item:
            raise BadRequest("argv item %d holds a NUL character: %r" % (index, item))
    if interpreter is not None and (not isinstance(interpreter, str) or "\0" in interpreter):
        raise BadRequest("the interpreter must be a path without NUL characters, not %r" % (interpreter,))


def check_env(env, what):
    """`env` checked as the kernel takes an environment: names without `=` or NUL, values without NUL."""
    if not isinstance(env, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in env.items()):
        raise BadRequest("%s must map strings to strings" % what)
    for name, value in env.items():
        if not name:
            raise BadRequest("%s: a variable name is empty" % what)
        if "=" in name or "\0" in name:
            raise BadRequest("%s: the variable name %r holds %s" % (what, name, "a NUL character" if "\0" in name else "'='"))
        if "\0" in value:
            raise BadRequest("%s: the value of %s holds a NUL character" % (what, name))
    return env


def check_cwd(cwd):
    """The job's working directory, absolute (relative to home), or BadRequest saying why not."""
    home = os.path.expanduser("~")
    if cwd is not None and (not isinstance(cwd, str) or "\0" in cwd):
        raise BadRequest("the working directory must be a path without NUL characters, not %r" % (cwd,))
    cwd = os.path.join(home, os.path.expanduser(cwd)) if cwd else home
    if not os.path.exists(cwd):
        raise BadRequest("working directory does not exist on the host: %s" % cwd)
    if not os.path.isdir(cwd):
        raise BadRequest("working directory is not a directory: %s" % cwd)
    if not os.access(cwd, os.X_OK):
        raise BadRequest("working directory cannot be entered (permission denied): %s" % cwd)
    return cwd


def disk_error(exc, what, directory):
    """A failed write as one line: NoSpace when the disk (or quota) is full."""
    if exc.errno in (errno.ENOSPC, errno.EDQUOT):
        return RemoteError("NoSpace", "no space left on the host for %s: %s is full" % (what, directory))
    return RemoteError("IOError", "could not write %s: %s" % (what, exc.strerror or exc))
