"""What a job submit accepts, checked before anything is made: argv and env as the kernel
takes them (no NUL, no `=` in a name, UTF-8, within the kernel's size limit for exec), a
working directory one can enter; and a failed write as one line (NoSpace for a full disk),
so that bad input never reaches the supervisor."""

import errno
import os

from ..core.protocol import BadRequest, RemoteError


MAX_STALL_AFTER_S = 10 * 365 * 86400.0
MAX_ARG_STRLEN = 32 * 4096  # the kernel's limit for one argument or environment entry (32 pages)
POINTER_BYTES = 8  # each argv and envp entry also costs its pointer on the new stack
ADDED_BYTES = 1024  # what the supervisor adds (the job's id, directory and token; a systemd-run prefix)


def check_utf8(text, what):
    """BadRequest naming `what` when `text` cannot go out as UTF-8: a lone surrogate, which is
    how a non-UTF-8 byte arrives (a JSON escape, or a client's surrogateescape)."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        char = ord(text[exc.start])
        byte = "the byte \\x%02x" % (char - 0xDC00) if 0xDC80 <= char <= 0xDCFF else "U+%04X" % char
        raise BadRequest("%s is not UTF-8 (%s at position %d)" % (what, byte, exc.start)) from None


def shown(text):
    """`text` for a message, a non-UTF-8 byte in it as \\xNN."""
    try:
        return text.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")
    except UnicodeEncodeError:  # a surrogate no byte stands for
        return text.encode("utf-8", "backslashreplace").decode()


def check_command(argv, interpreter):
    if not isinstance(argv, list) or not argv:
        raise BadRequest("argv must be a non-empty list of strings")
    for index, item in enumerate(argv):
        if not isinstance(item, str):
            raise BadRequest("argv item %d is %s (%s), not a string: quote it (argv must be a list of strings)"
                             % (index, type(item).__name__, str(item)[:40]))
        if "\0" in item:
            raise BadRequest("argv item %d holds a NUL character: %r" % (index, item))
        check_utf8(item, "argv item %d" % index)
    if interpreter is not None and (not isinstance(interpreter, str) or "\0" in interpreter):
        raise BadRequest("the interpreter must be a path without NUL characters, not %r" % (interpreter,))
    if interpreter is not None:
        check_utf8(interpreter, "the interpreter (python)")


def check_exec_size(argv, environment):
    """BadRequest when exec would refuse argv and this environment as too long (E2BIG): the
    kernel's ARG_MAX counts both, each string with its NUL and its pointer."""
    for index, item in enumerate(argv):
        if len(item.encode()) + 1 > MAX_ARG_STRLEN:
            raise BadRequest("argv item %d is %d bytes, more than the kernel takes for one argument (%d)"
                             % (index, len(item.encode()), MAX_ARG_STRLEN - 1))
    for name, value in environment.items():
        if len(name.encode()) + len(value.encode()) + 2 > MAX_ARG_STRLEN:
            raise BadRequest("the environment variable %s is %d bytes, more than the kernel takes for one entry (%d)"
                             % (name, len(value.encode()), MAX_ARG_STRLEN - 1))
    total = sum(len(item.encode()) + 1 + POINTER_BYTES for item in argv)
    total += sum(len(name.encode()) + len(value.encode()) + 2 + POINTER_BYTES for name, value in environment.items())
    limit = os.sysconf("SC_ARG_MAX")
    if total + ADDED_BYTES > limit:
        raise BadRequest("argv and environment take %d bytes, more than the kernel's limit for starting a program "
                         "(ARG_MAX, %d bytes)" % (total, limit))


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
        check_utf8(name, "%s: the variable name %s" % (what, shown(name)))
        check_utf8(value, "%s: the value of %s" % (what, shown(name)))
    return env


def check_cwd(cwd):
    """The job's working directory, absolute (relative to home), or BadRequest saying why not."""
    home = os.path.expanduser("~")
    if cwd is not None and (not isinstance(cwd, str) or "\0" in cwd):
        raise BadRequest("the working directory must be a path without NUL characters, not %r" % (cwd,))
    if cwd is not None:
        check_utf8(cwd, "the working directory (cwd)")
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


def stall_after(call):
    """A job start's `stall_after_s`: None (the kind's default), 0 (never) or seconds (see
    remote/notify/stalls.py); BadRequest for anything else."""
    value = call.param("stall_after_s", float)
    if value is not None and not 0 <= value <= MAX_STALL_AFTER_S:
        raise BadRequest("stall_after_s must be 0 (never) or seconds up to ten years, not %g" % value)
    return value


def with_stall_after(meta, value):
    """`meta` with its `stall_after_s` when one was given."""
    return meta if value is None else dict(meta or {}, stall_after_s=value)
