"""The supervisor of one job (`agent supervise JOBDIR`).

The supervisor starts the job's process in a session of its own, waits for it and writes
exit.json, so the exit code is recorded even while no daemon runs. It also owns the stop:
the daemon writes stop.json and sends it SIGUSR1; the supervisor sends TERM to everything
the job started, waits the grace, KILLs what is left and only then writes the record.
"Everything the job started" is, where the host offers one, the job's own cgroup
(containment.py); and always its process group, every descendant of the supervisor (it is a
child subreaper, so orphans of the job come back to it), the children of each of those as
the kernel lists them, and every process whose environment carries the job's token (a daemon
that double-forked away before the supervisor became its parent). The supervisor is never
in the group it kills, and a stop is over only when a scan finds nothing and the supervisor
has no child left: a chain that respawns itself faster than /proc can be read still comes
back to it as its children.

A job ends with its last process, as a systemd unit does: when the main process exits and
has left others running (a server started in the background, an engine's worker that
outlived it and holds a GPU), they are stopped the same way, after LEFT_BEHIND_GRACE_S,
and the log says so; the job's exit code stays the main process's.

A supervisor whose job directory was removed under it (a user's rm -rf) lets the job run to
its end, then says so in one line of the daemon's log and exits.
"""

import json
import os
import select
import signal
import subprocess
import sys
import time

from . import containment
from .processes import (
    become_subreaper, boot_id, children_of, descendants, environ_has, is_zombie, process_start_ticks, process_table,
)
from ..core.records import read_json, write_record

STOP_GRACE_S = 10.0
LEFT_BEHIND_GRACE_S = 5.0
STOP_CHECK_S = 2.0  # stop.json looked at this often, in case its signal never came
STOPPING_POLL_S = 0.1
KILL_ROUNDS = 200
DRAIN_ROUNDS = 2000  # children killed as they appear, per round of kill_all


# ---------------------------------------------------------------- the supervisor


