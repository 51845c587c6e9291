"""What holds a job's processes so that a stop reaches every one of them.

Best is a cgroup v2 of the job's own: a process cannot leave it (short of root writing
another cgroup's cgroup.procs), whatever it does to its session, parent or environment, and
the kernel kills it whole (`cgroup.kill`, or frozen and killed pid by pid on older kernels).
Two ways to get one, the first the host offers:
  systemd-scope   the job runs under `systemd-run --user --scope` where a user manager runs
                  (the scope is the user's to kill: user managers get their subtree delegated)
  cgroup          a child of the supervisor's own cgroup, where this user may create one and
                  move processes into it (root, or a delegated cgroup v2 tree)
Elsewhere `process-group`: the supervisor finds the job's processes by scanning (its group,
its descendants, the job's token in their environment). SPECDECK_CONTAINMENT=process-group in
the agent's environment forces that.
"""

import errno
import os
import shutil
import signal
import subprocess
import time

SETTING = "SPECDECK_CONTAINMENT"
KILL_ROUNDS = 500
PROBE_TIMEOUT_S = 10.0
REMOVE_TRIES = 50
STALE_S = 60.0  # an empty job cgroup this old belongs to no starting job


def _unescape(field):
    """A path field of /proc/self/mountinfo (spaces and the like come as octal escapes)."""
    return field.encode("latin-1").decode("unicode_escape") if "\\" in field else field


def cgroup2_mount():
    """(mount point, root within the hierarchy) of this process's cgroup v2 mount, or None."""
    try:
        with open("/proc/self/mountinfo") as f:
            lines = f.read().splitlines()
    except OSError:
        return None
    for line in lines:
        left, _, right = line.partition(" - ")
        if right.split()[:1] == ["cgroup2"]:
            fields = left.split()
            return _unescape(fields[4]), _unescape(fields[3])
    return None


def cgroup_of(pid="self"):
    """The process's cgroup v2 path (from the hierarchy's root), or None (no v2, or gone)."""
    try:
        with open("/proc/%s/cgroup" % pid) as f:
            for line in f:
                if line.startswith("0::"):
                    path = line[3:].rstrip("\n")
                    return None if path.endswith(" (deleted)") else path
    except OSError:
        pass
    return None


def cgroup_directory(path):
    """The directory of cgroup `path` under the v2 mount, or None when it is not mounted here."""
    mount = cgroup2_mount()
    if mount is None or path is None:
        return None
    mount_point, root = mount
    if root != "/":
        if path != root and not path.startswith(root.rstrip("/") + "/"):
            return None
        path = path[len(root):]
    return os.path.join(mount_point, path.lstrip("/"))


def writable_parent():
    """This process's own cgroup v2 directory when this user may make a child of it and move
    processes there (moving needs write access to the common ancestor: this one); else None."""
    directory = cgroup_directory(cgroup_of())
    if directory is None:
        return None
    if all(os.access(os.path.join(directory, name), os.W_OK) for name in ("", "cgroup.procs")):
        return directory
    return None


def user_manager_runtime_dir(environment):
    """XDG_RUNTIME_DIR of a running systemd user manager this user can reach, or None."""
    runtime_dir = environment.get("XDG_RUNTIME_DIR") or "/run/user/%d" % os.getuid()
    if os.path.exists(os.path.join(runtime_dir, "systemd", "private")):
        return runtime_dir
    return None


# ---------------------------------------------------------------- the holders


class ProcessGroup:
    """No container: the supervisor's scans are all there is."""

    kind = "process-group"
    directory = None
    argv_prefix = ()

    def enter(self):
        pass

    def started(self, pid):
        pass

    def pids(self):
        return set()

    def kill(self):
        pass

    def remove(self):
        pass


class Cgroup(ProcessGroup):
    """A cgroup v2 directory of the job's own; the job's main process enters it before exec."""

    kind = "cgroup"

    def __init__(self, directory):
        self.directory = directory

    @classmethod
    def create(cls, parent, name):
        directory = os.path.join(parent, name)
        os.mkdir(directory)
        return cls(directory)

    def _file(self, name):
        return os.path.join(self.directory, name)

    def _write(self, name, text):
        fd = os.open(self._file(name), os.O_WRONLY)
        try:
            os.write(fd, text.encode())
        finally:
            os.close(fd)

    def enter(self):
        """Run in the job's process between fork and exec (only os calls: nothing to lock)."""
        self._write("cgroup.procs", "0")

    def pids(self):
        """Every process in the cgroup now (a child it forks is in it from its first instant)."""
        if self.directory is None:
            return set()
        try:
            with open(self._file("cgroup.procs"), "rb") as f:
                return {int(pid) for pid in f.read().split()}
        except (OSError, ValueError):
            return set()

    def kill(self):
        """KILL every process in the cgroup, including those forked meanwhile."""
        if self.directory is None:
            return
        try:
            self._write("cgroup.kill", "1")  # Linux 5.14+: one step, forks included
            return
        except OSError as exc:
            if exc.errno not in (errno.ENOENT, errno.EACCES, errno.EPERM, errno.EINVAL):
                raise
        # Older kernels: freeze it (nothing in it forks any more), then KILL pid by pid.
        frozen = self._try_write("cgroup.freeze", "1")
        for _ in range(KILL_ROUNDS):
            pids = self.pids()
            if not pids:
                break
            for pid in pids:
                try:
                    os.kill(pid, signal.SIGKILL)
                except (ProcessLookupError, PermissionError):
                    pass
            time.sleep(0.01)
        if frozen:
            self._try_write("cgroup.freeze", "0")

    def _try_write(self, name, text):
        try:
            self._write(name, text)
            return True
        except OSError:
            return False

    def remove(self):
        """rmdir the cgroup once it is empty (the kernel lets go of exited tasks a moment later)."""
        if self.directory is None:
            return
        for _ in range(REMOVE_TRIES):
            try:
                os.rmdir(self.directory)
                return
            except FileNotFoundError:
                return
            except OSError as exc:
                if exc.errno != errno.EBUSY:
                    return
                time.sleep(0.02)


