"""A data generation's disk forecast: a data-generation job that says how many samples it will
write (speculators' `Processing N samples`, a bar's total) has the size of its first samples
measured on the disks it writes to (the telemetry feed's latest sample: each disk's free bytes
and the running jobs writing there, remote/telemetry/host.py), and the bytes its samples left
need compared with what those disks have free. Told once per job and disk as an alert of its
own (kind `datagen_disk_full`, category `disks`, urgent) naming the size of a sample, what the
samples left need, what is free and the sample at which the disk fills; `forecasts()` gives the
same figures to `telemetry.latest` (each disk's `datagen`), so `gpus --json` shows them.

A data generation that does not say how many samples it will write (a tqdm bar with no total)
has no samples left to weigh: its forecast is the disk's fill rate alone (`total_known` false,
`full_in_s` and `full_at` from the rate, `full_at_sample` None), and the disk_filling alert
(disks.py) says its total is not known.

The size of a sample is the free bytes the disk lost over the samples written since the job was
first seen there (at least FIRST_SAMPLES of them, over at least FIRST_S seconds, so the moment a
sample and a progress line were read apart weighs little). `check` runs on the evaluator's
poll, at most every CHECK_EVERY_S; its work is one look at each disk of the sample (at most the
feed's 16) for each followed data generation (the slowdown module's, at most its WATCHED_MAX).
"""

import time

from ..downloads.output import fmt_gb
from ..core.words import minutes
from .alert import clock_text, label, make_alert

CHECK_EVERY_S = 1.0
FIRST_SAMPLES = 5
FIRST_S = 3.0
TELEMETRY = "telemetry"


def done_at(points, when):
    """The samples done at `when`, between the (time, done) points the progress gave (the
    newest when `when` is past it); None before the first."""
    before = None
    for at, count in points:
        if at >= when:
            if before is None:
                return None if at > when else count
            span = at - before[0]
            return before[1] + (count - before[1]) * (when - before[0]) / span if span > 0 else count
        before = (at, count)
    return before[1] if before else None


