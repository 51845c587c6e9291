"""What becomes an alert, evaluated on the host from what its services publish, so it fires while
no console is connected:

- job ends (the `jobs` topic, and at start the jobs that ended while no daemon ran): a job that
  failed or was lost, a server that ended (servers do not end by themselves), a download whose
  verification found a mismatch or a corrupt file, and any end of a job whose submission asked
  to be told (meta `notify`: jobs.submit's `notify: true`), good news included;
- GPU alerts (the `alerts` topic of remote/telemetry/alerts.py): idle while its job runs,
  memory full, heat, throttling, each when it fires;
- training (the `training` topic): a loss gone NaN or infinite, a loss that has not reached a new
  low for PLATEAU_S (the rule of training.curves' alerts);
- serving (the `serving` topic): accept length under the server's break-even line for BELOW_S
  (the line by the serving feed's one rule, `ServingFeed.break_even`: set by hand for its target
  from any console or `specdeck breakeven HOST SERVER --set`, else its job's meta, else the
  newest benchmark of the same target and drafter), and an attached server that answered and
  then has not for DOWN_S;
- acceptance regressions (regressions.py): accept length under its pair's saved baseline by more
  than the baseline's margin for its duration, and one follow-up when it recovers;
- acceptance under its prediction (under_predicted.py): live accept length under what the served
  drafter's speculation profile predicts by more than its margin for its duration;
- stalls (stalls.py): a running job or server whose progress stopped, from the same topics,
  noticed by a check of absence on a clock of its own at each poll;
- slowdowns (slowdowns.py): a training run or data generation whose pace stayed under half of
  its hour's median for 10 minutes, from the same topics, with its GPUs' figures of that moment;
- disks (disks.py): a disk a running job writes to that will be full within its horizon, or is
  under 2% free, from the telemetry feed's latest sample, looked at on the same poll; and a
  data generation whose first samples' size says its samples left will not fit (datagen_disks.py).

Each alert gets a key that names what happened (the job and its submission time, the GPU
alert's id, the run and its best loss), so the same event raised twice (after a restart) is
queued once.
"""

import math
import os
import time

from ..core.words import how_it_ended, minutes
from .alert import KIND_CATEGORY, label, make_alert

PLATEAU_S = 1800.0
# How long accept length stays under break-even before it is told; the environment can shorten it
# for the daemon it starts (the tests' and benchmarks' daemons: minutes are not waited there).
BELOW_S = float(os.environ.get("SPECDECK_BELOW_BREAK_EVEN_S") or 300.0)
DOWN_S = 60.0
LOG_TAIL_LINES = 10
LOG_TAIL_BYTES = 8192
CATCH_UP_S = 86400.0  # at start, job ends this recent that have no alert yet get one
GPU_KINDS = ("gpu_idle", "memory_full", "temperature", "throttle")
def job_end_alert(job, host, watched, log_tail):
    """The alert a job's end raises, or None when nobody needs to hear about it."""
    state, process_state = job.get("state"), job.get("process_state")
    ended_at = job.get("ended_at") or time.time()
    ran = minutes(ended_at - (job.get("started_at") or job.get("submitted_at") or ended_at))
    key = "job:%s:%d" % (job["id"], int((job.get("submitted_at") or 0) * 1000))
    extra = [KIND_CATEGORY[job["kind"]]] if job.get("kind") in KIND_CATEGORY else []
    common = dict(job=job, watched=watched, log_tail=log_tail(job["id"]))
    if process_state == "stopped":
        if not watched:
            return None
        return make_alert(key, "job_finished", ["finished"], host, "%s stopped on %s" % (job["id"], host),
                          "%s was stopped after %s" % (label(job), ran), ended_at, **common)
    if job.get("kind") == "server":
        return make_alert(key, "server_died", ["failed", "speculation"], host, "server %s died on %s" % (job["id"], host),
                          "server %s %s after %s" % (label(job), how_it_ended(job), ran), ended_at, urgent=True, **common)
    if job.get("kind") == "download" and state in ("mismatch", "corrupt"):
        verdict = ((job.get("progress") or {}).get("verdict") or {}).get("message") or state
        return make_alert(key, "verify_failed", ["downloads", "failed"], host, "verification failed on %s" % host,
                          "%s: verification failed: %s" % (label(job), verdict), ended_at, urgent=True, **common)
    if process_state in ("failed", "lost"):
        kind = "job_lost" if process_state == "lost" else "job_failed"
        return make_alert(key, kind, ["failed"] + extra, host, "%s failed on %s" % (job["id"], host),
                          "%s %s after %s" % (label(job), how_it_ended(job), ran), ended_at, urgent=True, **common)
    if watched:
        return make_alert(key, "job_finished", ["finished"], host, "%s finished on %s" % (job["id"], host),
                          "%s finished in %s" % (label(job), ran), ended_at, **common)
    return None


