"""Slowdowns: a training run whose steps per second (a data generation's samples per second), or
whose tokens per second where its log gives them (speculators' `profile/tokens_per_s`), stayed
under half of its own median of the last hour for 10 minutes, told as an alert of its own
(kind `slowdown`, category `slowdown` and the job kind's) naming both figures, with the figures
of its GPUs at that moment from the telemetry feed's latest sample (throttle reasons,
utilisation, clocks, the other processes on them), so the cause is on the same screen; and one
follow-up (`pace_back`) when its pace is over the line again. Not urgent (quiet hours hold it: a
run at half its pace is the morning's news, not a night's end, as a stall is). The limits are each job's
(pace.py: meta `slowdown`, else 0.5, 10 min, 1 h). Each figure is judged on its own; a run
slow in both is told once, by the first (its follow-up when that one is back).

Read from what the evaluator already follows: the `training` topic's steps, a data generation's
progress counter on the `jobs` topic. A run that stops moving is the stall module's; this one
judges a pace only when a step (or sample) comes, and not across a gap longer than its window
(a stall and its end are told once, as a stall). At most WATCHED_MAX runs are followed.
"""

import os
import time

from ..core.records import read_json
from ..core.words import minutes
from .alert import KIND_CATEGORY, label, make_alert
from .pace import Pace, limits
from .stalls import LIVE

WATCHED_MAX = 2000
UNITS = {"training": "steps/s", "datagen": "samples/s"}
TOKENS = "tokens/s"
OTHERS_MAX = 4  # other processes named per GPU


def fmt_pace(pace):
    return "%.2g" % pace if pace < 10 else "%.0f" % pace


class Measure:
    """One figure of a run's pace: its unit, its Pace and its slowdown while under the line."""

    __slots__ = ("unit", "pace", "slow")

    def __init__(self, unit):
        self.unit = unit
        self.pace = Pace()
        self.slow = None  # {since, reference, told: key or None, low} while under the line


class Run:
    __slots__ = ("id", "kind", "job", "measures")

    def __init__(self, job_id, kind, job):
        self.id, self.kind, self.job = job_id, kind, job
        self.measures = {UNITS[kind]: Measure(UNITS[kind])}  # tokens/s added when its log gives them

    @property
    def pace(self):
        """The steps' (samples') Pace."""
        return self.measures[UNITS[self.kind]].pace

    def measure(self, unit):
        found = self.measures.get(unit)
        if found is None:
            found = self.measures[unit] = Measure(unit)
        return found