class DatagenDisks:
    def __init__(self, evaluator):
        self.evaluator = evaluator
        self.daemon = evaluator.daemon
        self.host = evaluator.host
        self.first = {}  # (job id, disk path) -> (time, samples done, free bytes) when first seen there
        self.told = set()  # (job id, disk path)
        self.latest = {}  # disk path -> [forecast], as of the last check
        self.checked_at = 0.0

    def check(self, now=None):
        now = time.time() if now is None else now
        if now - self.checked_at < CHECK_EVERY_S:
            return
        self.checked_at = now
        feed = self.daemon.services.get(TELEMETRY)
        sample = feed.latest_sample() if feed is not None else None
        disks = ((sample or {}).get("host") or {}).get("disks") or ()
        runs = {job_id: run for job_id, run in self.evaluator.slowdowns.runs.items() if run.kind == "datagen"}
        latest, seen = {}, set()
        for disk in disks:
            for job_id in disk.get("jobs") or ():
                run = runs.get(job_id)
                if run is None or disk.get("free_bytes") is None:
                    continue
                seen.add((job_id, disk["path"]))
                forecast = self._forecast(run, disk, now)
                if forecast is not None:
                    latest.setdefault(disk["path"], []).append(forecast)
                    if forecast["full_at_sample"] is not None and (job_id, disk["path"]) not in self.told:
                        self.told.add((job_id, disk["path"]))
                        self._tell(run.job, disk, forecast, now)
        for key in set(self.first) - seen:
            del self.first[key]  # its job ended (or writes elsewhere now)
        self.told &= seen
        self.latest = latest

    def _forecast(self, run, disk, now):
        job = run.job
        progress = job.get("progress") or {}
        done, total, free = progress.get("done"), progress.get("total"), disk["free_bytes"]
        if not isinstance(done, int):
            return None
        if total is None:
            return rate_alone(job, disk, now)
        if not isinstance(total, int) or total <= done:
            return None
        # The samples done when the disk was read (its reading and the progress line come apart).
        read_at = disk.get("read_at") or now
        done_then = done_at(run.pace.points, read_at)
        key = (job["id"], disk["path"])
        first = self.first.get(key)
        if first is None or done_then is None or done_then < first[1]:
            if done_then is not None:
                self.first[key] = (read_at, done_then, free)
            return None
        written, used = done_then - first[1], first[2] - free
        if written < FIRST_SAMPLES or read_at - first[0] < FIRST_S or used <= 0:
            return None
        per_sample = used / float(written)
        left = total - done
        needed = per_sample * left
        fits = int(free // per_sample)
        rate = progress.get("rate")
        forecast = {"job_id": job["id"], "total_known": True, "bytes_per_sample": int(round(per_sample)), "samples_measured": int(round(written)),
                    "samples_left": left, "bytes_needed": int(round(needed)), "free_bytes": free,
                    "full_at_sample": done + fits if needed > free else None, "full_in_s": None}
        if forecast["full_at_sample"] is not None and rate:
            forecast["full_in_s"] = round(fits / rate, 1)
        return forecast


    def _tell(self, job, disk, forecast, now):
        when = ""
        if forecast["full_in_s"] is not None:
            when = " (at %s, in %s)" % (clock_text(now + forecast["full_in_s"]), minutes(forecast["full_in_s"]))
        message = ("%s will not fit on %s: its first %d samples took %s each, its %d samples left need %s, %s is free: "
                   "full at about sample %d of %d%s") % (
            label(job), disk["path"], forecast["samples_measured"], fmt_gb(forecast["bytes_per_sample"]),
            forecast["samples_left"], fmt_gb(forecast["bytes_needed"]), fmt_gb(forecast["free_bytes"]),
            forecast["full_at_sample"], (job.get("progress") or {}).get("total"), when)
        alert = make_alert("datagen_disk:%s:%d:%s" % (job["id"], int((job.get("submitted_at") or 0) * 1000), disk["path"]),
                           "datagen_disk_full", ["disks"], self.host, "%s will fill %s on %s" % (job["id"], disk["path"], self.host),
                           message, now, job=job, urgent=True)
        alert.update(disk=disk["path"], total_bytes=disk.get("total_bytes"), forecast=forecast)
        self.evaluator.raise_alert(alert)

    def forecasts(self, path):
        """The data generations' forecasts on the disk at `path` as of the last check ([] when none)."""
        return list(self.latest.get(path) or ())


def with_forecasts(sample, services):
    """`sample` (as telemetry.latest gives it) with each disk's `datagen` forecasts (a copy: the
    feed's own sample is shared), or `sample` itself when there are none."""
    notify = services.get("notify")
    evaluator = getattr(notify, "evaluator", None)
    if evaluator is None or not evaluator.datagen_disks.latest:
        return sample
    host = dict(sample.get("host") or {})
    host["disks"] = [dict(disk, datagen=evaluator.datagen_disks.forecasts(disk.get("path"))) for disk in host.get("disks") or ()]
    return dict(sample, host=host)


def rate_alone(job, disk, now):
    """The forecast of a data generation whose total is not known: the disk's fill rate alone
    (None while the disk has no rate)."""
    full_in = disk.get("full_in_s")
    if full_in is None:
        return None
    return {"job_id": job["id"], "total_known": False, "bytes_per_sample": None, "samples_measured": None, "samples_left": None,
            "bytes_needed": None, "free_bytes": disk["free_bytes"], "full_at_sample": None, "full_in_s": full_in,
            "full_at": round((disk.get("read_at") or now) + full_in, 1), "fill_rate_bytes_per_s": disk.get("fill_rate_bytes_per_s")}


def total_unknown(job):
    """Whether `job` is a data generation that does not say how many samples it will write."""
    progress = job.get("progress") or {}
    return job.get("kind") == "datagen" and isinstance(progress.get("done"), int) and progress.get("total") is None