class Evaluator:
    """Reads the topics from where it last was and hands each alert to `raise_alert`."""

    def __init__(self, daemon, raise_alert, is_watched):
        self.daemon = daemon
        self.raise_alert = raise_alert
        self.is_watched = is_watched
        self.host = daemon.hello.get("hostname") or "host"
        self.cursors = {}
        for name in ("jobs", "alerts", "training", "serving"):
            topic = daemon.topics.get(name)
            if topic is not None:
                self.cursors[name] = topic.last_seq
        self.runs = {}  # training job -> {best, best_at, fired}
        self.servers = {}  # server id -> {below_since, fired, fresh_seen, stale_since, down_fired, break_even}
        self._names = {}
        from .datagen_disks import DatagenDisks
        from .disks import Disks  # (they word their alerts with this module's helpers)
        from .regressions import Regressions
        from .slowdowns import Slowdowns
        from .stalls import Stalls
        from .under_predicted import UnderPredicted

        self.stalls = Stalls(self)
        self.slowdowns = Slowdowns(self)
        self.regressions = Regressions(self)
        self.under_predicted = UnderPredicted(self)
        self.disks = Disks(self)
        self.datagen_disks = DatagenDisks(self)

    # -- the sources

    def catch_up(self, since):
        """Job ends no daemon saw (it was down): those after `since` and within CATCH_UP_S."""
        now = time.time()
        for job in self.daemon.jobs.list():
            ended_at = job.get("ended_at")
            if job.get("process_state") in ("running", "starting") or not ended_at or ended_at < since or now - ended_at > CATCH_UP_S:
                continue
            self.job_ended(job)

    def poll(self):
        for name, handle in (("jobs", self._job_record), ("alerts", self._gpu_record), ("training", self._training_record),
                             ("serving", self._serving_record)):
            topic = self.daemon.topics.get(name)
            if topic is None:
                continue
            if name not in self.cursors:
                self.cursors[name] = topic.last_seq
            while True:
                records, seq, _ = topic.after(self.cursors[name])
                self.cursors[name] = seq
                if not records:
                    break
                for record in records:
                    handle(record)
        self.stalls.check()
        self.disks.check()
        self.datagen_disks.check()

    def job_ended(self, job):
        watched = bool((job.get("meta") or {}).get("notify")) or self.is_watched(job["id"])
        if self.stalls.end_told(job, watched):
            return  # a run that ended while it stood still: told once, by its stall's follow-up
        alert = job_end_alert(job, self.host, watched, self.log_tail)
        if alert is not None:
            self.raise_alert(alert)

    def _job_record(self, record):
        if record.get("event") == "ended" and record.get("job"):
            self.job_ended(record["job"])
        self.stalls.job_record(record)
        self.slowdowns.job_record(record)

    def _gpu_record(self, record):
        if record.get("kind") not in GPU_KINDS or record.get("ended_at"):
            return
        job = self._job(record.get("job_id")) if record.get("job_id") else None
        text = record.get("message") or record["kind"]
        self.raise_alert(make_alert("gpu:%s" % record["id"], record["kind"], ["gpu"], self.host, "GPU alert on %s" % self.host, text,
                                    record.get("started_at") or record.get("fired_at") or time.time(), job=job,
                                    log_tail=self.log_tail(job["id"]) if job else None))

    def _training_record(self, record):
        job_id = record.get("job")
        if record.get("kind") != "step" or not job_id:
            return
        self.stalls.step_record(record)
        self.slowdowns.step_record(record)
        loss = record.get("loss")
        run = self.runs.setdefault(job_id, {"best": None, "best_at": None, "fired": False, "nan": False})
        when = record.get("time") or time.time()
        if isinstance(loss, str) or (isinstance(loss, float) and not math.isfinite(loss)):
            if not run["nan"]:
                run["nan"] = True
                job = self._job(job_id)
                self.raise_alert(make_alert("training:%s:nan" % job_id, "training_nan", ["training"], self.host,
                                            "training %s diverged on %s" % (job_id, self.host),
                                            "%s: the loss became %s at step %s" % (label(job), loss, record.get("step")), when,
                                            job=job, urgent=True, log_tail=self.log_tail(job_id)))
            return
        if not isinstance(loss, (int, float)):
            return
        if run["best"] is None or loss < run["best"]:
            run.update(best=loss, best_at=when, fired=False)
            return
        if not run["fired"] and when - run["best_at"] >= PLATEAU_S:
            run["fired"] = True
            job = self._job(job_id)
            self.raise_alert(make_alert("training:%s:flat:%.6g" % (job_id, run["best"]), "training_flat", ["training"], self.host,
                                        "training %s is flat on %s" % (job_id, self.host),
                                        "%s: the loss has not fallen below %.4g for %s (step %s)" % (
                                            label(job), run["best"], minutes(when - run["best_at"]), record.get("step")),
                                        when, job=job, log_tail=self.log_tail(job_id)))

    def _serving_record(self, record):
        server_id = record.get("server")
        if not server_id:
            return
        state = self.servers.setdefault(server_id, {"below_since": None, "fired": False, "fresh_seen": False, "stale_since": None,
                                                    "down_fired": False, "break_even": None})
        now = record.get("time") or time.time()
        if record.get("stale"):
            if state["fresh_seen"] and server_id.startswith("u"):
                state["stale_since"] = state["stale_since"] or now
                if not state["down_fired"] and now - state["stale_since"] >= DOWN_S:
                    state["down_fired"] = True
                    self.raise_alert(make_alert("server:%s:down:%d" % (server_id, int(state["stale_since"])), "server_died",
                                                ["failed", "speculation"], self.host, "server %s died on %s" % (server_id, self.host),
                                                "attached server %s has not answered for %s: %s" % (
                                                    server_id, minutes(now - state["stale_since"]), record.get("error") or "no answer"),
                                                state["stale_since"], urgent=True))
            return
        state.update(fresh_seen=True, stale_since=None, down_fired=False)
        self.stalls.serving_record(record)
        self.regressions.serving_record(record, now)
        self.under_predicted.serving_record(record, now)
        accept_length = record.get("accept_length")
        if accept_length is None:
            return  # an idle second says nothing about the drafter
        line = self._break_even(server_id)
        if line is None or accept_length >= line["accept_length"] or line != state["break_even"]:
            # Over the line, or a line changed (set again): the time under it counts from now.
            state.update(below_since=None, fired=False, break_even=line)
            if line is None or accept_length >= line["accept_length"]:
                return
        state["below_since"] = state["below_since"] or now
        if not state["fired"] and now - state["below_since"] >= BELOW_S:
            state["fired"] = True
            job = self._job(server_id) if not server_id.startswith("u") else None
            alert = make_alert("speculation:%s:%d" % (server_id, int(state["below_since"])), "below_break_even", ["speculation"],
                               self.host, "speculation slower than plain decoding on %s" % self.host,
                               "%s: accept length %.2f under break-even %.2f for %s (line: %s): speculation is slower" % (
                                   label(job) if job else server_id, accept_length, line["accept_length"],
                                   minutes(now - state["below_since"]), line["source"]),
                               state["below_since"], job=job)
            alert.update(server=server_id, break_even=line)
            self.raise_alert(alert)

    # -- helpers

    def _break_even(self, server_id):
        """The server's break-even line `{accept_length, source, how}`, or None: the serving
        feed's rule (which caches it, and asks again at once after a line is set)."""
        serving = self.daemon.services.get("serving")  # its rule, the one the fleet summary uses
        line = serving.break_even(server_id) if serving is not None else None
        return line if isinstance(line, dict) else None

    def _job(self, job_id, fresh=False):
        if fresh or job_id not in self._names:
            try:
                self._names[job_id] = self.daemon.jobs.describe(job_id)
            except Exception:  # forgotten meanwhile: the alert still says its id
                self._names[job_id] = {"id": job_id, "name": None}
        return self._names[job_id]

    def log_tail(self, job_id):
        """The last lines of a job's log, each as the terminal would show it (after its last \\r)."""
        try:
            text = self.daemon.jobs.tail(job_id, -LOG_TAIL_BYTES, LOG_TAIL_BYTES)["text"]
        except Exception:  # no log (forgotten): an alert without one
            return []
        lines = [line.rsplit("\r", 1)[-1].rstrip() for line in text.splitlines()]
        return [line[:300] for line in lines if line.strip()][-LOG_TAIL_LINES:]
