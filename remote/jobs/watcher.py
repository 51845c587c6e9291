"""The two streams about jobs: one job's log (seq = byte offset in output.log), and the job
events of the whole host (submitted, started, progress, ended, removed), published by the job
watcher, a daemon service that looks at the job directories twice a second, so that consoles
subscribe once instead of polling `jobs.list`."""

import logging
import time

from ..core.protocol import NotFound
from ..core.services import Service
from ..core.streams import Batch, Source
from ..core.words import LIVE_STATES

log = logging.getLogger("specdeck.jobs")

LOG_CHUNK_BYTES = 65536
LOG_POLL_S = 0.1


class LogSource(Source):
    """A job's log, in whole lines, and an unfinished last line as it grows when no whole line
    is waiting (a progress bar redrawn with \\r); once the job has ended and the log is read to
    its end, the stream ends with the job's description."""

    gather_s = 0.05  # a chatty log goes out as ~20 frames a second, not one per line

    def __init__(self, jobs, job_id):
        self.jobs = jobs
        self.job_id = job_id

    def first_seq(self, after):
        if after is None:
            return 0
        if after < 0:  # the last -after bytes, from a line boundary (looked for in the first 64 KiB)
            return self.jobs.tail(self.job_id, after, LOG_CHUNK_BYTES)["offset"]
        return after

    def read(self, after):
        data, next_offset = self.jobs.read_lines_from(self.job_id, after, LOG_CHUNK_BYTES, partial=True)
        if not data:
            # Only a quiet log makes us look at the process: a busy one is read, not described.
            if self.jobs.describe(self.job_id)["process_state"] in LIVE_STATES:
                return Batch(None, after)
            data, next_offset = self.jobs.read_lines_from(self.job_id, after, LOG_CHUNK_BYTES, final=True)
            if not data:
                return Batch({"job": self.jobs.describe(self.job_id)}, after, ended=True)
        batch = Batch({"offset": after, "text": data.decode("utf-8", "replace")}, next_offset)
        batch.more = len(data) >= LOG_CHUNK_BYTES
        return batch

    def wait(self, after, timeout_s):
        time.sleep(min(timeout_s, LOG_POLL_S))


class JobWatcher(Service):
    """Publishes a record to the `jobs` topic whenever a job changes:
    `{event: submitted|started|progress|ended|changed|removed, id, job}` (`job` is the job as
    `jobs.get` describes it; absent for `removed`).

    Every job that appears after the baseline is announced, whatever fails meanwhile: a job
    that cannot be described (a record hand-edited into something else) is named in the
    service's status and tried again at each scan, without stopping the others' events; and a
    restart after a failed step keeps what was known, so the first scan after it announces
    what came meanwhile (taking it in as a new baseline would hide it from every console
    already open, whose list only ever grows by these records)."""

    name = "job-events"
    interval_s = 0.5

    def __init__(self, jobs, topic):
        self.jobs = jobs
        self.topic = topic
        self._known = {}  # id -> (signature, description)
        self._baselined = False
        self._unreadable = {}  # id -> why describing it failed, at the last scan

    def start(self):
        # What exists when the daemon starts is the baseline; a new subscriber gets it as a snapshot.
        if not self._baselined:
            self._known = {}
            self._scan(publish=False)
            self._baselined = True

    def step(self):
        self._scan(publish=True)

    def detail(self):
        detail = {"jobs": len(self._known), "last_seq": self.topic.last_seq}
        if self._unreadable:
            detail["unreadable"] = dict(self._unreadable)
        return detail

    def _scan(self, publish):
        seen = set()
        for job_id in self.jobs.ids():
            seen.add(job_id)
            signature = self.jobs.signature(job_id)
            old = self._known.get(job_id)
            # A live job can turn `lost` without touching a file (its supervisor killed): look again;
            # not one an engine runs (Slurm), which changes only through its engine.json.
            if old is not None and old[0] == signature and (old[1]["process_state"] not in LIVE_STATES or old[1].get("engine", "local") != "local"):
                continue
            try:
                job = self.jobs.describe(job_id)
            except NotFound as exc:
                if getattr(exc, "damaged", False):
                    self._note_unreadable(job_id, exc)
                continue  # being created this instant (next scan), or damaged (named in the status)
            except Exception as exc:
                self._note_unreadable(job_id, exc)
                continue  # kept as it was known (not removed), described again next scan
            self._unreadable.pop(job_id, None)
            self._known[job_id] = (signature, job)
            if publish:
                for event in _events(old[1] if old else None, job):
                    self.topic.publish({"event": event, "id": job_id, "job": job})
        for job_id in set(self._unreadable) - seen:
            del self._unreadable[job_id]
        for job_id in set(self._known) - seen:
            del self._known[job_id]
            if publish:
                self.topic.publish({"event": "removed", "id": job_id})

    def _note_unreadable(self, job_id, exc):
        why = "%s: %s" % (type(exc).__name__, exc)
        if self._unreadable.get(job_id) != why:  # once per job and reason, not twice a second
            log.warning("job %s cannot be described (%s); its events wait until it can", job_id, why, exc_info=True)
        self._unreadable[job_id] = why


def _events(old, new):
    """The names of what happened between two descriptions of a job (none when nothing a
    console shows changed). A job that ended between two scans (one that fails at once) is
    both submitted and ended: whoever acts on ends (alerts, notifications) must see it."""
    if old is None:
        return ["submitted"] if new["process_state"] in LIVE_STATES else ["submitted", "ended"]
    if old["process_state"] in LIVE_STATES and new["process_state"] not in LIVE_STATES:
        return ["ended"]
    if old["process_state"] == "starting" and new["process_state"] == "running":
        return ["started"]
    if old.get("progress") != new.get("progress"):
        return ["progress"]
    keys = ("state", "exit_code", "signal", "ended_at", "pid", "meta", "name", "error")
    if any(old.get(k) != new.get(k) for k in keys):
        return ["changed"]
    return []
