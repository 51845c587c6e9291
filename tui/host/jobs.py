"""The console's copy of the host's jobs, kept by the `jobs.events` stream: one subscription
for the whole console (the app's), applied here, read by every pane. No pane polls.

A frame is `{snapshot: [job...], records: [...]}` (a new subscriber, or one that missed
records) or `{records: [{event, id, job}]}`; `apply()` returns the ids it changed and the
records, so a pane can redraw only what moved and announce what ended. Each job is a
JobRecord: the job as the host described it and when that came (a job unchanged by a snapshot
keeps its record, so its age says how long the host has told nothing new of it).
"""

from .records import JobRecord


class JobBook:
    def __init__(self):
        self.jobs = {}  # id -> JobRecord: the job as `jobs.get` describes it, and when it came
        self.loaded = False  # a snapshot has arrived
        self.first_ids = None  # the ids of the first snapshot: jobs older than this console

    def apply(self, data):
        """Apply one frame; return (changed ids, records)."""
        changed = set()
        snapshot = data.get("snapshot")
        if snapshot is not None:
            fresh = {job["id"]: job for job in snapshot}
            changed |= set(self.jobs) ^ set(fresh)
            changed |= {job_id for job_id, job in fresh.items() if job_id in self.jobs and self.jobs[job_id].job != job}
            self.jobs = {job_id: self.jobs[job_id] if job_id not in changed else JobRecord(job) for job_id, job in fresh.items()}
            if self.first_ids is None:
                self.first_ids = set(fresh)
            self.loaded = True
        records = data.get("records") or []
        for record in records:
            job_id = record.get("id")
            if record.get("event") == "removed":
                self.jobs.pop(job_id, None)
            elif record.get("job") is not None:
                self.jobs[job_id] = JobRecord(record["job"])
            changed.add(job_id)
        return changed, records

    def job(self, job_id):
        """The job as the host last described it, or None."""
        record = self.jobs.get(job_id)
        return None if record is None else record.job

    def of_kind(self, kind):
        """Jobs of one kind, oldest first."""
        return [job for job in self.ordered() if job.get("kind") == kind]

    def ordered(self):
        """Every job, oldest first (ids are j1, j2, ... in submit order)."""
        return [record.job for record in sorted(self.jobs.values(), key=lambda record: _number(record.id))]

    def is_old(self, job_id):
        """True for a job that existed before this console first heard from the host."""
        return self.first_ids is not None and job_id in self.first_ids


def _number(job_id):
    try:
        return int(job_id[1:])
    except (TypeError, ValueError):
        return 0
