"""Detached jobs: processes that outlive the console, the SSH session and the daemon.

Each job is a directory under jobs_dir():
  job.json      what to run (resolved argv, cwd, env additions, name, kind), when submitted
  run.json      the supervisor's and the process's pid with their start times, pgid, boot id
  exit.json     exit code / signal and end time, written by the supervisor when the process ends
  stop.json     present once a stop was asked for
  output.log    stdout and stderr of the process
  progress.json optional, written by jobs that report progress (downloads)

A small supervisor process (this agent, `supervise JOBDIR`) leads the job's session and
process group, waits for the process and writes exit.json, so the exit code is recorded
even while no daemon runs. The daemon itself holds no job state: every answer is read
from disk, which is what lets a restarted daemon re-adopt running jobs.
"""

import json
import os
import re
import shutil
import signal
import subprocess
import threading
import time

from . import paths
from .protocol import BadRequest, NotFound, RemoteError

TAIL_MAX_BYTES = 1024 * 1024
SIGNATURE_FILES = ("job.json", "run.json", "exit.json", "stop.json", "progress.json")
STOP_GRACE_S = 10.0
KIND_PATTERN = re.compile(r"[a-z][a-z0-9_-]{0,31}\Z")  # any kind: command, download, server, training, ...


# ---------------------------------------------------------------- process identity


def boot_id():
    try:
        with open("/proc/sys/kernel/random/boot_id") as f:
            return f.read().strip()
    except OSError:
        return ""


def process_start_ticks(pid):
    """The process's start time in clock ticks since boot, or None when no such process.

    A pid together with this number names one process for good: a recycled pid has a
    different start time.
    """
    try:
        with open("/proc/%d/stat" % pid, "rb") as f:
            stat = f.read()
    except (OSError, ValueError):
        return None
    # The command name (field 2) may hold spaces and parentheses: split after the last ')'.
    fields = stat[stat.rfind(b")") + 2 :].split()
    if fields[0] == b"Z":
        return None
    return int(fields[19])


def is_same_process(pid, start_ticks, recorded_boot_id):
    if not pid or recorded_boot_id != boot_id():
        return False
    return process_start_ticks(pid) == start_ticks


# ---------------------------------------------------------------- files


def read_json(path):
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def write_json(path, value):
    tmp = "%s.tmp.%d" % (path, os.getpid())
    with open(tmp, "w") as f:
        json.dump(value, f)
    os.replace(tmp, path)


# ---------------------------------------------------------------- executables


def login_path():
    """The PATH of the user's login shell merged before the daemon's own.

    Asked anew at each submit (a login shell costs milliseconds; a submit is rare), so a venv
    added to ~/.profile counts at once. The classic failure this prevents: a job started from
    a shell without the venv on its PATH, noticed hours later.
    """
    import pwd

    shell = pwd.getpwuid(os.getuid()).pw_shell or "/bin/sh"
    value = ""
    try:
        out = subprocess.run(
            [shell, "-l", "-c", 'printf "%s" "$PATH"'],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            timeout=15,
        )
        lines = out.stdout.decode("utf-8", "replace").strip().splitlines()
        value = lines[-1] if lines else ""
    except (OSError, subprocess.SubprocessError):
        value = ""
    merged = []
    for entry in (value + os.pathsep + os.environ.get("PATH", "")).split(os.pathsep):
        if entry and entry not in merged:
            merged.append(entry)
    return os.pathsep.join(merged)


def resolve_executable(name, cwd, search_path):
    """Absolute path of an executable, or BadRequest naming what was not found."""
    if os.sep in name:
        candidate = os.path.normpath(os.path.join(cwd, os.path.expanduser(name)))
        if not os.path.exists(candidate):
            raise BadRequest("command not found: %s (no such file)" % candidate)
        if os.path.isdir(candidate) or not os.access(candidate, os.X_OK):
            raise BadRequest("command not executable: %s" % candidate)
        return candidate
    found = shutil.which(name, path=search_path)
    if not found:
        raise BadRequest("command not found on the host's login PATH: %s" % name)
    return os.path.abspath(found)


def utf8_boundary(data):
    """Length of `data` without a UTF-8 character cut off at its end (windows of a log are
    decoded one by one, and a split character would show as two replacement marks)."""
    for back in range(1, min(4, len(data)) + 1):
        byte = data[-back]
        if byte < 0x80:
            return len(data)  # ASCII: nothing is cut
        if byte >= 0xC0:  # the lead byte of the last character
            needed = 2 if byte < 0xE0 else 3 if byte < 0xF0 else 4
            return len(data) if back >= needed else len(data) - back
    return len(data)


# ---------------------------------------------------------------- the store


