"""Stalls: a running job whose progress stopped, told as an alert of its own (category
`stalled`) with its last log lines and what it was doing before, and one follow-up when it moves
again. Read from what the evaluator already follows (no sampler of its own):

- a training run (the `training` topic's step records): no new step for its stall limit, by
  default ten times its median interval between steps, at least MIN_STALL_S (`training_stalled`);
- a data generation (its progress counter, from the `jobs` topic): the same rule (`job_stalled`);
- any other job with a stall limit of its own (`run --stall-after`): no new byte in its log for
  that long (`job_stalled`);
- a download (its progress's bytes, from the `jobs` topic): no byte moved for DOWNLOAD_STALL_S
  while it downloads (`download_stalled`);
- a server (the `serving` topic): requests waiting and no token generated for SERVER_STALL_S
  (`server_stalled`).

A run (training, data generation) that moves again is told so RESUME_HOLD_S later, not at once:
a run that ends meanwhile (a trainer whose last steps come in one burst as it exits) is told once,
by its end: `finished after standing still 8 min`, the stall's follow-up (`end_told`).

`stood_still` reads the same rule over a run's recorded step times (the report's "stood still").

A job's own limit is its meta `stall_after_s` (`train`, `run`, `serve --stall-after`; 0: never);
an attached server's is its entry's. Absence is noticed by `check`, which the evaluator calls on
a clock of its own; its work is one comparison per followed job (and one stat of the log of a
job that has a limit of its own), and at most WATCHED_MAX jobs are followed.
"""

import collections
import os
import time

from ..downloads.output import fmt_gb
from ..core.words import minutes
from .alert import KIND_CATEGORY, label, make_alert
from ..core.words import LIVE_STATES as LIVE

CHECK_EVERY_S = 1.0
MIN_STALL_S = 120.0
MEDIAN_TIMES = 10.0
DOWNLOAD_STALL_S = 300.0
SERVER_STALL_S = 120.0
INTERVALS_KEPT = 50
RESUME_HOLD_S = 5.0  # a run that steps again and ends within this is told once, by its end
RUN_KINDS = ("training", "datagen")
WATCHED_MAX = 2000


def median(values):
    ordered = sorted(values)
    if not ordered:
        return None
    middle = len(ordered) // 2
    return ordered[middle] if len(ordered) % 2 else (ordered[middle - 1] + ordered[middle]) / 2.0


def own_limit(meta):
    """A job's own stall limit from its meta: None (its kind's default), 0 (never) or seconds."""
    value = (meta or {}).get("stall_after_s")
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0:
        return None
    return float(value)


def stood_still(times, own_limit_s=None, until=None):
    """Where a run's steps stood still, by the rule the alerts use (its own limit, else ten
    times the median of its last INTERVALS_KEPT intervals, at least MIN_STALL_S), read from
    its records' times in log order: [{start, length_s, ongoing}]. `until`: the time up to
    which a run still live is looked at (a stall not yet over is `ongoing`; None: the run ended)."""
    found = []
    intervals = collections.deque(maxlen=INTERVALS_KEPT)
    least = own_limit_s if own_limit_s is not None else MIN_STALL_S
    if own_limit_s == 0:
        return found  # never
    latest = None

    def limit():
        if own_limit_s is not None:
            return own_limit_s
        typical = median(intervals)
        return max(MIN_STALL_S, MEDIAN_TIMES * typical) if typical else MIN_STALL_S

    for when in times:
        if latest is not None and when > latest:
            gap = when - latest
            if gap >= least and gap >= limit():  # the median only for a gap that could be a stall
                found.append({"start": latest, "length_s": round(gap, 1), "ongoing": False})
            intervals.append(gap)
        latest = when if latest is None else max(latest, when)
    if until is not None and latest is not None and until - latest >= limit():
        found.append({"start": latest, "length_s": round(until - latest, 1), "ongoing": True})
    return found