class Slowdowns:
    def __init__(self, evaluator):
        self.evaluator = evaluator
        self.daemon = evaluator.daemon
        self.host = evaluator.host
        self.runs = {}

    def _run(self, job_id, kind, job=None):
        run = self.runs.get(job_id)
        if run is None:
            if job is None:
                job = self.evaluator._job(job_id, fresh=True)
            if job.get("process_state") not in LIVE or len(self.runs) >= WATCHED_MAX:
                return None
            run = self.runs[job_id] = Run(job_id, kind, job)
        return run

    def step_record(self, record):
        run = self._run(record["job"], "training")
        if run is None:
            return
        when = record.get("time") or time.time()
        if isinstance(record.get("step"), (int, float)):
            self._counted(run, run.measures[UNITS["training"]], when, record["step"])
        tokens = record.get("tokens_per_s")
        if isinstance(tokens, (int, float)) and not isinstance(tokens, bool) and 0 <= tokens < float("inf"):
            self._counted(run, run.measure(TOKENS), when, tokens, rate=True)

    def job_record(self, record):
        job = record.get("job")
        if record.get("event") == "removed" or not job or job.get("process_state") not in LIVE:
            self.runs.pop(record.get("id"), None)
            return
        if job.get("kind") != "datagen":
            if job.get("kind") == "training" and job["id"] in self.runs:
                self.runs[job["id"]].job = job  # its limits as they are now
            return
        run = self._run(job["id"], "datagen", job)
        if run is None:
            return
        run.job = job
        progress = job.get("progress") or {}
        done, now = progress.get("done"), time.time()
        if isinstance(done, (int, float)) and not isinstance(done, bool):
            # When its log was read (the progress's own time; never later than now): the topic's
            # record comes a poll later.
            read_at = progress.get("updated_at")
            ok = isinstance(read_at, (int, float)) and not isinstance(read_at, bool) and now - 60 < read_at <= now
            self._counted(run, run.measures[UNITS["datagen"]], read_at if ok else now, done)

    def _counted(self, run, measure, when, value, rate=False):
        """A count (steps, samples) or, `rate`, a rate the log gave (tokens/s) at `when`."""
        fraction, for_s, median_s = limits(run.job.get("meta"))
        own = measure.pace
        if own.points and when - own.points[-1][0] > max(for_s, 1.0):
            # No move for longer than the window: a stall's (stalls.py tells it, and its end); the
            # pace counts again from this move, not across the gap.
            own.points.clear()
            if measure.slow is not None and not measure.slow["told"]:
                measure.slow = None  # (one told still gets its follow-up when the pace is back)
        pace = own.add_rate(when, value, median_s) if rate else own.add(when, value, median_s)
        if pace is None or not fraction:
            return
        slow = measure.slow
        reference = slow["reference"] if slow else own.reference
        if reference is None or (slow is None and own.covered_s() < min(for_s, median_s)):
            return  # no hour of its own yet (a run warming up is not slow)
        if pace < fraction * reference:
            if slow is None:
                slow = measure.slow = {"since": own.points[-2][0], "reference": reference, "told": None, "low": pace}
            slow["low"] = min(slow["low"], pace)
            told_by_other = any(m.slow and m.slow["told"] for m in run.measures.values() if m is not measure)
            if slow["told"] is None and not told_by_other and when - slow["since"] >= for_s:
                self._tell(run, measure, pace, when)
            return
        if slow is not None and slow["told"]:
            self._back(run, measure, pace, when)
        measure.slow = None

    def _tell(self, run, measure, pace, now):
        slow, job, unit = measure.slow, run.job, measure.unit
        message = "%s at %s %s, its hour's median %s %s, for %s" % (
            label(job), fmt_pace(pace), unit, fmt_pace(slow["reference"]), unit, minutes(now - slow["since"]))
        figures = self._gpu_figures(job, now)
        message += "; " + figures["text"]
        key = "slowdown:%s:%d:%d%s" % (job["id"], int((job.get("submitted_at") or 0) * 1000), int(slow["since"]),
                                      ":tokens" if unit == TOKENS else "")
        slow["told"] = key
        alert = make_alert(key, "slowdown", self._categories(run), self.host, "%s slowed down on %s" % (job["id"], self.host),
                           message, slow["since"], job=job, log_tail=self.evaluator.log_tail(job["id"]))
        alert.update(pace=pace, median_pace=slow["reference"], unit=unit, gpus=figures["gpus"],
                     gpu_figures_age_s=figures["age_s"])
        self.evaluator.raise_alert(alert)

    def _back(self, run, measure, pace, now):
        slow, unit = measure.slow, measure.unit
        alert = make_alert(slow["told"] + ":back", "pace_back", self._categories(run), self.host,
                           "%s back to pace on %s" % (run.id, self.host),
                           "%s back to pace after %s: %s %s (its median %s %s, at its slowest %s)" % (
                               label(run.job), minutes(now - slow["since"]), fmt_pace(pace), unit,
                               fmt_pace(slow["reference"]), unit, fmt_pace(slow["low"])), now, job=run.job)
        alert.update(pace=pace, median_pace=slow["reference"], unit=unit)
        self.evaluator.raise_alert(alert)

    @staticmethod
    def _categories(run):
        return ["slowdown"] + ([KIND_CATEGORY[run.kind]] if run.kind in KIND_CATEGORY else [])

    # -- the GPUs' figures at that moment

    def _gpu_figures(self, job, now):
        feed = self.daemon.services.get("telemetry")
        sample = feed.latest_sample() if feed is not None else None
        return gpu_figures(sample, job, now, self._visible_devices(job))

    def _visible_devices(self, job):
        """The job's CUDA_VISIBLE_DEVICES, from its record (a job's reply does not carry its env)."""
        try:
            spec = read_json(os.path.join(self.daemon.jobs.job_dir(job["id"]), "job.json"))
            value = (spec.get("env") or {}).get("CUDA_VISIBLE_DEVICES")
        except Exception:  # forgotten, or a damaged record: its processes alone say its GPUs
            return None
        return value if isinstance(value, str) else None