def remove_left_over(directory):
    """rmdir the cgroup of a job whose supervisor was killed, once nothing runs in it (an empty
    cgroup directory of ours, never anything else)."""
    if isinstance(directory, str) and os.path.basename(directory).startswith("specdeck-"):
        try:
            os.rmdir(directory)
        except OSError:
            pass


def sweep(parent, older_than_s=STALE_S):
    """Remove the empty job cgroups under `parent` that were made more than `older_than_s` ago:
    those of supervisors that were killed (a job never runs in a cgroup that is empty; the age
    spares one made this instant, whose process has not entered it yet)."""
    try:
        names = [name for name in os.listdir(parent) if name.startswith("specdeck-")]
    except OSError:
        return
    for name in names:
        directory = os.path.join(parent, name)
        try:
            with open(os.path.join(directory, "cgroup.events")) as f:
                populated = "populated 1" in f.read()
            if not populated and time.time() - os.stat(directory).st_ctime > older_than_s:
                os.rmdir(directory)
        except OSError:
            continue


class SystemdScope(Cgroup):
    """A transient scope of the user's systemd manager: `systemd-run --scope` registers itself
    in it and then execs the job, so the job's pid is systemd-run's."""

    kind = "systemd-scope"

    def __init__(self, unit, runtime_dir):
        super().__init__(None)
        self.unit = unit + ".scope"
        self.runtime_dir = runtime_dir
        self.argv_prefix = ("systemd-run", "--user", "--scope", "--quiet", "--collect", "--unit", unit, "--")

    def env(self):
        env = dict(os.environ)
        env["XDG_RUNTIME_DIR"] = self.runtime_dir
        return env

    def enter(self):
        pass

    def started(self, pid):
        """Learn the scope's directory: the job's process moves there before it execs the job."""
        for _ in range(500):
            path = cgroup_of(pid)
            if path is None:
                break
            if path.rsplit("/", 1)[-1] == self.unit:
                self.directory = cgroup_directory(path)
                return
            time.sleep(0.01)
        shown = self._systemctl("show", "--property", "ControlGroup", "--value", self.unit)
        if shown:
            self.directory = cgroup_directory(shown.strip())

    def kill(self):
        if self.directory is not None and os.access(self._file("cgroup.kill"), os.W_OK):
            super().kill()
        else:
            self._systemctl("kill", "--signal", "SIGKILL", self.unit)

    def remove(self):
        pass  # --collect: the manager drops the scope once it is empty

    def _systemctl(self, *args):
        try:
            done = subprocess.run(["systemctl", "--user"] + list(args), env=self.env(), stdin=subprocess.DEVNULL,
                                  capture_output=True, text=True, timeout=PROBE_TIMEOUT_S)
        except (OSError, subprocess.SubprocessError):
            return None
        return done.stdout if done.returncode == 0 else None


def _systemd_scope(name, environment):
    runtime_dir = user_manager_runtime_dir(environment)
    if runtime_dir is None or shutil.which("systemd-run") is None:
        return None
    scope = SystemdScope(name + "-probe", runtime_dir)
    try:
        probe = subprocess.run(list(scope.argv_prefix) + ["true"], env=scope.env(), stdin=subprocess.DEVNULL,
                               capture_output=True, timeout=PROBE_TIMEOUT_S)
    except (OSError, subprocess.SubprocessError):
        return None
    if probe.returncode != 0:
        return None
    environment.setdefault("XDG_RUNTIME_DIR", runtime_dir)  # how the job's systemd-run finds the manager
    return SystemdScope(name, runtime_dir)


def contain(name, environment):
    """The holder for a new job: (holder, why the better ones were not used, or None).
    `environment`, the job's, gets XDG_RUNTIME_DIR when a systemd scope holds the job."""
    if os.environ.get(SETTING, "auto") == "process-group":
        return ProcessGroup(), None
    scope = _systemd_scope(name, environment)
    if scope is not None:
        return scope, None
    parent = writable_parent()
    if parent is None:
        return ProcessGroup(), None
    sweep(parent)
    try:
        return Cgroup.create(parent, name), None
    except OSError as exc:
        return ProcessGroup(), "could not make a cgroup in %s: %s" % (parent, exc.strerror or exc)