class Watch:
    """One job (or server) followed for stalls."""

    __slots__ = ("id", "kind", "job", "limit", "value", "moved_at", "intervals", "before", "rate", "stalled", "resuming")

    def __init__(self, job_id, kind, job, limit):
        self.id, self.kind, self.job, self.limit = job_id, kind, job, limit
        self.value = None  # the counter last seen (step, samples, bytes, log size)
        self.moved_at = None  # when it last moved (None: not yet: a run loading its model is not stalled)
        self.intervals = collections.deque(maxlen=INTERVALS_KEPT)
        self.before = None  # what it was doing, in words, when it last moved
        self.rate = None
        self.stalled = None  # {key, since, kind} while an alert of its stall is open
        self.resuming = None  # {at, detail, held_at}: a run that moved again, told after RESUME_HOLD_S

    def moved(self, value, when, before=None):
        if self.moved_at is not None and when > self.moved_at:
            self.intervals.append(when - self.moved_at)
        self.value, self.moved_at = value, max(when, self.moved_at or when)
        if before is not None:
            self.before = before

    def limit_s(self, default_s=None):
        """This job's limit now: its own, else `default_s`, else ten times its median interval (at least MIN_STALL_S)."""
        if self.limit is not None:
            return self.limit or None
        if default_s is not None:
            return default_s
        typical = median(self.intervals)
        return max(MIN_STALL_S, MEDIAN_TIMES * typical) if typical else MIN_STALL_S


