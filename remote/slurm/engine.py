"""Slurm as a job engine (remote/jobs/engines.py): a job submitted with `engine: slurm`
is written as a batch script and handed to `sbatch --parsable`; from then on Slurm is the
truth about it, and the job stays ours (`j12`, its directory, its log, its events).

A job directory of a Slurm job holds, beside job.json:
  slurm.sh     the batch script: `exec` of the job's argv, every argument shlex-quoted (the
               job's command never passes through a shell as a string)
  output.log   Slurm's output file for the job (`--output`, `--open-mode=append`), followed as
               the job's log by byte offset, as any job's: it survives the daemon's restart
  engine.json  the record (record.py): Slurm's id, script and output paths, partition, nodes, Slurm's
               state and pending reason, exit code and signal, when a stop's KILL went out;
               rewritten by the watcher (watcher.py) whenever Slurm says something new
  stop.json    a stop was asked for: TERM went out at once (`scancel --signal=TERM --full`),
               and the watcher sends KILL (`scancel --signal=KILL --full`, then `scancel`)
               once the grace is over, the way a supervisor does for a local job

The user's other Slurm jobs (from the same squeue) are listed beside ours with ids `s<Slurm
id>` and `foreign: true`: their output file (scontrol's StdOut) can be followed and they can be
stopped the same way.
"""

import os
import shlex
import threading
import time

from ..jobs import engines as job_engines
from ..core.protocol import BadRequest, NotFound
from ..core.records import read_json
from . import commands
from .record import job_fields, row_record, sacct_row

ENGINE = "slurm"
FOREIGN_PREFIX = "s"
FOREIGN_FRESH_S = 2.0  # a listing asks squeue again when the watcher's rows are older than this
NODE_ADDRESS_KEPT_S = 300.0  # a node's address is asked of scontrol once in this long
OPTION_TYPES = {"nodes": int, "gpus_per_node": int, "partition": str, "time": str, "account": str, "sbatch_args": list}


def batch_script(job_id, argv):
    """The batch script of a job: its argv, each argument quoted; `exec`, so that the job's exit
    code and signal are the command's own."""
    return "#!/bin/sh\n# specdeck job %s: the job's command, every argument quoted.\nexec %s\n" % (job_id, " ".join(shlex.quote(a) for a in argv))


def sbatch_argv(spec, options, script, output):
    argv = ["sbatch", "--parsable", "--job-name", spec["name"][:64] or spec["id"], "--output", output.replace("%", "%%"), "--open-mode=append",
            "--chdir", spec["cwd"]]
    if options.get("nodes"):
        argv += ["--nodes", str(options["nodes"])]
    if options.get("gpus_per_node"):
        argv += ["--gpus-per-node", str(options["gpus_per_node"])]
    for name in ("partition", "time", "account"):
        if options.get(name):
            argv += ["--%s" % name, options[name]]
    return argv + list(options.get("sbatch_args") or []) + [script]