def supervise(job_dir):
    """Run the job of job_dir to its end and record how it ended. Called as `agent supervise DIR`
    with the job's environment as a JSON object on stdin.

    Forks once so that the caller (the daemon) can reap us at once; the child leads a session
    of its own, and starts the job in yet another one.
    """
    raw = sys.stdin.buffer.read()
    environment = json.loads(raw.decode("utf-8", "surrogatepass")) if raw.strip() else None
    if os.fork() > 0:
        os._exit(0)
    os.setsid()
    devnull = os.open(os.devnull, os.O_RDWR)
    os.dup2(devnull, 0)
    log_fd = os.open(os.path.join(job_dir, "output.log"), os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    os.dup2(log_fd, 2)  # a supervisor that fails says why in the job's log
    Supervisor(job_dir, environment, log_fd).run()
    os._exit(0)


class Supervisor:
    def __init__(self, job_dir, environment, log_fd):
        self.job_dir = job_dir
        self.environment = environment
        self.log_fd = log_fd
        self.me = os.getpid()
        self.token = os.urandom(12).hex()
        self.signals = set()
        self.pgid = None
        self.main_pid = None
        self.main_status = None
        self.deadline = None  # monotonic time of the KILL, once a stop is under way
        self.stop_requested = False  # by `jobs.stop` (or a TERM), not the main process ending
        self.left_behind = 0  # processes still running when the main one ended
        self._environ_verdicts = {}  # (pid, start_ticks) -> carries our token
        self.unkillable = set()  # left after every KILL (not ours to signal: a setuid program)
        self.holder = containment.ProcessGroup()  # what holds the job's processes (containment.py)

    def path(self, name):
        return os.path.join(self.job_dir, name)

    def say(self, line):
        """One line in the job's log, if the disk takes it."""
        try:
            os.write(self.log_fd, (line + "\n").encode("utf-8", "replace"))
        except OSError:
            pass

    def run(self):
        wake_read, wake_write = os.pipe()
        os.set_blocking(wake_read, False)
        os.set_blocking(wake_write, False)
        signal.set_wakeup_fd(wake_write)
        # Python-level handlers (not SIG_IGN): exec resets them, so the job gets the defaults.
        for signum in (signal.SIGCHLD, signal.SIGUSR1, signal.SIGTERM):
            signal.signal(signum, lambda signum, frame: self.signals.add(signum))
        signal.signal(signal.SIGHUP, lambda *_: None)
        become_subreaper()
        spec = read_json(self.path("job.json"))
        if not isinstance(spec, dict):  # nothing to run: removed by hand, or never a job
            if os.path.isdir(self.job_dir):
                self.say("specdeck: %s is not a job; nothing was started" % self.path("job.json"))
            else:
                self.note_gone("its job did not start")
            return
        run = {
            "supervisor_pid": self.me,
            "supervisor_start_ticks": process_start_ticks(self.me),
            "boot_id": boot_id(),
            "started_at": time.time(),
            "pid": None,
            "start_ticks": None,
            "pgid": None,
            "stop_signal": "SIGUSR1",
        }
        if read_json(self.path("stop.json")) is not None:  # stopped before it started
            self.record("run.json", run)
            self.finish({"exit_code": None, "signal": None, "ended_at": time.time(), "stopped": True})
            return
        env = self.job_environment(spec)
        self.holder, why_not = containment.contain("specdeck-%s-%s" % (spec["id"], self.token[:8]), env)
        if why_not:
            self.say("specdeck: %s; a stop finds the job's processes by scanning instead" % why_not)
        process, reason = self.start(spec, env)
        if process is None:
            self.holder.remove()
            self.record("run.json", run)
            self.say("specdeck: could not start %s: %s" % (spec["argv"][0], reason))
            self.finish({"exit_code": 127, "signal": None, "ended_at": time.time(), "error": ("could not start: %s" % reason)[:300]})
            return
        self.main_pid = self.pgid = process.pid
        self.holder.started(process.pid)
        run.update(pid=process.pid, start_ticks=process_start_ticks(process.pid), pgid=process.pid, token=self.token,
                   containment=self.holder.kind)
        if self.holder.directory:
            run["cgroup"] = self.holder.directory
        self.record("run.json", run)  # a directory removed meanwhile: the job still runs to its end
        self.loop(wake_read)
        self.holder.remove()

    def start(self, spec, env):
        """(the job's Popen, None), or (None, why it could not start). A cgroup the process cannot
        enter (its preexec step failed, before exec: nothing of the job ran) is given up for
        the process group, and the job started again without it."""
        enter = self.holder.enter if self.holder.kind == "cgroup" else None
        try:
            process = subprocess.Popen(
                list(self.holder.argv_prefix) + spec["argv"], cwd=spec["cwd"], env=env, stdin=subprocess.DEVNULL,
                stdout=self.log_fd, stderr=subprocess.STDOUT, close_fds=True, start_new_session=True, preexec_fn=enter,
            )
            return process, None
        except (OSError, ValueError, subprocess.SubprocessError) as exc:
            if enter is not None and type(exc) is subprocess.SubprocessError:
                self.say("specdeck: the job could not enter its cgroup %s; a stop finds its processes by scanning instead"
                         % self.holder.directory)
                self.holder.remove()
                self.holder = containment.ProcessGroup()
                return self.start(spec, env)
            return None, getattr(exc, "strerror", None) or str(exc)

    def job_environment(self, spec):
        if self.environment is None:  # started by hand, without one: the agent's own, as before
            env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
            env.update(spec.get("env") or {})
        else:
            env = dict(self.environment)
        env["SPECDECK_JOB_DIR"] = self.job_dir
        env["SPECDECK_JOB_ID"] = spec["id"]
        env["SPECDECK_JOB_TOKEN"] = self.token  # marks every process the job starts (see job_processes)
        env.setdefault("PYTHONUNBUFFERED", "1")
        return env

    def loop(self, wake_read):
        next_stop_check = 0.0
        killed_after_grace = False
        while True:
            now = time.monotonic()
            # Swapped, not emptied: a handler running meanwhile adds to the new set.
            arrived, self.signals = self.signals, set()
            signalled = bool(arrived & {signal.SIGUSR1, signal.SIGTERM})
            if signalled or now >= next_stop_check:
                self.take_stop_request(now, signalled)
                next_stop_check = now + STOP_CHECK_S
            self.reap()
            if self.deadline is None:
                if self.main_status is not None:
                    left = self.remaining()
                    if not left:
                        break
                    self.left_behind = len(left)
                    self.say("specdeck: the job's main process ended; stopping the %d process%s it left running"
                             % (len(left), "" if len(left) == 1 else "es"))
                    self.deadline = now + LEFT_BEHIND_GRACE_S
                    self.send(signal.SIGTERM)
                    continue
                timeout_s = max(0.0, next_stop_check - now)
            else:
                left = self.remaining()
                if self.main_status is None:
                    left.add(self.main_pid)
                if not left:
                    break
                if now >= self.deadline:
                    self.kill_all()
                    killed_after_grace = True
                    continue
                timeout_s = STOPPING_POLL_S
            try:
                select.select([wake_read], [], [], timeout_s)
                os.read(wake_read, 4096)
            except (BlockingIOError, InterruptedError):
                pass
        code = os.waitstatus_to_exitcode(self.main_status)
        end = {"exit_code": code if code >= 0 else None, "signal": -code if code < 0 else None, "ended_at": time.time()}
        if self.left_behind:
            end["left_behind"] = self.left_behind
        if self.deadline is not None:
            end.update(stopped=self.stop_requested, killed_after_grace=killed_after_grace)
            if self.unkillable:
                end["processes_left"] = len(self.unkillable)
        self.finish(end)

    def take_stop_request(self, now, signalled):
        """Start (or shorten) the stop asked for in stop.json; a signal without one (the daemon
        could not write it on a full disk, or a user's `kill`) stops with the default grace."""
        stop = read_json(self.path("stop.json"))
        grace_s = STOP_GRACE_S
        if isinstance(stop, dict):
            value = stop.get("grace_s")
            if isinstance(value, (int, float)) and not isinstance(value, bool) and 0 <= value < float("inf"):
                grace_s = float(value)
        elif not signalled:
            return
        deadline = now + grace_s
        if self.main_status is None:
            self.stop_requested = True
        if self.deadline is None:
            self.deadline = deadline
            self.send(signal.SIGTERM)
        else:
            self.deadline = min(self.deadline, deadline)

    def send(self, signum):
        """`signum` to the job's group and to each of its processes outside it."""
        try:
            os.killpg(self.pgid, signum)
        except (ProcessLookupError, PermissionError):
            pass
        table = process_table()
        for pid in self.job_processes(table):
            if table.get(pid, (None, None))[1] != self.pgid or signum == signal.SIGKILL:
                try:
                    os.kill(pid, signum)
                except (ProcessLookupError, PermissionError):
                    pass

    def kill_all(self):
        """KILL until nothing of the job is left: its cgroup at once where it has one; then, since
        a process may fork while we look, our children as they appear and whatever a scan finds."""
        self.holder.kill()
        left = set()
        for _ in range(KILL_ROUNDS):
            self.drain_children()
            self.send(signal.SIGKILL)
            left = self.remaining()
            if not left and self.main_status is not None:
                return
            time.sleep(0.02)
        # Record the end all the same rather than read `stopping` for ever.
        self.unkillable |= left
        self.say("specdeck: processes of the job that could not be killed: %s" % sorted(left))

    def drain_children(self):
        """KILL our children and theirs, as the kernel lists them, until none is left alive. Each
        look is a read of one small file, quick enough to catch a chain whose every process
        lives a millisecond (orphans of the chain come back to us as children)."""
        refused = set()
        for _ in range(DRAIN_ROUNDS):
            self.reap()
            pending = list(children_of(self.me) - self.unkillable - refused)
            seen = set()
            while pending:
                pid = pending.pop()
                if pid in seen or is_zombie(pid):
                    continue  # a zombie's children are ours already
                seen.add(pid)
                try:
                    os.kill(pid, signal.SIGKILL)
                except PermissionError:
                    refused.add(pid)
                except ProcessLookupError:
                    pass
                pending.extend(children_of(pid))
            if not seen - refused:
                return

    def reap(self):
        """Collect every ended child (ours, and orphans handed to us); note the main one's status.
        True while the supervisor still has a child (running, or ended after this look)."""
        while True:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return False
            if pid == 0:
                return True
            if pid == self.main_pid:
                self.main_status = status

    def remaining(self):
        """The job's live processes (unkillable ones aside); empty only when the supervisor has no
        live child either. A scan of /proc misses a process forked while it ran (a chain that
        respawns itself detached, with a cleared environment), but every process of the job's
        tree is a child of ours or below one, as the kernel lists them at once."""
        left = self.job_processes() - self.unkillable
        if left or not self.reap():
            return left
        if not os.path.exists("/proc/%d/task/%d/children" % (self.me, self.me)):
            return left  # a kernel without children files: the scan is all there is
        return {pid for pid in children_of(self.me) if not is_zombie(pid)} - self.unkillable

    def job_processes(self, table=None):
        """Pids of every live process of the job: what its cgroup holds, its group, the
        supervisor's descendants, whatever carries the job's token in its environment (with
        their descendants), and the children of each as the kernel lists them after the scan
        (one forked while /proc was read)."""
        table = process_table() if table is None else table
        roots = [self.me] + sorted(self.holder.pids())
        token_entry = b"SPECDECK_JOB_TOKEN=" + self.token.encode()
        for pid, (ppid, pgid, start_ticks) in table.items():
            if pgid == self.pgid:
                roots.append(pid)
                continue
            key = (pid, start_ticks)
            if key not in self._environ_verdicts:
                self._environ_verdicts[key] = environ_has(pid, token_entry)
            if self._environ_verdicts[key]:
                roots.append(pid)
        found = descendants(roots, table)  # ours among them: orphans of the job come back to us
        found.discard(self.me)
        return found

    def record(self, name, value):
        """Write one of the job's records, waiting out a full disk; False when the directory is gone."""
        try:
            write_record(self.path(name), value, retry_s=1.0)
            return True
        except OSError:
            return False

    def finish(self, end):
        if not self.record("exit.json", end):
            how = "signal %s" % end["signal"] if end.get("signal") else "exit code %s" % end.get("exit_code")
            self.note_gone("the job ended (%s) with nowhere to record it" % how)

    def note_gone(self, what):
        """One line in the daemon's log (nobody reads the job's own now) before the supervisor exits."""
        line = "job %s: its directory %s was removed; %s; its supervisor exits" % (os.path.basename(self.job_dir), self.job_dir, what)
        stamp = time.strftime("%Y-%m-%d %H:%M:%S") + ",%03d" % (time.time() % 1 * 1000)
        try:  # opened, never created: a removed state directory stays removed
            fd = os.open(os.path.join(os.path.dirname(os.path.dirname(self.job_dir)), "daemon.log"), os.O_WRONLY | os.O_APPEND)
            try:
                os.write(fd, ("%s %d WARNING specdeck.supervisor: %s\n" % (stamp, self.me, line)).encode("utf-8", "replace"))
            finally:
                os.close(fd)
        except OSError:
            self.say("specdeck: " + line)
