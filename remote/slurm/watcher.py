"""The daemon's watch over Slurm (service `slurm-jobs`): one `squeue` for all of the user's jobs
per poll, whatever their number, never one per job; `scontrol show job` (then `sacct -c`, then
`sacct`) only for a job of ours that left squeue before its end was seen, once per job.

How often: 1 s after anything changed, a job was submitted or stopped (the engine wakes the
service), every 0.5 s for the first 10 s of a job of ours (20 calls of ~20 ms), then twice as long after each poll that found nothing new, up to 15 s while
a job of ours is pending or running and 30 s while none is (the user's other jobs are still
listed, and a listing a person asks for, jobs.list, asks squeue itself when the last rows are
older than 2 s; a service that lists jobs every second gets the last rows). A controller
that serves a whole cluster answers a user's squeue in milliseconds; one such call every 15 s
for a hundred quiet jobs is less than one person typing `squeue --me` now and then. While a
stop's grace runs out it looks every second, to send the KILL on time. A host with no Slurm
on the login PATH costs a PATH lookup a minute.

What it learns goes into each job's engine.json; the job watcher (`job-events`) sees the file
change and publishes the job on the `jobs` topic, as for any job. The user's other Slurm jobs
have no directory: their changes are published on the same topic from here.
"""

import logging
import os
import shutil
import time

from ..jobs import engines as job_engines
from ..core.records import read_json
from ..core.services import Service
from . import commands
from .record import PENDING, RUNNING, final, read_record, row_record, write_record

log = logging.getLogger("specdeck.slurm")

MIN_INTERVAL_S = 1.0
LIVE_MAX_INTERVAL_S = 15.0
IDLE_MAX_INTERVAL_S = 30.0
NO_SLURM_INTERVAL_S = 60.0
STOP_INTERVAL_S = 1.0
YOUNG_S = 10.0  # a job of ours submitted this recently is looked at every YOUNG_INTERVAL_S
YOUNG_INTERVAL_S = 0.5  # where there is room Slurm starts a job within a second or two: say so at once
FORGOTTEN_AFTER_S = 30.0  # a job of ours that no Slurm command knows, this long after its submit, is lost
ROW_KEYS = ("state", "reason", "nodelist", "partition", "exit_code", "signal", "started_at", "ended_at")


