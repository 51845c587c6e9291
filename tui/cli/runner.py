"""The warm runner: one background interpreter per link keeper with the command line's modules
already imported, which runs each headless command it is handed in a child of its own (a fork),
on the command's own stdin, stdout and stderr, in its working directory and environment.

A warm command over a held link is one round trip plus what this laptop does, and most of what
it did was a fresh interpreter importing the CLI (~45 ms of a 2-core laptop's CPU, twice that
with its cores busy). Handed to the runner (tui/cli/runner_client.py), the command's own process
imports next to nothing and the child starts with everything loaded, as Mercurial's chg or
Android's zygote do; a child is forked ahead and takes the next command off the socket itself.
The runner is single-threaded, so a fork of it holds no other thread's lock.

Its socket is the keeper's with `.run` added (a directory only this user can open; every peer is
checked with SO_PEERCRED as well). A headless command run in its own process starts a runner
when a keeper listens and no runner does (tui/cli/entry.py); the runner ends with its keeper
(whose lock it finds free), after its children. A request from another interpreter, or under
another locale or time zone, is answered `no`: that command runs in its own process.

A child whose client goes away (killed, or its terminal closed) ends with SIGTERM; the client
passes SIGINT, SIGTERM, SIGHUP and SIGQUIT on. Standard library only.
"""

import fcntl
import gc
import io
import marshal
import os
import select
import signal
import socket
import struct
import sys
import threading
import time

from .runner_client import FORWARDED_SIGNALS, LOCALE_VARIABLES

CHECK_S = 1.0  # how often the runner looks for its keeper
SPARE_AFTER_S = 0.2  # the next spare, once one took a command that has not ended yet
REQUEST_TIMEOUT_S = 2.0
MAX_REQUEST_BYTES = 16 << 20
WATCHED = select.POLLRDHUP | select.POLLHUP | select.POLLERR


def start(keeper_path):
    """Start a runner for the keeper at `keeper_path` in the background (it detaches at once)."""
    import subprocess

    parent = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    code = "import sys; sys.path[:0] = [%r]; from tui.cli.runner import main; sys.exit(main(sys.argv[1:]))" % parent
    try:
        subprocess.Popen([sys.executable, "-I", "-c", code, keeper_path], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                         stderr=subprocess.DEVNULL, start_new_session=True, close_fds=True, env=dict(os.environ))
    except OSError:
        pass  # the next command runs in its own process, as this one did


def main(argv):
    """`python -c ... KEEPER_SOCKET`: detach, load the CLI, serve until the keeper is gone."""
    keeper_path = argv[0]
    path = keeper_path + ".run"
    if os.fork():  # the starter returns at once; the runner is nobody's child and no session leader
        os._exit(0)
    os.umask(0o077)
    os.chdir("/")
    lock = open(path + ".lock", "a")
    try:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return 0  # another runner serves this keeper
    keeper_lock = open(keeper_path + ".lock", "a")
    _load()
    # What is loaded now is never collected: a child's collections then leave the shared pages
    # alone instead of writing to every object's header in them (a copy of each page, per child).
    gc.freeze()
    try:
        os.unlink(path)  # a killed runner's socket
    except FileNotFoundError:
        pass
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(path)
    listener.listen(64)
    signal.signal(signal.SIGTERM, lambda *_: os._exit(0))  # children are not ours to end: they run on
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        Runner(listener, keeper_lock, lock).serve()
    finally:
        try:
            os.unlink(path)
        except OSError:
            pass
    os._exit(0)


def _load():
    """Import what a command imports: every area's CLI, with its parser built once."""
    import json  # noqa: F401

    from ..transport import connection, links  # noqa: F401
    from . import main as cli
    from .commands import OWN_PROCESS

    for _, names in cli.AREAS:
        if not OWN_PROCESS.intersection(names):
            cli.area_parser(names[0])