class SlurmEngine(job_engines.JobEngine):
    name = ENGINE

    def __init__(self):
        self._lock = threading.Lock()  # one squeue at a time, whoever asks (the watcher, a listing)
        self.rows = {}  # Slurm id -> squeue row, of the last poll
        self.ambiguous = set()  # Slurm ids whose rows the last poll could not trust
        self.rows_at = 0.0  # monotonic time of the last poll; 0: never
        self.refused_at = 0.0  # monotonic time Slurm last failed to answer a listing's poll
        self.ours = {}  # Slurm id -> our job id, of every Slurm job with a directory
        self.store = None  # the daemon's JobStore, from the watcher's start
        self.foreign_output = {}  # Slurm id -> its StdOut path (asked of scontrol once)
        self.foreign_kills = {}  # Slurm id -> monotonic time its KILL is due
        self.polls = 0
        self.queue_format = "json"  # how squeue is read: json, else marker (a Slurm without JSON, or too large an answer)
        self.wake = lambda: None  # the watcher's: look at Slurm now (set by its start)
        self.woken = False  # a submit or stop since the watcher's last poll
        self.node_addresses = {}  # node name -> (address, monotonic time asked)

    # -- submit

    def check_options(self, options):
        options = dict(options or {})
        for name, value in options.items():
            kind = OPTION_TYPES.get(name)
            if kind is None:
                raise BadRequest("unknown Slurm option %r (known: %s)" % (name, ", ".join(sorted(OPTION_TYPES))))
            if value is None:
                continue
            if not isinstance(value, kind) or isinstance(value, bool):
                raise BadRequest("the Slurm option %s must be %s" % (name, {int: "a whole number", str: "a string", list: "a list of strings"}[kind]))
            if kind is int and value < 1:
                raise BadRequest("the Slurm option %s must be at least 1" % name)
            if kind is str and (not value or "\0" in value):
                raise BadRequest("the Slurm option %s must be a non-empty string" % name)
            if kind is list and not all(isinstance(a, str) and a and "\0" not in a for a in value):
                raise BadRequest("sbatch_args must be a list of non-empty strings")
        return options

    def submit(self, job_dir, spec, environment, options):
        # What a local job is told (remote/jobs/supervisor.py), so a job reads the same under Slurm
        # (sbatch exports the submitting environment to the job).
        env = dict(environment, SPECDECK_JOB_DIR=job_dir, SPECDECK_JOB_ID=spec["id"])
        script = os.path.join(job_dir, "slurm.sh")
        output = os.path.join(job_dir, "output.log")
        with open(script, "w") as f:
            f.write(batch_script(spec["id"], spec["argv"]))
        os.chmod(script, 0o700)
        try:
            stdout, _, _ = commands.run(sbatch_argv(spec, options, script, output), env=env)
        except commands.SlurmError as refused:
            # A refusal of this job (Slurm's reason), or no working Slurm at all: ask the controller.
            _, errors, code = commands.run(["scontrol", "ping"], env=env, check=False)
            if code != 0:
                raise commands.NoSlurm("Slurm does not work on this host: %s" % (commands.slurm_words(errors) if errors.strip() else refused.message))
            raise
        slurm_id = stdout.strip().splitlines()[-1].split(";")[0].strip() if stdout.strip() else ""
        if not slurm_id:
            raise commands.SlurmError("sbatch said nothing about the job it took (no job id)")
        with self._lock:
            self.ours[slurm_id] = spec["id"]
        self.woken = True
        self.wake()
        return {
            "slurm_id": slurm_id,
            "script": script,
            "output": output,
            "options": options,
            "state": "PENDING",
            "reason": None,
            "nodelist": "",
            "partition": options.get("partition"),
            "exit_code": None,
            "signal": None,
            "started_at": None,
            "ended_at": None,
            "submitted_at": time.time(),
        }

    # -- describe and stop (ours)

    def describe(self, job_dir, spec, record, job):
        stop = read_json(os.path.join(job_dir, "stop.json"))
        job.update(job_fields(record, stop if isinstance(stop, dict) else None))
        job["foreign"] = False

    def stop(self, job_dir, job, grace_s):
        slurm_id = job["slurm_id"]
        if job["process_state"] == "starting":
            commands.run(["scancel", slurm_id])  # nothing runs yet: out of the queue
        else:
            commands.run(["scancel", "--signal=TERM", "--full", slurm_id])
        self.woken = True
        self.wake()

    # -- the user's other Slurm jobs

    def claims(self, job_id):
        return job_id.startswith(FOREIGN_PREFIX) and job_id[len(FOREIGN_PREFIX):].replace("_", "").isdigit()

    def foreign_rows(self, fresh=True):
        # A host without a working Slurm is not asked again by every listing (each `jobs` would
        # pay for squeue's failure): at most once in FOREIGN_FRESH_S, as a working one.
        if fresh and time.monotonic() - max(self.rows_at, self.refused_at) > FOREIGN_FRESH_S:
            try:
                self.poll()
            except (commands.NoSlurm, commands.SlurmError):
                self.refused_at = time.monotonic()
                return {}
        with self._lock:
            return {slurm_id: row for slurm_id, row in self.rows.items() if slurm_id not in self.ours}

    def foreign_jobs(self, fresh=False):
        if self.store is None:
            return []  # the watcher has not read our own jobs yet: ours would look foreign
        return [self._foreign_description(row) for row in self.foreign_rows(fresh).values()]

    def _foreign_description(self, row):
        record = row_record(row)
        slurm_id = record["slurm_id"]
        job = {
            "id": FOREIGN_PREFIX + slurm_id,
            "name": record.get("name"),
            "kind": "slurm",
            "argv": None,
            "cwd": None,
            "submitted_at": record.get("submitted_at"),
            "pid": None,
            "log_bytes": _size(self.foreign_output.get(slurm_id)),
            "error": None,
            "meta": {},
            "engine": ENGINE,
            "foreign": True,
        }
        job.update(job_fields(record))
        job["slurm"]["output"] = self.foreign_output.get(slurm_id)
        return job

    def foreign_job(self, job_id):
        slurm_id = job_id[len(FOREIGN_PREFIX):]
        row = self.foreign_rows().get(slurm_id)
        return None if row is None else self._foreign_description(row)

    def foreign_log_path(self, job_id):
        slurm_id = job_id[len(FOREIGN_PREFIX):]
        path = self.foreign_output.get(slurm_id)
        if path is None:
            if slurm_id not in self.foreign_rows():
                raise NotFound("no job %s on this host" % job_id)
            stdout, _, _ = commands.run(["scontrol", "show", "job", "-o", slurm_id])
            fields = commands.parse_show_job(stdout)
            if slurm_id not in (fields.get("JobId"), "%s_%s" % (fields.get("ArrayJobId"), fields.get("ArrayTaskId"))):
                raise NotFound("Slurm's answer about job %s is not one job's (its name or paths hold Slurm's own fields)" % slurm_id)
            path = commands.show_job_path(stdout, "StdOut")
            if not path:
                raise NotFound("Slurm names no output file for job %s that can be told from its other fields" % slurm_id)
            self.foreign_output[slurm_id] = path
        return path

    def stop_foreign(self, job_id, grace_s):
        slurm_id = job_id[len(FOREIGN_PREFIX):]
        job = self.foreign_job(job_id)
        if job is None:
            raise NotFound("no job %s on this host" % job_id)
        if job["process_state"] == "starting":
            commands.run(["scancel", slurm_id])
        elif job["process_state"] == "running":
            commands.run(["scancel", "--signal=TERM", "--full", slurm_id])
            with self._lock:
                self.foreign_kills[slurm_id] = time.monotonic() + grace_s
        job = self.foreign_job(job_id) or job
        if job["process_state"] == "running":
            job["state"] = "stopping"
        return job

    # -- where a node is

    def node_address(self, node):
        """The address this login node reaches `node` at, as Slurm has it: its NodeAddr (else
        its NodeHostname, else the name itself, which a cluster's DNS resolves), for whatever
        a job serves there (an inference server) to be reached from here. Asked of `scontrol
        show node` once per node and kept NODE_ADDRESS_KEPT_S; SlurmError/NoSlurm in one line
        when Slurm cannot say."""
        with self._lock:
            known = self.node_addresses.get(node)
        if known is not None and time.monotonic() - known[1] < NODE_ADDRESS_KEPT_S:
            return known[0]
        stdout, _, _ = commands.run(["scontrol", "show", "node", "-o", node])
        fields = commands.parse_show_job(stdout)
        address = next((fields[key] for key in ("NodeAddr", "NodeHostname") if fields.get(key) not in (None, "", "(null)")), node)
        with self._lock:
            self.node_addresses[node] = (address, time.monotonic())
        return address

    # -- asking Slurm

    def poll(self):
        """One squeue for all of the user's jobs; returns the rows by Slurm id."""
        import getpass

        user = getpass.getuser()
        rows = None
        if self.queue_format == "json":
            try:
                stdout, _, _ = commands.run(commands.queue_json_argv(user))
                rows, ambiguous = commands.parse_queue_json(stdout, user)
            except (commands.SlurmError, ValueError):
                rows = None  # no JSON here, or too much of it: the marked rows say the same
        if rows is None:
            marker = commands.queue_marker()
            stdout, _, _ = commands.run(commands.queue_argv(user, marker))
            rows, ambiguous = commands.parse_queue(stdout, marker)
            if self.queue_format == "json":
                self.queue_format = "marker"
        with self._lock:
            # A job whose row cannot be trusted this time keeps its last row (foreign jobs) and
            # its record (ours: the watcher leaves it, and asks no other command either).
            rows.update((slurm_id, self.rows[slurm_id]) for slurm_id in ambiguous if slurm_id in self.rows)
            self.rows, self.rows_at, self.ambiguous = rows, time.monotonic(), ambiguous
            self.polls += 1
        return rows

    def ask_ended(self, slurm_id):
        """How an ended job that squeue no longer lists ended: scontrol while Slurm keeps it,
        else the job completion log (`sacct -c`), else accounting (`sacct`); None when none knows."""
        try:
            stdout, _, code = commands.run(["scontrol", "show", "job", "-o", slurm_id], check=False)
        except commands.SlurmError:
            code = 1
        if code == 0 and stdout.strip():
            fields = commands.parse_show_job(stdout)  # keys a job's own text repeats are left out
            state = fields.get("JobState") or ""
            if fields.get("JobId") == slurm_id and commands.STATE.fullmatch(state):
                exit_code, sig = commands.parse_exit(fields.get("ExitCode"))
                return {"state": state, "nodelist": fields.get("NodeList", ""), "exit_code": exit_code, "signal": sig,
                        "ended_at": commands.slurm_time(fields.get("EndTime")), "reason": fields.get("Reason")}
        for extra in (["-c"], []):
            try:
                stdout, _, code = commands.run(["sacct"] + extra + ["--noheader", "--parsable2", "--allocations", "--jobs", slurm_id,
                                                                     "--format", "JobID,State,ExitCode,NodeList,End"], check=False)
            except commands.SlurmError:
                continue
            if code == 0:
                found = sacct_row(stdout, slurm_id)
                if found is not None:
                    return found
        return None


def _size(path):
    try:
        return os.path.getsize(path) if path else 0
    except OSError:
        return 0