class Stalls:
    def __init__(self, evaluator):
        self.evaluator = evaluator
        self.daemon = evaluator.daemon
        self.host = evaluator.host
        self.watches = {}  # job or server id -> Watch
        self.seeded = False
        self.checked_at = 0.0

    def stalled_since(self, job_id):
        """When the job's open stall began (its alert raised, no move since), else None."""
        watch = self.watches.get(job_id)
        if watch is None or not watch.stalled or watch.resuming:
            return None
        return watch.stalled["since"]

    # -- what moves

    def end_told(self, job, watched):
        """A job that ended: True when its end was told here, once, as its stall's follow-up (a
        run that ended well while stalled, or while its steps again were held), so its own
        `finished` would be the same news a second time; else a held follow-up goes out now."""
        watch = self.watches.get(job.get("id"))
        if watch is None or not watch.stalled:
            return False
        if job.get("process_state") != "succeeded" or watch.kind not in RUN_KINDS:
            if watch.resuming:
                self._resumed(watch, watch.resuming["at"], watch.resuming["detail"])
            return False
        self.watches.pop(job["id"], None)
        stalled = watch.stalled
        ended_at = job.get("ended_at") or time.time()
        still_until = watch.resuming["at"] if watch.resuming else ended_at
        started = job.get("started_at") or job.get("submitted_at") or ended_at
        categories = ["stalled", KIND_CATEGORY[watch.kind], "finished"] if watch.kind in KIND_CATEGORY else ["stalled", "finished"]
        alert = make_alert(stalled["key"] + ":resumed", "resumed", categories, self.host, "%s finished on %s" % (job["id"], self.host),
                           "%s finished after standing still %s (ran %s in all)" % (
                               label(job), minutes(still_until - stalled["since"]), minutes(ended_at - started)),
                           ended_at, job=job, watched=watched)
        alert.update(stalled_since=stalled["since"], stalled_s=round(still_until - stalled["since"], 1))
        self.evaluator.raise_alert(alert)
        return True

    def job_record(self, record):
        job = record.get("job")
        job_id = record.get("id")
        if record.get("event") == "removed" or not job or job.get("process_state") not in LIVE:
            watch = self.watches.pop(job_id, None)
            if watch is not None and watch.stalled and job and job.get("process_state") == "succeeded":
                self._resumed(watch, time.time(), ": it went on and ended well (%s)" % job.get("state"))
            return
        self._job_seen(job, time.time())

    def _job_seen(self, job, now):
        if job.get("kind") == "server":
            return  # the serving topic says how a server moves
        watch = self.watches.get(job["id"])
        if watch is None:
            if len(self.watches) >= WATCHED_MAX:
                return
            watch = self.watches[job["id"]] = Watch(job["id"], job.get("kind"), job, own_limit(job.get("meta")))
        watch.job = job
        watch.limit = own_limit(job.get("meta"))
        progress = job.get("progress") or {}
        if watch.kind == "training":
            if watch.value is None and progress.get("step") is not None:
                # Known to have stepped before this daemon followed it: its clock starts now.
                watch.moved(progress["step"], now, "step %s" % progress["step"])
            return
        if watch.kind == "datagen":
            value = progress.get("done")
            if value is not None and value != watch.value:
                watch.rate = progress.get("rate") or watch.rate
                total = progress.get("total")
                self._moved(watch, value, now, "%s samples%s" % (value, " of %s" % total if total else "")
                            + (", %.3g samples/s" % watch.rate if watch.rate else ""))
            return
        if watch.kind == "download":
            if progress.get("state") != "downloading":
                if watch.stalled and progress.get("bytes_done") != watch.value:
                    self._resumed(watch, now, " (%s, %s)" % (progress.get("state"), fmt_gb(progress.get("bytes_done"))))
                watch.value, watch.moved_at = None, None  # resolving, verifying, waiting its turn: not a download's stall
                return
            value = progress.get("bytes_done")
            if value is not None and value != watch.value:
                rate = progress.get("rate_bytes_per_s")
                watch.rate = rate if rate else watch.rate
                self._moved(watch, value, now, "%s of %s%s" % (fmt_gb(value), fmt_gb(progress.get("bytes_total")),
                                                              ", %s/s" % fmt_gb(watch.rate) if watch.rate else ""))

    def step_record(self, record):
        job_id = record["job"]
        watch = self.watches.get(job_id)
        if watch is None:
            job = self.evaluator._job(job_id, fresh=True)
            if job.get("process_state") not in LIVE or len(self.watches) >= WATCHED_MAX:
                return
            watch = self.watches[job_id] = Watch(job_id, "training", job, own_limit(job.get("meta")))
        when = record.get("time") or time.time()
        loss = record.get("loss")
        typical = median(watch.intervals)
        before = "step %s" % record.get("step")
        if isinstance(loss, (int, float)):
            before += ", loss %.4g" % loss
        if typical:
            before += ", %.3g steps/s" % (1.0 / typical)
        self._moved(watch, record.get("step"), when, before)

    def serving_record(self, record):
        """A server's second: requests waiting and no token generated is a stall's; tokens again end it."""
        server_id = record["server"]
        now = record.get("time") or time.time()
        waiting, tps = record.get("waiting"), record.get("generation_tps")
        watch = self.watches.get(server_id)
        if watch is None:
            if len(self.watches) >= WATCHED_MAX:
                return
            watch = self.watches[server_id] = Watch(server_id, "server", None, self._server_limit(server_id))
        if tps:
            watch.before = "%.4g tokens/s at %s" % (tps, time.strftime("%H:%M", time.localtime(now)))
            watch.moved_at = None
            if watch.stalled:
                self._resumed(watch, now, "")
            return
        if tps is None or not waiting:  # a first read, or idle: nobody waits for a token
            watch.moved_at = None
            if watch.stalled and not waiting:
                self._resumed(watch, now, ": no request waits any more")
            return
        watch.value = waiting
        if watch.moved_at is None:
            watch.moved_at = now
        if watch.stalled:
            return
        limit = watch.limit_s(SERVER_STALL_S)
        if limit and now - watch.moved_at >= limit:
            job = None if server_id.startswith("u") else self.evaluator._job(server_id)
            what = label(job) if job else "attached server %s" % server_id
            message = "%s: %g request(s) waiting and no token generated for %s" % (what, waiting, minutes(now - watch.moved_at))
            if watch.before:
                message += "; before: %s" % watch.before
            self._raise(watch, "server_stalled", "server %s stalled on %s" % (server_id, self.host), message,
                        "stalled:%s:%d" % (server_id, int(watch.moved_at)), now, job)

    # -- absence

    def check(self, now=None):
        """Every followed job whose counter has not moved for its limit: its alert (once)."""
        now = time.time() if now is None else now
        if now - self.checked_at < CHECK_EVERY_S:
            return
        self.checked_at = now
        if not self.seeded:
            self.seeded = True
            for job in self.daemon.jobs.list():
                if job.get("process_state") in LIVE:
                    self._job_seen(job, now)
        for watch in list(self.watches.values()):
            if watch.kind == "server" or watch.job is None:
                continue
            if watch.resuming and time.time() - watch.resuming["held_at"] >= RESUME_HOLD_S:
                self._resumed(watch, watch.resuming["at"], watch.resuming["detail"])
            if watch.kind not in ("training", "datagen", "download"):
                self._look_at_log(watch, now)
            if watch.stalled or watch.moved_at is None or (watch.job or {}).get("state") == "stopping":
                continue
            limit = watch.limit_s(DOWNLOAD_STALL_S if watch.kind == "download" else None)
            if limit and now - watch.moved_at >= limit:
                self._stalled(watch, now)

    def _look_at_log(self, watch, now):
        """A job of no progress of its own, with a limit of its own: its log's size is its counter."""
        if not watch.limit:
            return
        try:
            size = os.stat(self.daemon.jobs.log_path(watch.id)).st_size
        except OSError:
            return
        if size != watch.value:
            self._moved(watch, size, now, "its log at %s" % fmt_gb(size))

    # -- alerts

    def _moved(self, watch, value, when, before):
        watch.moved(value, when, before)
        if watch.stalled and watch.kind in RUN_KINDS:
            if not watch.resuming:  # held: if the run ends meanwhile, its end tells both
                watch.resuming = {"at": when, "detail": " (%s)" % before if before else "", "held_at": time.time()}
        elif watch.stalled:
            self._resumed(watch, when, " (%s)" % before if before else "")

    def _stalled(self, watch, now):
        job = watch.job
        idle = minutes(now - watch.moved_at)
        if watch.kind == "training":
            kind, what = "training_stalled", "no new step for %s" % idle
        elif watch.kind == "download":
            kind, what = "download_stalled", "no byte downloaded for %s" % idle
        elif watch.kind == "datagen":
            kind, what = "job_stalled", "its progress has not moved for %s" % idle
        else:
            kind, what = "job_stalled", "no new output for %s" % idle
        message = "%s: %s (stall limit %s)" % (label(job), what, minutes(watch.limit_s(DOWNLOAD_STALL_S if watch.kind == "download" else None)))
        if watch.before:
            message += "; before: %s" % watch.before
        # Named by what it stopped at, so the same stall found again after a restart is queued once.
        key = "stalled:%s:%d:%s" % (job["id"], int((job.get("submitted_at") or 0) * 1000), watch.value)
        self._raise(watch, kind, "%s stalled on %s" % (job["id"], self.host), message, key, watch.moved_at, job)

    def _raise(self, watch, kind, title, message, key, since, job):
        watch.stalled = {"key": key, "since": since, "kind": kind}
        categories = ["stalled"] + ([KIND_CATEGORY[watch.kind]] if watch.kind in KIND_CATEGORY else [])
        alert = make_alert(key, kind, categories, self.host, title, message, since, job=job, urgent=True,
                           log_tail=self.evaluator.log_tail(watch.id) if job else None)
        if watch.kind == "server":
            alert["server"] = watch.id  # an attached server has no job to name it
        self.evaluator.raise_alert(alert)

    def _resumed(self, watch, now, detail):
        stalled, watch.stalled, watch.resuming = watch.stalled, None, None
        job = watch.job if watch.kind != "server" else (None if watch.id.startswith("u") else self.evaluator._job(watch.id))
        categories = ["stalled"] + ([KIND_CATEGORY[watch.kind]] if watch.kind in KIND_CATEGORY else [])
        alert = make_alert(stalled["key"] + ":resumed", "resumed", categories, self.host, "%s resumed on %s" % (watch.id, self.host),
                           "%s resumed after %s%s" % (watch.id, minutes(now - stalled["since"]), detail), now, job=job)
        alert.update(stalled_since=stalled["since"], stalled_s=round(now - stalled["since"], 1))
        if watch.kind == "server":
            alert["server"] = watch.id
        self.evaluator.raise_alert(alert)

    def _server_limit(self, server_id):
        if server_id.startswith("u"):
            serving = self.daemon.services.get("serving")
            entry = serving.attached_entry(server_id) if serving is not None else None
            return own_limit(entry)
        return own_limit(self.evaluator._job(server_id).get("meta"))