def keeper_gone(keeper_lock):
    """Whether the keeper's lock is free (its keeper ended, however it ended)."""
    try:
        fcntl.flock(keeper_lock, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    fcntl.flock(keeper_lock, fcntl.LOCK_UN)
    return True


def same_interpreter(executable, prefix):
    """Whether a command's interpreter is the runner's: the same binary (`python` and `python3`
    of one environment are two names of it) in the same environment."""
    if prefix != sys.prefix or not isinstance(executable, str):
        return False
    try:
        return executable == sys.executable or os.path.samefile(executable, sys.executable)
    except OSError:
        return False


class Runner(object):
    """The parent: keeps one child forked ahead (the spare), which takes the next command off the
    socket itself (no fork between a command and its start), reaps its children, and ends once
    its keeper has, after them."""

    def __init__(self, listener, keeper_lock, lock):
        self.listener = listener
        self.keeper_lock = keeper_lock
        self.lock = lock  # this runner's own: a child holding it on would keep the next runner out
        self.children = set()  # not yet reaped, the spare among them
        self.spare = None
        self.spare_due = 0.0  # when the next spare is forked (monotonic)
        self.taken_r, self.taken_w = os.pipe()  # the spare writes a byte here once it took a command
        self.locale = {name: os.environ.get(name) for name in LOCALE_VARIABLES}
        # A child's end wakes the loop (its byte on this pipe), so the next spare follows at once.
        self.woken_r, self.woken_w = os.pipe()
        os.set_blocking(self.woken_w, False)
        signal.signal(signal.SIGCHLD, lambda *_: None)
        signal.set_wakeup_fd(self.woken_w)

    def serve(self):
        ending = False
        watch = select.poll()
        watch.register(self.taken_r, select.POLLIN)
        watch.register(self.woken_r, select.POLLIN)
        while not ending or self.children:
            now = time.monotonic()
            if not ending and self.spare is None and now >= self.spare_due:
                self.spare = self.fork_spare()
            wait_s = CHECK_S if self.spare is not None or ending else max(0.0, min(CHECK_S, self.spare_due - now))
            for fd, _ in watch.poll(wait_s * 1000):
                os.read(fd, 512)
                if fd == self.taken_r:
                    # Not forked at once: a fork would take CPU from the command just taken. The
                    # next spare comes when a command ends, or SPARE_AFTER_S after one was taken.
                    self.spare, self.spare_due = None, time.monotonic() + SPARE_AFTER_S
            self.reap()
            if not ending and keeper_gone(self.keeper_lock):
                ending = True
                self.listener.close()
                if self.spare is not None:
                    os.kill(self.spare, signal.SIGTERM)  # idle, in accept(): it holds no command

    def fork_spare(self):
        try:
            pid = os.fork()
        except OSError:
            return None  # tried again after CHECK_S
        if pid == 0:
            self.spare_child()
        self.children.add(pid)
        return pid

    def reap(self):
        while self.children:
            try:
                pid, _ = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            self.children.discard(pid)
            if pid == self.spare:
                self.spare = None
            self.spare_due = 0.0  # a command ended (or the spare did): the next spare now

    def refusal(self, request, fds):
        if len(fds) != 3:
            return "stdio"
        if not same_interpreter(request.get("executable"), request.get("prefix")):
            return "interpreter"
        if request.get("locale") != self.locale:
            return "locale"
        return None

    def spare_child(self):
        """In a forked child: take the next command, become its process, run it, say its exit code."""
        code = 0
        try:
            signal.set_wakeup_fd(-1)
            signal.signal(signal.SIGCHLD, signal.SIG_DFL)
            signal.signal(signal.SIGTERM, signal.SIG_DFL)
            for held in (self.keeper_lock, self.lock):
                held.close()
            for fd in (self.taken_r, self.woken_r, self.woken_w):
                os.close(fd)
            conn, _ = self.listener.accept()
            os.write(self.taken_w, b"t")
            os.close(self.taken_w)
            self.listener.close()
            peer = conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
            if struct.unpack("3i", peer)[1] == os.getuid():
                conn.settimeout(REQUEST_TIMEOUT_S)
                request, fds = _read_request(conn)
                why = self.refusal(request, fds)
                if why:
                    conn.sendall(b"no " + why.encode() + b"\n")
                else:
                    conn.sendall(b"pid %d\n" % os.getpid())
                    code = _command(conn, fds, request)
        except BaseException:
            code = 1
        os._exit(code)


def _command(conn, fds, request):
    """Be the command's process (its descriptors, environment, streams and directory) once its
    client says go, run it, and send its exit code."""
    for name in FORWARDED_SIGNALS + ("SIGCHLD",):
        signal.signal(getattr(signal, name), signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    for target, fd in enumerate(fds):
        os.dup2(fd, target)
    for fd in set(fds) - {0, 1, 2}:
        os.close(fd)
    os.environ.clear()
    os.environ.update(request["env"])
    _set_streams(request["streams"])
    conn.settimeout(None)
    if _read_exactly(conn, 3) != b"go\n":
        return 0  # the command gave up waiting: it runs in its own process, not here too
    sys.executable = request["executable"]  # `python3` where the runner was started as `python`: the same binary
    _end_when_left(conn)
    try:
        os.chdir(request["cwd"])
    except OSError as exc:
        sys.stderr.write("specdeck: cannot work in %s: %s\n" % (request["cwd"], exc.strerror or exc))
        sys.stderr.flush()
        code = 2
    else:
        sys.argv = ["specdeck"] + request["argv"]
        code = _run(request["argv"])
    try:
        conn.sendall(b"exit %d\n" % code)
    except OSError:
        pass
    return code


def _end_when_left(conn):
    """When the command's client goes away (killed, or its terminal closed), the command ends too:
    the kernel sends this process SIGTERM as the client's end closes (O_ASYNC, with F_SETSIG
    naming the signal), which the client never otherwise does before the exit code is sent. No
    thread watches: one would be a start and a hand-over of the GIL in every command, each a
    wait on busy cores. Where F_SETSIG is missing (not Linux), a thread does watch."""
    if not hasattr(fcntl, "F_SETSIG"):
        threading.Thread(target=_watch, args=(conn,), name="runner-client", daemon=True).start()
        return
    fcntl.fcntl(conn, fcntl.F_SETOWN, os.getpid())
    fcntl.fcntl(conn, fcntl.F_SETSIG, signal.SIGTERM)
    fcntl.fcntl(conn, fcntl.F_SETFL, fcntl.fcntl(conn, fcntl.F_GETFL) | os.O_ASYNC)
    watch = select.poll()
    watch.register(conn, WATCHED)
    if watch.poll(0):  # gone before the signal was asked for
        os.kill(os.getpid(), signal.SIGTERM)


def _watch(conn):
    watch = select.poll()
    watch.register(conn, WATCHED)
    watch.poll()
    os.kill(os.getpid(), signal.SIGTERM)


def _read_request(conn):
    """(the request, the three descriptors sent with it)."""
    data, ancdata, _, _ = conn.recvmsg(65536, socket.CMSG_LEN(3 * struct.calcsize("i")))
    fds = []
    for level, kind, payload in ancdata:
        if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
            fds.extend(struct.unpack("%di" % (len(payload) // 4), payload[:len(payload) - len(payload) % 4]))
    if len(data) < 4:
        data += _read_exactly(conn, 4 - len(data))
    size = int.from_bytes(data[:4], "big")
    if size > MAX_REQUEST_BYTES:
        raise ValueError("request too large")
    body = data[4:]
    if len(body) < size:
        body += _read_exactly(conn, size - len(body))
    request = marshal.loads(body)
    if type(request) is not dict or type(request.get("argv")) is not list or type(request.get("env")) is not dict:
        raise ValueError("not a request")
    return request, fds


def _read_exactly(conn, n):
    data = b""
    while len(data) < n:
        chunk = conn.recv(n - len(data))
        if not chunk:
            break
        data += chunk
    return data


def _set_streams(specs):
    """sys.stdin, stdout and stderr on descriptors 0, 1 and 2 as the command's own process had them."""
    made = []
    for fd, spec in enumerate(specs):
        if spec is None:
            made.append(None)
            continue
        encoding, errors, line_buffering = spec
        raw = io.FileIO(fd, "r" if fd == 0 else "w", closefd=False)
        buffered = io.BufferedReader(raw) if fd == 0 else io.BufferedWriter(raw)
        made.append(io.TextIOWrapper(buffered, encoding=encoding, errors=errors, line_buffering=line_buffering))
    sys.stdin, sys.stdout, sys.stderr = made
    sys.__stdin__, sys.__stdout__, sys.__stderr__ = made


def _run(argv):
    """The command's exit code, as `python -m tui.cli ARGV` would end with it."""
    from .main import main

    try:
        code = main(argv)
    except SystemExit as exc:
        code = exc.code
    except KeyboardInterrupt:
        code = 130
    except BaseException:
        import traceback

        traceback.print_exc()
        code = 1
    from .. import logs

    logs.get("tui.runner").info("run by the warm runner (%d), in its child %d", os.getppid(), os.getpid())
    for thread in threading.enumerate():  # as exit_now: a thread still working is waited for
        if thread is not threading.main_thread() and not thread.daemon:
            thread.join()
    if code is not None and not isinstance(code, int):
        sys.stderr.write("%s\n" % code)
        code = 1
    try:
        sys.stdout.flush()
        sys.stderr.flush()
    except (BrokenPipeError, ValueError):
        pass
    if logs.loaded():
        logs.installed().shutdown()
    return code or 0
