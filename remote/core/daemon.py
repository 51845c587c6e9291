"""The host daemon: one per user, detached, reached over a Unix socket only its user can open.

It answers requests from any number of relays (one per console connection), each with a
few threads of its own so that a slow request (hashing a checkpoint) never holds up a ping
and a client that floods it or stops reading costs it a bounded amount (connection.py),
pumps streams (streams.py) and runs the areas' services (services.py: the jobs area's
watcher, the history store, the feeds of remote/core/feeds.py). Its methods, services and
shared stores come from each area's module (wire.py), the areas named by the composition root
(remote/areas.py); the daemon names none. It keeps no state of its own that matters: jobs live
on disk (remote/jobs/) and samples in the history store (remote/history/), so killing and
restarting the daemon loses nothing committed.
"""

import errno
import fcntl
import logging
import os
import signal
import socket
import sys
import threading
import time

from .. import AGENT_VERSION, PROTOCOL_VERSION
from . import buildinfo, capabilities, paths, wire
from .connection import Connection
from .daemon_log import setup_logging
from .services import Services

log = logging.getLogger("specdeck.daemon")


class Daemon:
    def __init__(self, build):
        self.build = build
        self.started_at = time.time()
        self.stopping = threading.Event()
        self._accept_warned_at = None  # monotonic time of the last "cannot accept" line
        wire.load_areas()
        self.topics = {}
        self.services = Services()
        wire.attach_areas(self)  # daemon.jobs (the jobs area's store), daemon.history ...
        self.hello = {
            "type": "hello",
            "protocol": PROTOCOL_VERSION,
            "agent_version": AGENT_VERSION,
            "build": build,
            "capabilities": capabilities.probe(),
            "hostname": socket.gethostname(),
            "user": _user_name(),
            "daemon_pid": os.getpid(),
            "daemon_started_at": self.started_at,
        }

    def start_services(self):
        # In area order: the history store (before the samplers that record into it), the jobs
        # area's watcher, then the feeds of serving, telemetry, training ...
        for service_class in wire.area_services():
            self.services.add(service_class(self))

    def serve_forever(self, listener, socket_path):
        listener.settimeout(0.5)
        while not self.stopping.is_set():
            try:
                sock, _ = listener.accept()
            except socket.timeout:
                # Our socket removed (its state directory deleted): nobody can reach us any more.
                if not os.path.exists(socket_path):
                    log.info("socket %s is gone; stopping", socket_path)
                    return
                continue
            except OSError as exc:
                if exc.errno == errno.EINTR:
                    continue
                if exc.errno in (errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM):
                    # Out of descriptors for now: the caller waits, the daemon goes on.
                    self._warn_accept(exc)
                    self.stopping.wait(0.5)
                    continue
                raise
            sock.settimeout(None)
            connection = Connection(sock, self)
            threading.Thread(target=connection.serve, daemon=True).start()

    def _warn_accept(self, exc, every_s=60.0):
        now = time.monotonic()
        if self._accept_warned_at is None or now - self._accept_warned_at >= every_s:
            self._accept_warned_at = now
            log.warning("cannot accept a connection (%s; %d descriptors open, limit %s): waiting", exc.strerror or exc,
                        _open_descriptors(), _descriptor_limit())


def raise_descriptor_limit():
    """Raise the soft limit on open descriptors to the hard one: a daemon that runs for weeks,
    with many clients, pings and feeds, should not fail at the usual soft 1024 (logged)."""
    try:
        import resource

        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        if soft != hard:
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
            log.info("open descriptors: soft limit raised from %s to the hard %s", soft, hard)
    except (ImportError, ValueError, OSError) as exc:
        log.warning("open descriptors: the soft limit stays as it was (%s)", exc)


def _descriptor_limit():
    try:
        import resource

        return resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    except (ImportError, OSError):
        return "unknown"


def _open_descriptors():
    try:
        return len(os.listdir("/proc/self/fd"))
    except OSError:
        return -1


def _user_name():
    try:
        import pwd

        return pwd.getpwuid(os.getuid()).pw_name
    except (ImportError, KeyError):
        return str(os.getuid())


def bind_private_socket(path):
    """Listen on a Unix socket that only this user can open (0600 socket in a 0700 directory)."""
    directory = os.path.dirname(path)
    if os.stat(directory).st_mode & 0o077:
        os.chmod(directory, 0o700)
    try:
        os.unlink(path)  # stale: we hold the daemon lock, so nobody listens on it
    except FileNotFoundError:
        pass
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    old_umask = os.umask(0o177)
    try:
        listener.bind(path)
    finally:
        os.umask(old_umask)
    os.chmod(path, 0o600)
    listener.listen(64)
    return listener


def lock_path():
    return os.path.join(paths.state_dir(), "daemon.lock")


def run_daemon(foreground=False):
    """Start the daemon. Unless `foreground`, detach first and return once it listens (0) or failed (1)."""
    if not foreground:
        read_end, write_end = os.pipe()
        if os.fork() > 0:
            os.close(write_end)
            with os.fdopen(read_end, "rb") as ready:
                answer = ready.read()
            if answer.startswith(b"ok"):
                return 0
            sys.stderr.write(answer.decode("utf-8", "replace") or "specdeck daemon failed to start\n")
            return 1
        os.close(read_end)
        os.setsid()
        if os.fork() > 0:
            os._exit(0)
        notify = os.fdopen(write_end, "wb", buffering=0)
    else:
        notify = None

    lock = open(lock_path(), "a+")
    try:
        fcntl.flock(lock.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        # Another daemon holds the lock: it is the one to use. Not an error for the starter.
        if notify:
            notify.write(b"ok already running\n")
            os._exit(0)
        sys.stderr.write("specdeck daemon already running\n")
        return 0

    setup_logging(os.path.join(paths.state_dir(), "daemon.log"))
    raise_descriptor_limit()
    try:
        listener = bind_private_socket(paths.socket_path())
        daemon = Daemon(buildinfo.build_id())
    except Exception as exc:
        log.exception("daemon failed to start")
        if notify:
            notify.write(("specdeck daemon failed to start: %s\n" % exc).encode())
            os._exit(1)
        raise
    signal.signal(signal.SIGTERM, lambda *_: daemon.stopping.set())
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    log.info("daemon %s (build %s) listening on %s", AGENT_VERSION, daemon.build, paths.socket_path())
    if notify:
        notify.write(b"ok\n")
        notify.close()
    try:
        daemon.start_services()
        daemon.serve_forever(listener, paths.socket_path())
    except BaseException as exc:
        log.exception("daemon ends: %s", type(exc).__name__)
        raise
    finally:
        log.info("daemon stopping")
        daemon.services.stop()
        try:
            os.unlink(paths.socket_path())
        except OSError:
            pass
        listener.close()
    if not foreground:
        os._exit(0)
    return 0
