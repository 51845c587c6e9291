"""Disks filling under running jobs, told as alerts of their own (category `disks`, urgent: a
disk full at 03:40 is the night lost), from the telemetry feed's latest sample (no sampler of
its own): each disk there carries its fill rate, when it will be full at that rate and the
running jobs writing to it (remote/telemetry/host.py).

- `disk_filling`: a disk a running job writes to, or the daemon's own state, that will be full
  within the later of `horizon_s` (the telemetry settings' `disk_filling` rule, default 1 h) and
  the remaining ETA of the jobs writing there; once per episode (an episode ends when its disk is
  no longer predicted full within twice that, so a noisy rate is not told twice);
- `disk_nearly_full`: under `low_percent` (default 2%) of it left; once, again only after it
  went back over one and a half times that.

Each names the disk, its free bytes, the rate, the time it fills and the jobs writing there (a
data generation that does not say how many samples it will write: that its total is not known,
so the time is the fill rate's alone).
`check` runs on the evaluator's poll, at most every CHECK_EVERY_S; its work is one look at each
of the sample's disks (at most the feed's DISKS_MAX) and, for a disk filling slower than the
horizon, the progress of its jobs (from the stall module's records, else one describe each).
"""

import time

from ..downloads.output import fmt_gb
from ..core.words import minutes
from .alert import clock_text, label, make_alert
from .datagen_disks import total_unknown

CHECK_EVERY_S = 1.0
FOLLOWED_MAX = 64  # disks remembered (their episodes); the feed shows at most 16
TELEMETRY = "telemetry"


def fmt_rate(rate):
    return "%s/s" % fmt_gb(rate)


class Disks:
    def __init__(self, evaluator):
        self.evaluator = evaluator
        self.daemon = evaluator.daemon
        self.host = evaluator.host
        self.disks = {}  # path -> {filling: since or None, low: bool}
        self.checked_at = 0.0

    def check(self, now=None):
        now = time.time() if now is None else now
        if now - self.checked_at < CHECK_EVERY_S:
            return
        self.checked_at = now
        feed = self.daemon.services.get(TELEMETRY)
        if feed is None:
            return
        rule = feed.settings["alerts"].get("disk_filling") or {}
        if not rule.get("enabled", True):
            return
        sample = feed.latest_sample()
        seen = set()
        for disk in ((sample or {}).get("host") or {}).get("disks") or ():
            if not disk.get("jobs") and "state" not in disk.get("role", "").split(", "):
                continue  # a disk nobody writes to now: shown, not told
            path = disk["path"]
            seen.add(path)
            state = self.disks.get(path)
            if state is None:
                if len(self.disks) >= FOLLOWED_MAX:
                    continue
                state = self.disks[path] = {"filling": None, "low": False}
            self._look(disk, state, rule, now)
        for path in set(self.disks) - seen:
            del self.disks[path]  # its jobs ended: a new episode when one writes there again

    def _look(self, disk, state, rule, now):
        free, total = disk.get("free_bytes"), disk.get("total_bytes")
        rate, full_in = disk.get("fill_rate_bytes_per_s"), disk.get("full_in_s")
        horizon = float(rule.get("horizon_s", 3600))
        if full_in is not None and full_in > horizon:
            horizon = max(horizon, self._remaining(disk))
        if full_in is not None and rate and rate > 0 and full_in <= horizon:
            if state["filling"] is None:
                state["filling"] = now
                self._raise(disk, "disk_filling", "disk:%s:%d" % (disk["path"], int(now)),
                            "disk %s fills on %s" % (disk["path"], self.host),
                            "%s will be full at %s (in %s): %s free, filling at %s" % (
                                disk["path"], clock_text(now + full_in), minutes(full_in), fmt_gb(free), fmt_rate(rate)), now)
        elif full_in is None or full_in > 2 * horizon:
            state["filling"] = None
        if not total or free is None:
            return
        low = float(rule.get("low_percent", 2))
        left = 100.0 * free / total
        if left < low and not state["low"]:
            state["low"] = True
            when = " (full at %s, in %s)" % (clock_text(now + full_in), minutes(full_in)) if full_in is not None else ""
            self._raise(disk, "disk_nearly_full", "disk:%s:low:%d" % (disk["path"], int(now)),
                        "disk %s nearly full on %s" % (disk["path"], self.host),
                        "%s has %.1f%% left: %s free of %s%s%s" % (
                            disk["path"], left, fmt_gb(free), fmt_gb(total),
                            ", filling at %s" % fmt_rate(rate) if rate and rate > 0 else "", when), now)
        elif left >= 1.5 * low:
            state["low"] = False

    def _raise(self, disk, kind, key, title, message, now):
        jobs = [self._job_of(job_id) for job_id in disk.get("jobs") or ()]
        if jobs:
            message += "; written by %s" % ", ".join(label(job) for job in jobs)
            unknown = [job for job in jobs if total_unknown(job)]
            if unknown:
                message += "; %s %s not say how many samples %s will write: the time is the fill rate's alone" % (
                    ", ".join(label(job) for job in unknown), "does" if len(unknown) == 1 else "do",
                    "it" if len(unknown) == 1 else "they")
        alert = make_alert(key, kind, ["disks"], self.host, title, message, now, job=jobs[0] if len(jobs) == 1 else None,
                           urgent=True)
        alert.update(disk=disk["path"], free_bytes=disk.get("free_bytes"), total_bytes=disk.get("total_bytes"),
                     fill_rate_bytes_per_s=disk.get("fill_rate_bytes_per_s"), full_in_s=disk.get("full_in_s"),
                     full_at=now + disk["full_in_s"] if disk.get("full_in_s") is not None else None,
                     jobs=[job["id"] for job in jobs], totals_unknown=[job["id"] for job in jobs if total_unknown(job)])
        self.evaluator.raise_alert(alert)

    def _job_of(self, job_id):
        watch = self.evaluator.stalls.watches.get(job_id)
        if watch is not None and watch.job is not None:
            return watch.job
        return self.evaluator._job(job_id)

    def _remaining(self, disk):
        """The longest remaining ETA of the jobs writing to the disk (0 when none says)."""
        longest = 0.0
        for job_id in disk.get("jobs") or ():
            eta = (self._job_of(job_id).get("progress") or {}).get("eta_s")
            if isinstance(eta, (int, float)) and not isinstance(eta, bool) and eta > longest:
                longest = float(eta)
        return longest