def job_gpus(sample, job, visible=None):
    """The GPU indexes a job runs on: those its processes hold in the sample, else those its
    CUDA_VISIBLE_DEVICES names (indexes only)."""
    held = sorted({p["gpu_index"] for p in sample.get("processes") or () if p.get("job_id") == job["id"]})
    if held:
        return held
    return [int(part) for part in (visible or "").split(",")[:64] if part.strip().isdigit()]


def gpu_figures(sample, job, now, visible=None):
    """{text, gpus: [{index, utilization_percent, throttle_reasons, sm_clock_mhz, sm_clock_max_mhz,
    temperature_c, power_w, power_limit_w, others: [{pid, job_id, command, memory_bytes}]}], age_s}
    of the job's GPUs in the telemetry sample (none when it has none: said so)."""
    if not sample:
        return {"text": "no GPU figures (the telemetry has no sample yet)", "gpus": [], "age_s": None}
    age_s = round(max(0.0, now - (sample.get("time") or now)), 1)
    indexes = job_gpus(sample, job, visible)
    by_index = {gpu.get("index"): gpu for gpu in sample.get("gpus") or ()}
    found, parts = [], []
    for index in indexes:
        gpu = by_index.get(index)
        if gpu is None:
            continue
        others = [{"pid": p.get("pid"), "job_id": p.get("job_id"), "command": (p.get("command") or "")[:80],
                   "memory_bytes": p.get("memory_bytes")}
                  for p in sample.get("processes") or () if p.get("gpu_index") == index and p.get("job_id") != job["id"]]
        figure = {key: gpu.get(key) for key in ("index", "utilization_percent", "throttle_reasons", "sm_clock_mhz",
                                                "sm_clock_max_mhz", "temperature_c", "power_w", "power_limit_w")}
        figure["others"] = others[:OTHERS_MAX]
        figure["others_count"] = len(others)
        found.append(figure)
        parts.append(gpu_text(figure))
    if not found:
        return {"text": "no GPU of its in the telemetry", "gpus": [], "age_s": age_s}
    stale = " (figures %s old)" % minutes(age_s) if age_s >= 10 else ""
    return {"text": "; ".join(parts) + stale, "gpus": found, "age_s": age_s}


def gpu_text(figure):
    """`GPU 0: 35% busy, 1200/1980 MHz, 83 °C, 690/700 W, throttled (hw_thermal), also pid 4242 (j8)`."""
    words = []
    if figure["utilization_percent"] is not None:
        words.append("%d%% busy" % figure["utilization_percent"])
    if figure["sm_clock_mhz"] is not None:
        words.append("%d%s MHz" % (figure["sm_clock_mhz"], "/%d" % figure["sm_clock_max_mhz"] if figure["sm_clock_max_mhz"] else ""))
    if figure["temperature_c"] is not None:
        words.append("%d °C" % figure["temperature_c"])
    if figure["power_w"] is not None:
        words.append("%d%s W" % (figure["power_w"], "/%d" % figure["power_limit_w"] if figure["power_limit_w"] else ""))
    reasons = [r for r in figure["throttle_reasons"] or () if r not in ("gpu_idle", "none")]
    words.append("throttled (%s)" % ", ".join(reasons) if reasons else "not throttled")
    if figure["others_count"]:
        named = ["pid %s (%s)" % (o["pid"], o["job_id"] or o["command"].split(" ")[0] or "?") for o in figure["others"]]
        more = figure["others_count"] - len(named)
        words.append("also on it: %s%s" % (", ".join(named), " and %d more" % more if more > 0 else ""))
    else:
        words.append("nothing else on it")
    return "GPU %s: %s" % (figure["index"], ", ".join(words))