class JobStore:
    def __init__(self, root=None):
        self.root = root or paths.jobs_dir()
        self._id_lock = threading.Lock()

    # -- submit

    def submit(self, argv, cwd=None, env=None, interpreter=None, name=None, kind="command", meta=None, reserved=None, secret_env=None):
        """Start a job. `reserved`: (job_id, job_dir) from `reserve`, for a caller that put files
        in the directory first. `secret_env`: variables (a token) the job's process gets that are
        never written anywhere: they go to the supervisor over a pipe, not into job.json."""
        if not isinstance(argv, list) or not argv or not all(isinstance(a, str) for a in argv):
            raise BadRequest("argv must be a non-empty list of strings")
        if not isinstance(kind, str) or not KIND_PATTERN.match(kind):
            raise BadRequest("a job kind is a short lower-case word (command, download, server, training), not %r" % (kind,))
        if meta is not None and not isinstance(meta, dict):
            raise BadRequest("meta must be an object")
        env = env or {}
        if not all(isinstance(k, str) and isinstance(v, str) for k, v in env.items()):
            raise BadRequest("env must map strings to strings")
        cwd = os.path.expanduser(cwd) if cwd else os.path.expanduser("~")
        if not os.path.isdir(cwd):
            raise BadRequest("working directory does not exist on the host: %s" % cwd)
        program = interpreter or argv[0]
        # An absolute program needs no PATH: spare the login shell.
        search_path = env.get("PATH") or ("" if os.sep in program else login_path())
        if interpreter:
            argv = [resolve_executable(interpreter, cwd, search_path)] + list(argv)
        else:
            argv = [resolve_executable(argv[0], cwd, search_path)] + list(argv[1:])
        job_id, job_dir = reserved or self._new_job_dir()
        spec = {
            "id": job_id,
            "name": name or " ".join([os.path.basename(argv[0])] + argv[1:])[:200],
            "kind": kind,
            "argv": argv,
            "cwd": cwd,
            "env": env,
            "submitted_at": time.time(),
            "meta": meta or {},
        }
        write_json(os.path.join(job_dir, "job.json"), spec)
        open(os.path.join(job_dir, "output.log"), "ab").close()
        # The supervisor forks itself away and returns at once; waiting for it reaps it.
        launcher = subprocess.Popen(
            paths.agent_argv() + ["supervise", job_dir],
            stdin=subprocess.PIPE,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            env=paths.agent_env(),
            close_fds=True,
        )
        launcher.communicate(json.dumps(secret_env or {}).encode())
        return self.describe(job_id)

    def reserve(self):
        """(job_id, job_dir): a new empty job directory for a caller that writes files there
        before `submit(..., reserved=...)`; `discard` removes one never submitted. Without
        job.json it is no job yet: listings and the job watcher skip it."""
        return self._new_job_dir()

    def discard(self, job_id):
        """Remove a reserved directory that was never submitted."""
        path = os.path.join(self.root, job_id)
        if not os.path.exists(os.path.join(path, "job.json")):
            shutil.rmtree(path, ignore_errors=True)

    def _new_job_dir(self):
        with self._id_lock:
            numbers = [int(n[1:]) for n in os.listdir(self.root) if n.startswith("j") and n[1:].isdigit()]
            number = max(numbers, default=0) + 1
            while True:
                job_id = "j%d" % number
                path = os.path.join(self.root, job_id)
                try:
                    os.mkdir(path, 0o700)
                    return job_id, path
                except FileExistsError:
                    number += 1

    # -- read

    def job_dir(self, job_id):
        if not isinstance(job_id, str) or not job_id.startswith("j") or not job_id[1:].isdigit():
            raise NotFound("no job %r on this host" % (job_id,))
        path = os.path.join(self.root, job_id)
        if not os.path.isfile(os.path.join(path, "job.json")):
            raise NotFound("no job %s on this host" % job_id)
        return path

    def describe(self, job_id):
        job_dir = self.job_dir(job_id)
        spec = read_json(os.path.join(job_dir, "job.json")) or {}
        run = read_json(os.path.join(job_dir, "run.json"))
        end = read_json(os.path.join(job_dir, "exit.json"))
        stop = read_json(os.path.join(job_dir, "stop.json"))
        progress = read_json(os.path.join(job_dir, "progress.json"))
        try:
            log_bytes = os.path.getsize(os.path.join(job_dir, "output.log"))
        except OSError:
            log_bytes = 0
        state = _process_state(job_dir, spec, run, end, stop)
        job = {
            "id": job_id,
            "name": spec.get("name"),
            "kind": spec.get("kind", "command"),
            "argv": spec.get("argv"),
            "cwd": spec.get("cwd"),
            "state": state,
            "process_state": state,
            "exit_code": end.get("exit_code") if end else None,
            "signal": end.get("signal") if end else None,
            "submitted_at": spec.get("submitted_at"),
            "started_at": run.get("started_at") if run else None,
            "ended_at": end.get("ended_at") if end else None,
            "pid": run.get("pid") if run else None,
            "log_bytes": log_bytes,
            "error": end.get("error") if end else None,
            "meta": spec.get("meta", {}),
        }
        if progress is not None:
            job["progress"] = progress
            # A job that reports progress names its own states (downloading, verified, ...): while
            # it runs, and after it ends when its last word was `final` (a job killed mid-way
            # keeps the process's state, not a stale "downloading").
            if progress.get("state") and state not in ("stopped", "lost"):
                if state == "running" or progress.get("final"):
                    job["state"] = progress["state"]
        return job

    def ids(self):
        """Every job id, oldest first."""
        ids = [n for n in os.listdir(self.root) if n.startswith("j") and n[1:].isdigit()]
        return sorted(ids, key=lambda n: int(n[1:]))

    def signature(self, job_id):
        """What changes when anything about the job does (its files' sizes and times), without
        reading them: the job watcher describes a job again only when this moves."""
        job_dir = os.path.join(self.root, job_id)
        marks = []
        for name in SIGNATURE_FILES:
            try:
                st = os.stat(os.path.join(job_dir, name))
                marks.append((st.st_mtime_ns, st.st_size))
            except OSError:
                marks.append(None)
        return tuple(marks)

    def list(self, kind=None):
        """Every job, oldest first; with `kind`, only those of that kind (the others are not read
        beyond their job.json, so a pane that wants downloads does not pay for every job)."""
        jobs = []
        for job_id in self.ids():
            if kind is not None and (read_json(os.path.join(self.root, job_id, "job.json")) or {}).get("kind", "command") != kind:
                continue
            try:
                jobs.append(self.describe(job_id))
            except NotFound:
                continue  # a directory being created right now
        return jobs

    def log_path(self, job_id):
        return os.path.join(self.job_dir(job_id), "output.log")

    def tail(self, job_id, offset=0, max_bytes=65536):
        """A window of the log: `offset` < 0 counts from the end. Never reads more than max_bytes."""
        path = self.log_path(job_id)
        max_bytes = max(1, min(int(max_bytes), TAIL_MAX_BYTES))
        with open(path, "rb") as f:
            size = os.fstat(f.fileno()).st_size
            offset = int(offset)
            if offset < 0:
                offset = max(0, size + offset)
                if offset > 0:
                    # Start on a line boundary so the first line shown is whole.
                    f.seek(offset)
                    head = f.read(min(size - offset, max_bytes))
                    newline = head.find(b"\n")
                    if 0 <= newline < len(head) - 1:
                        offset += newline + 1
            offset = min(offset, size)
            f.seek(offset)
            data = f.read(min(max_bytes, size - offset))
        if offset + len(data) < size:
            data = data[: utf8_boundary(data)]
        return {"offset": offset, "next_offset": offset + len(data), "size": size, "text": data.decode("utf-8", "replace")}

    def read_lines_from(self, job_id, offset, max_bytes=65536, final=False):
        """Whole lines from offset (the rest of the file too when `final`), as (bytes, next_offset)."""
        with open(self.log_path(job_id), "rb") as f:
            f.seek(offset)
            data = f.read(max_bytes)
        if not data:
            return b"", offset
        if not final and len(data) < max_bytes:
            cut = data.rfind(b"\n")
            if cut < 0:
                return b"", offset
            data = data[: cut + 1]
        elif len(data) == max_bytes:
            data = data[: utf8_boundary(data)]
        return data, offset + len(data)

    # -- stop

    def stop(self, job_id, grace_s=STOP_GRACE_S):
        """TERM to the job's process group, KILL after the grace period. Returns at once."""
        job_dir = self.job_dir(job_id)
        job = self.describe(job_id)
        if job["process_state"] not in ("running", "starting"):
            return job
        run = read_json(os.path.join(job_dir, "run.json"))
        if not os.path.exists(os.path.join(job_dir, "stop.json")):
            write_json(os.path.join(job_dir, "stop.json"), {"requested_at": time.time(), "grace_s": grace_s})
        if run is None:
            return self.describe(job_id)
        pgid = run["pgid"]
        try:
            os.killpg(pgid, signal.SIGTERM)
        except ProcessLookupError:
            pass
        threading.Thread(target=self._kill_after, args=(job_id, run, grace_s), daemon=True).start()
        return self.describe(job_id)

    def _kill_after(self, job_id, run, grace_s):
        job_dir = self.job_dir(job_id)
        deadline = time.monotonic() + grace_s
        while time.monotonic() < deadline:
            if os.path.exists(os.path.join(job_dir, "exit.json")):
                return
            time.sleep(0.1)
        if is_same_process(run["supervisor_pid"], run["supervisor_start_ticks"], run["boot_id"]):
            try:
                os.killpg(run["pgid"], signal.SIGKILL)
            except ProcessLookupError:
                pass
        # KILL reaches the supervisor too: record the end ourselves when it could not.
        for _ in range(50):
            if os.path.exists(os.path.join(job_dir, "exit.json")):
                return
            if not is_same_process(run["supervisor_pid"], run["supervisor_start_ticks"], run["boot_id"]):
                break
            time.sleep(0.1)
        if not os.path.exists(os.path.join(job_dir, "exit.json")):
            write_json(
                os.path.join(job_dir, "exit.json"),
                {"exit_code": None, "signal": signal.SIGKILL, "ended_at": time.time(), "killed_after_grace": True},
            )


