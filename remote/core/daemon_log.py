"""The daemon's log, bounded: rotated by size, repeated lines rate-limited, and stray output
(a print, a library writing to stderr) caught from stdout/stderr into the same bounded log.

A client sending 100,000 bad frames, or a service failing in a loop, writes the first few
lines of each kind and then one summary a minute, never megabytes.
"""

import logging
import logging.handlers
import os
import threading
import time

LOG_FORMAT = "%(asctime)s %(process)d %(levelname)s %(name)s: %(message)s"
LOG_MAX_BYTES = 5 * 1024 * 1024
LOG_BACKUPS = 3
WINDOW_S = 60.0
LINES_PER_WINDOW = 10  # of one kind (logger, level, message template) per window
STRAY_LINES_PER_WINDOW = 200  # stray output is one kind, and a traceback is many lines
STRAY_LINE_MAX_BYTES = 4096
MAX_KINDS = 1000  # kinds remembered; a logger formatting its own messages makes a kind per line

stray_log = logging.getLogger("specdeck.stray")


class _Window:
    __slots__ = ("started_at", "written", "skipped", "sample")

    def __init__(self, now):
        self.started_at = now
        self.written = 0
        self.skipped = 0
        self.sample = None


class RateLimitedFileHandler(logging.handlers.RotatingFileHandler):
    """A rotating log that writes at most LINES_PER_WINDOW records of a kind per WINDOW_S, then,
    once the window is over, one line saying how many it skipped."""

    def __init__(self, path, max_bytes=LOG_MAX_BYTES, backups=LOG_BACKUPS):
        super().__init__(path, maxBytes=max_bytes, backupCount=backups, encoding="utf-8")
        self._windows = {}
        self._windows_lock = threading.Lock()

    def emit(self, record):
        now = time.monotonic()
        kind = (record.name, record.levelno, str(record.msg))
        allowance = STRAY_LINES_PER_WINDOW if record.name == stray_log.name else LINES_PER_WINDOW
        with self._windows_lock:
            summaries = self._close_windows(now)
            window = self._windows.get(kind)
            if window is None:
                if len(self._windows) >= MAX_KINDS:
                    summaries += self._close_windows(now, everything=True)
                window = self._windows[kind] = _Window(now)
            write = window.written < allowance
            if write:
                window.written += 1
            else:
                window.skipped += 1
                window.sample = record
        for summary in summaries:
            super().emit(summary)
        if write:
            super().emit(record)

    def close(self):
        with self._windows_lock:
            summaries = self._close_windows(float("inf"), everything=True)
        for summary in summaries:
            super().emit(summary)
        super().close()

    def _close_windows(self, now, everything=False):
        """Forget windows that are over; a summary record for each that skipped lines."""
        summaries = []
        for kind, window in list(self._windows.items()):
            if everything or now - window.started_at >= WINDOW_S:
                del self._windows[kind]
                if window.skipped:
                    summaries.append(_summary(window))
        return summaries


def _summary(window):
    sample = window.sample
    text = "%d more like this skipped in %d s: %s" % (window.skipped, WINDOW_S, sample.getMessage()[:200])
    return logging.LogRecord(sample.name, sample.levelno, sample.pathname, sample.lineno, text, None, None)


def setup_logging(log_file):
    """Log to `log_file` (rotated, rate-limited) and send stdout/stderr there too."""
    # A failing write must not be reported on stderr: that is the pipe back into this log.
    logging.raiseExceptions = False
    handler = RateLimitedFileHandler(log_file)
    handler.setFormatter(logging.Formatter(LOG_FORMAT))
    root = logging.getLogger()
    root.addHandler(handler)
    root.setLevel(logging.INFO)
    redirect_stdio()
    return handler


def redirect_stdio():
    """stdout/stderr into a pipe whose lines become log records: a stray print must never reach
    a socket or a dead terminal, nor grow a file that rotation does not bound."""
    read_fd, write_fd = os.pipe()
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    os.dup2(write_fd, 1)
    os.dup2(write_fd, 2)
    os.close(devnull)
    os.close(write_fd)
    threading.Thread(target=_log_stray_lines, args=(read_fd,), name="stray-output", daemon=True).start()


def _log_stray_lines(read_fd):
    with os.fdopen(read_fd, "rb") as pipe:
        while True:
            line = pipe.readline(STRAY_LINE_MAX_BYTES)  # bounded: a line without end comes in pieces
            if not line:
                return
            stray_log.warning("%s", line.rstrip(b"\n").decode("utf-8", "replace"))
