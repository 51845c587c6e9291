"""Waiting for a host job by following the host's `jobs.events` stream, as `logs --follow`
follows a log: no `jobs.get` in a loop. The stream opens with a snapshot of every job (so a
change made before the subscription is never missed) and resumes from its last sequence number
after a dropped link, when the client reconnects."""

import queue

from remote.core.protocol import NotFound

from ..transport.client import ConnectError
from . import model

CHECK_S = 0.5  # how often a wait looks at the link's state (a failed link ends it)


def wait_for_event(client, done):
    """Block until the event `done` is set; a link that failed for good (a changed host key:
    reconnecting cannot help) raises ConnectError."""
    while not done.wait(CHECK_S):
        check_link(client)


def check_link(client):
    if client.state == "failed":
        raise ConnectError(client.state_detail.get("error") or "the connection failed")


def follow_job(client, job, until=None, on_change=None):
    """Follow `job` (as the host described it) until `until(job)` holds (default: it has ended);
    `on_change(job)` runs on the calling thread for each new description. Returns the job as it
    was then. A job forgotten meanwhile raises NotFound, as `jobs.get` would."""
    until = until or (lambda described: not model.is_live(described))
    job_id = job["id"]
    if until(job):
        return job
    changes = queue.Queue()

    def on_data(data, seq):
        if data.get("snapshot") is not None:
            changes.put(next((d for d in data["snapshot"] if d.get("id") == job_id), None))
        for record in data.get("records") or ():
            if record.get("id") == job_id:
                changes.put(None if record.get("event") == "removed" else record.get("job"))

    def on_end(data):
        changes.put(("end", data.get("error") or "the host ended the job events stream"))

    subscription = client.subscribe("jobs.events", {}, on_data, on_end)
    try:
        while True:
            try:
                described = changes.get(timeout=CHECK_S)
            except queue.Empty:
                check_link(client)
                continue
            if isinstance(described, tuple):
                raise ConnectError(described[1])
            if described is None:
                raise NotFound("no job %s on this host" % job_id)
            job = described
            if on_change is not None:
                on_change(job)
            if until(job):
                return job
    finally:
        subscription.cancel()