def _process_state(job_dir, spec, run, end, stop):
    if end is not None:
        if stop is not None and (end.get("signal") or end.get("exit_code") != 0):
            return "stopped"
        if end.get("error"):
            return "failed"
        return "succeeded" if end.get("exit_code") == 0 else "failed"
    if run is None:
        # Submitted but the supervisor has not written run.json: starting, unless long ago.
        if time.time() - (spec.get("submitted_at") or 0) < 30:
            return "starting"
        return "lost"
    if is_same_process(run.get("supervisor_pid"), run.get("supervisor_start_ticks"), run.get("boot_id")):
        return "running"
    # The supervisor is gone without writing exit.json: killed, or the host rebooted. Look
    # once more, since it may have written exit.json between our two reads.
    end = read_json(os.path.join(job_dir, "exit.json"))
    return "lost" if end is None else _process_state(job_dir, spec, run, end, stop)


# ---------------------------------------------------------------- the supervisor


def supervise(job_dir):
    """Run the job of job_dir to its end and record how it ended. Called as `agent supervise DIR`.

    Forks once so that the caller (the daemon) can reap us at once; the child leads a new
    session, which makes its pid the job's process group id.
    """
    # Secret variables come on stdin (the launcher writes them and waits for us): read them
    # before the fork, keep them in memory only.
    received = b""
    try:
        while not os.isatty(0):
            chunk = os.read(0, 65536)
            if not chunk:
                break
            received += chunk
        secret_env = json.loads(received.decode() or "{}")
    except (OSError, ValueError):
        secret_env = {}
    if os.fork() > 0:
        os._exit(0)
    os.setsid()
    # TERM and HUP go to the whole group on stop; the supervisor stays to record the exit.
    # A Python-level handler (not SIG_IGN) is reset by exec, so the job gets the default.
    signal.signal(signal.SIGTERM, lambda *_: None)
    signal.signal(signal.SIGHUP, lambda *_: None)
    spec = read_json(os.path.join(job_dir, "job.json"))
    env = dict(os.environ)
    for key in ("PYTHONPATH",):
        env.pop(key, None)
    env.update(spec.get("env") or {})
    env.update(secret_env if isinstance(secret_env, dict) else {})
    env["SPECDECK_JOB_DIR"] = job_dir
    env["SPECDECK_JOB_ID"] = spec["id"]
    env.setdefault("PYTHONUNBUFFERED", "1")
    log = open(os.path.join(job_dir, "output.log"), "ab", buffering=0)
    me = os.getpid()
    run = {
        "supervisor_pid": me,
        "supervisor_start_ticks": process_start_ticks(me),
        "pgid": os.getpgid(0),
        "boot_id": boot_id(),
        "started_at": time.time(),
        "pid": None,
        "start_ticks": None,
    }
    try:
        process = subprocess.Popen(
            spec["argv"], cwd=spec["cwd"], env=env, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, close_fds=True
        )
    except OSError as exc:
        write_json(os.path.join(job_dir, "run.json"), run)
        log.write(("specdeck: could not start %s: %s\n" % (spec["argv"][0], exc.strerror or exc)).encode())
        write_json(
            os.path.join(job_dir, "exit.json"),
            {"exit_code": 127, "signal": None, "ended_at": time.time(), "error": "could not start: %s" % (exc.strerror or exc)},
        )
        os._exit(0)
    run.update(pid=process.pid, start_ticks=process_start_ticks(process.pid))
    write_json(os.path.join(job_dir, "run.json"), run)
    while True:
        try:
            code = process.wait()
            break
        except InterruptedError:  # pragma: no cover - PEP 475 retries for us
            continue
    end = {"exit_code": code if code >= 0 else None, "signal": -code if code < 0 else None, "ended_at": time.time()}
    write_json(os.path.join(job_dir, "exit.json"), end)
    os._exit(0)


__all__ = ["JobStore", "RemoteError", "supervise", "login_path", "resolve_executable"]
