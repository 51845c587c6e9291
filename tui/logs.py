"""The laptop side's log: warnings (a malformed frame from the agent, paramiko's own tracebacks)
go to specdeck.log under $XDG_STATE_HOME/specdeck (default ~/.local/state/specdeck); -v also
prints the client's info on stderr, -vv everything including paramiko's. logging is loaded only
once a record is kept.

A warm headless command keeps no record at its default level (warnings), and `import logging`
(with traceback, linecache, tokenize, weakref and string) was ~9 ms of that command's ~45 ms of
work on this machine. So our own modules log through `get(name)`, whose info() and warning()
are logging.getLogger(name)'s, and `setup()` only says where records go: logging is loaded and
set up as it said when it is loaded already, when -v asks for info, or at the first record kept.
Code that logs through logging itself (paramiko, Textual) calls `installed()` first, so that its
records find the handlers too. Before setup() (tests, the keeper's own start) every record goes
to logging as it is.
"""

import os
import sys

WARNING, INFO, DEBUG = 30, 20, 10

_pending = None  # (verbosity, to_stderr) of a setup() that logging has not carried out yet
_level = None  # the least level kept once setup() was called; None before


def setup(verbosity=0, to_stderr=True):
    """Warnings to the log file (opened at its first record); -v: info on stderr, -vv: debug."""
    global _pending, _level
    _level = DEBUG if verbosity >= 2 else INFO if verbosity else WARNING
    _pending = (verbosity, to_stderr)
    if verbosity or "logging" in sys.modules:
        installed()


def installed():
    """The logging module, set up as setup() asked (once)."""
    global _pending
    import logging

    if _pending is not None:
        verbosity, to_stderr = _pending
        _pending = None
        _install(logging, verbosity, to_stderr)
    return logging


def loaded():
    """Whether logging is loaded (then it may hold records to flush at exit)."""
    return "logging" in sys.modules


class Logger(object):
    """logging.getLogger(name)'s info() and warning(), which load logging only for a record kept."""

    __slots__ = ("name",)

    def __init__(self, name):
        self.name = name

    def info(self, message, *args, **kwargs):
        if _level is None or _level <= INFO:
            installed().getLogger(self.name).info(message, *args, **kwargs)

    def warning(self, message, *args, **kwargs):
        installed().getLogger(self.name).warning(message, *args, **kwargs)


def get(name):
    return Logger(name)


def log_path():
    from .places import state_dir

    return os.path.join(state_dir(), "specdeck.log")


def _install(logging, verbosity, to_stderr):
    class QuietParamiko(logging.Filter):
        """paramiko logs each failed handshake as a traceback: only for -vv on stderr."""

        def filter(self, record):
            return not record.name.startswith("paramiko")

    class LogFile(logging.Handler):
        """The rotating log file, made at its first record: most commands log nothing, and
        logging.handlers (with socket, pickle, queue) is not worth importing for nothing."""

        def __init__(self, path):
            super().__init__()
            self.path = path
            self.file = None

        def emit(self, record):
            if self.file is None:
                import logging.handlers

                self.file = logging.handlers.RotatingFileHandler(self.path, maxBytes=1 << 20, backupCount=1, delay=True)
                self.file.setFormatter(logging.Formatter("%(asctime)s %(process)d %(levelname)s %(name)s: %(message)s"))
            self.file.handle(record)

        def close(self):
            if self.file is not None:
                self.file.close()
            super().close()

    root = logging.getLogger()
    root.setLevel(logging.DEBUG if verbosity >= 2 else logging.INFO if verbosity else logging.WARNING)
    path = log_path()
    try:
        os.makedirs(os.path.dirname(path), mode=0o700, exist_ok=True)
        to_file = LogFile(path)
        to_file.setLevel(logging.WARNING if not verbosity else logging.DEBUG)
        root.addHandler(to_file)
    except OSError:
        pass  # no writable state directory: logging is not worth failing a command over
    if to_stderr and verbosity:
        to_stderr_handler = logging.StreamHandler(sys.stderr)
        to_stderr_handler.setFormatter(logging.Formatter("specdeck: %(name)s: %(message)s"))
        if verbosity < 2:
            to_stderr_handler.addFilter(QuietParamiko())
        root.addHandler(to_stderr_handler)