class SlurmWatcher(Service):
    name = "slurm-jobs"
    interval_s = MIN_INTERVAL_S

    def __init__(self, daemon):
        self.daemon = daemon
        self.engine = job_engines.get("slurm")  # registered by methods.py, which names this service
        self._ended = set()  # our Slurm job ids known to have ended (not read again)
        self._other = set()  # job ids of jobs that are not Slurm's
        self._foreign = {}  # foreign id -> its last description
        self.available = None
        self.last_error = None

    def start(self):
        self.engine.store = self.daemon.jobs
        self.engine.wake = lambda: self.daemon.services.wake(self.name)

    def detail(self):
        return {"polls": self.engine.polls, "interval_s": self.interval_s, "slurm": self.available, "foreign": len(self._foreign),
                "squeue": self.engine.queue_format,
                "error": self.last_error}

    def _our_live_jobs(self):
        store, live = self.daemon.jobs, {}
        for job_id in store.ids():
            if job_id in self._ended or job_id in self._other:
                continue
            job_dir = os.path.join(store.root, job_id)
            spec = read_json(os.path.join(job_dir, "job.json"))
            if not isinstance(spec, dict):
                continue  # being created this instant
            if spec.get("engine") != "slurm":
                self._other.add(job_id)
                continue
            record = read_record(job_dir)
            if record is None or not record.get("slurm_id"):
                continue
            self.engine.ours[str(record["slurm_id"])] = job_id
            if final(record):
                self._ended.add(job_id)
            else:
                live[job_id] = (job_dir, spec, record)
        return live

    def step(self):
        environment = commands.environment()
        if not shutil.which("squeue", path=environment.get("PATH")):
            self.available, self.interval_s = False, NO_SLURM_INTERVAL_S
            return
        self.available = True
        woken, self.engine.woken = self.engine.woken, False
        live = self._our_live_jobs()
        # A job just submitted starts within seconds where there is room: look every second meanwhile.
        young = any(time.time() - (record.get("submitted_at") or 0) < YOUNG_S for _, _, record in live.values())
        try:
            rows = self.engine.poll()
        except (commands.SlurmError, commands.NoSlurm) as exc:
            # Slurm's commands without a controller that answers (a client installed, no cluster; a
            # controller down): said in detail() and asked again later, never a failure of the
            # service (whose restarts a report counts).
            self.available, self.last_error = False, exc.message
            self.interval_s = min(max(self.interval_s * 2, MIN_INTERVAL_S), LIVE_MAX_INTERVAL_S if live else NO_SLURM_INTERVAL_S)
            return
        self.last_error = None
        changed, stopping = False, False
        for job_id, (job_dir, spec, record) in live.items():
            new = self._update(record, rows.get(str(record["slurm_id"])))
            stop = read_json(os.path.join(job_dir, "stop.json"))
            if isinstance(stop, dict) and not final(new) and new["state"] in RUNNING and not new.get("kill_sent_at"):
                stopping = True
                if time.time() >= (stop.get("requested_at") or 0) + (stop.get("grace_s") or 0):
                    self._kill(new["slurm_id"])
                    new["kill_sent_at"] = time.time()
                    log.info("job %s: Slurm job %s still running after the stop's grace: KILL", job_id, new["slurm_id"])
            if new != record:
                write_record(job_dir, new)
                changed = True
            if final(new):
                self._ended.add(job_id)
        changed |= self._kill_foreign_due()
        changed |= self._publish_foreign()
        if changed:
            self.daemon.services.wake("job-events")
        if stopping or self.engine.foreign_kills:
            self.interval_s = STOP_INTERVAL_S
        elif young:
            self.interval_s = YOUNG_INTERVAL_S
        elif changed or woken:
            self.interval_s = MIN_INTERVAL_S
        else:
            self.interval_s = min(self.interval_s * 2, LIVE_MAX_INTERVAL_S if live else IDLE_MAX_INTERVAL_S)

    def _update(self, record, row):
        new = dict(record)
        if row is not None:
            fresh = row_record(row)
            new.update((key, fresh[key]) for key in ROW_KEYS)
            return new
        if str(record["slurm_id"]) in self.engine.ambiguous:
            return new  # listed, in a row that cannot be trusted this time: as it was
        # squeue no longer lists it: Slurm forgot it (MinJobAge) before we saw its end.
        ended = self.engine.ask_ended(str(record["slurm_id"]))
        if ended is not None:
            new.update((key, value) for key, value in ended.items() if value is not None or key in ("exit_code", "signal"))
            if not final(new):  # scontrol still has it live while squeue does not: next poll
                return new
        elif time.time() - (record.get("submitted_at") or 0) > FORGOTTEN_AFTER_S:
            new["state"] = "LOST"
            new["reason"] = "no Slurm command knows this job any more (no accounting, and it ended more than MinJobAge ago)"
        return new

    def _kill(self, slurm_id):
        for argv in (["scancel", "--signal=KILL", "--full", slurm_id], ["scancel", slurm_id]):
            try:
                commands.run(argv, check=False)
            except commands.SlurmError as exc:
                log.warning("Slurm job %s: %s: %s", slurm_id, " ".join(argv), exc)

    def _kill_foreign_due(self):
        due = [slurm_id for slurm_id, at in list(self.engine.foreign_kills.items()) if time.monotonic() >= at]
        for slurm_id in due:
            row = self.engine.rows.get(slurm_id)
            if row is not None and row_record(row)["state"] in RUNNING:
                self._kill(slurm_id)
            self.engine.foreign_kills.pop(slurm_id, None)
        return bool(due)

    def _publish_foreign(self):
        """Job events for the user's other Slurm jobs, as the job watcher gives them for ours."""
        topic = self.daemon.topics["jobs"]
        now = {job["id"]: job for job in (self.engine._foreign_description(row) for row in self.engine.foreign_rows(fresh=False).values())}
        changed = False
        for job_id, job in now.items():
            old = self._foreign.get(job_id)
            if old is None:
                events = ["submitted"] if job["process_state"] in ("starting", "running") else ["submitted", "ended"]
            elif old["process_state"] in ("starting", "running") and job["process_state"] not in ("starting", "running"):
                events = ["ended"]
            elif old["process_state"] == "starting" and job["process_state"] == "running":
                events = ["started"]
            elif any(old.get(k) != job.get(k) for k in ("state", "pending_reason", "nodes", "exit_code", "signal")):
                events = ["changed"]
            else:
                events = []
            for event in events:
                topic.publish({"event": event, "id": job_id, "job": job})
            changed |= bool(events)
        for job_id in set(self._foreign) - set(now):
            topic.publish({"event": "removed", "id": job_id})
            changed = True
        self._foreign = now
        return changed


__all__ = ["SlurmWatcher", "PENDING", "RUNNING"]
