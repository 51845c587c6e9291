"""Every node's GPUs while a Slurm job runs: for each running Slurm job, one step inside its
allocation (`srun --overlap --jobid J`, one task a node) runs the agent's `node-sample` there
(remote/telemetry/node_sample.py), which reads the node's NVML and writes one JSON line a sample
named by the node. This feed reads those lines and records them as telemetry, labelled by node:
the history store under the source `telemetry` ({"gpu": i, "node": n}, {"device": "host",
"node": n}), the `telemetry` stream (each host sample carries the nodes' latest under `nodes`),
and the GPU alert rules run per node, the node named in each alert (`n2 GPU 5: ...`).

The step runs the very agent the daemon runs (its zipapp under ~/.cache/specdeck/agents) with
the daemon's Python: the home directory, and so the zipapp, is taken to be shared between the
login node and the compute nodes, as on most clusters. Where it is not, or the node has no such
Python, the step ends at once and the node's figures say why in one line (python's own words).
The step gets the user's login environment (where Slurm's clients find their configuration, as
for every Slurm command of the daemon) plus the job's own variables (the ones it was submitted
with: an NVML replay, a CUDA setting), so it reads the GPUs the way the job does.

Bounded like every feed source: each line at most LINE_CAP bytes (longer ones are skipped and
counted), each read a deadline and a byte cap, a node silent for longer than its interval and
deadline shown stale with its age; a step that dies while the job runs is started again with the
feed's backoff (1 s, 2 s, ... 60 s); when the job ends its source goes, and the step is ended
(Slurm ends it too, with the job). A Slurm older than 20.11 does not know `--overlap` (its steps
share the allocation without it): the step is started again without the flag. Where the site
refuses a step in a job's allocation altogether (a step limit, a submit filter), nothing is
sampled on the nodes: each node says srun's refusal, and it is asked again with the backoff.
"""

import errno
import json
import logging
import os
import select
import signal
import subprocess
import time

from ..core import paths
from ..core.feed_source import FeedSource, SourceError
from ..core.feeds import Feed
from ..jobs.login_env import login_environment, resolve_executable
from ..core.protocol import BadRequest
from ..core.records import read_json
from ..telemetry import node_sample

log = logging.getLogger("specdeck.slurm")

LINE_CAP = 256 << 10  # a node's line is ~6 KB for 8 GPUs (node_sample caps its own at 64 KiB)
NODES_MAX = 32  # nodes sampled per job: a 500-node job must not cost the login host 500 lines a second
JOBS_EVERY_S = 2.0
EVERY_S = 1.0  # one sample a second on each node, as on the host
ERROR_TAIL_BYTES = 4096
STEP_NAME = "specdeck-gpus"


def slurm_of(job):
    """(Slurm job id, [node names]) of a job that runs in Slurm now (the Slurm engine's record:
    remote/slurm), or None for any other job or one still pending."""
    if job.get("engine") != "slurm" or job.get("process_state") != "running":
        return None
    slurm = job.get("slurm") if isinstance(job.get("slurm"), dict) else {}
    slurm_id, nodes = job.get("slurm_id") or slurm.get("id"), job.get("nodes") or slurm.get("nodes")
    if not slurm_id or not isinstance(nodes, list) or not nodes:
        return None
    return str(slurm_id), [str(node) for node in nodes]


def step_argv(srun, slurm_id, nodes, overlap=True):
    """srun's argv for the sampling step: one task on each node, inside the job's allocation."""
    argv = [srun] + (["--overlap"] if overlap else []) + [
        "--jobid", slurm_id, "--nodes", str(len(nodes)), "--nodelist", ",".join(nodes), "--ntasks-per-node", "1",
        "--kill-on-bad-exit=1", "--job-name", STEP_NAME, "--quiet", "--export=ALL"]
    return argv + paths.agent_argv() + ["node-sample", "--every", "%g" % EVERY_S]


def one_line(text):
    return " ".join(text.split())


class NodeStep(FeedSource):
    """One running Slurm job: its sampling step and what its nodes said."""

    interval_s = EVERY_S
    deadline_s = 2.0
    max_bytes = 4 << 20  # of the step's output per read
    max_series = 16 * NODES_MAX

    def __init__(self, key, feed, spec):
        super().__init__(key)
        self.feed = feed
        self.slurm_id, nodes = spec
        self.nodes = list(nodes)[:NODES_MAX]
        self.process = None
        self.overlap = True
        self.starts = 0
        self.lines_cut = 0
        self.latest = {}  # node -> (its latest sample, wall time it came)
        self.ended_why = None  # why the last step ended, until a new one samples
        self._partial = b""
        self._skipping = False
        self._errors_path = os.path.join(feed.directory, "%s.log" % key)  # srun's stderr: its last words say why it ended

    # -- the step

    def _start(self):
        job_env = (read_json(os.path.join(self.feed.daemon.jobs.root, self.key, "job.json")) or {}).get("env") or {}
        env = login_environment()
        env.update((k, v) for k, v in job_env.items() if isinstance(k, str) and isinstance(v, str))
        try:
            srun = resolve_executable("srun", env["HOME"], env["PATH"])
        except BadRequest as exc:
            raise SourceError(str(exc))
        argv = step_argv(srun, self.slurm_id, self.nodes, self.overlap)
        with open(self._errors_path, "wb") as errors:
            try:
                self.process = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=errors, env=env,
                                                cwd=env["HOME"], start_new_session=True, close_fds=True)
            except OSError as exc:
                raise SourceError("cannot start srun: %s" % (exc.strerror or exc))
        os.set_blocking(self.process.stdout.fileno(), False)
        self.starts += 1
        self._partial, self._skipping = b"", False
        log.info("job %s: sampling the GPUs of %s in Slurm job %s (start %d)", self.key, ",".join(self.nodes), self.slurm_id, self.starts)

    def close(self):
        process, self.process = self.process, None
        if process is None:
            return
        try:
            os.killpg(process.pid, signal.SIGTERM)  # srun passes it to the step's tasks
            process.wait(2.0)
        except (OSError, subprocess.TimeoutExpired):
            try:
                os.killpg(process.pid, signal.SIGKILL)
            except OSError:
                pass
            process.wait()
        process.stdout.close()

    def _ended(self, code):
        """The step is gone: why, in one line, from srun's (or python's) last words."""
        self.process.stdout.close()
        self.process = None
        try:
            with open(self._errors_path, "rb") as f:
                f.seek(max(0, os.path.getsize(self._errors_path) - ERROR_TAIL_BYTES))
                lines = [one_line(l) for l in f.read().decode("utf-8", "replace").splitlines() if l.strip()]
        except OSError:
            lines = []
        if self.overlap and any("unrecognized option" in l and "overlap" in l for l in lines):
            self.overlap = False  # Slurm < 20.11: steps share the allocation without asking
            raise SourceError("this Slurm does not know srun --overlap: starting the step without it")
        said = next((l for l in reversed(lines) if "error" in l.lower() or "fatal" in l.lower()), lines[-1] if lines else None)
        self.ended_why = "the sampling step (srun in Slurm job %s) ended with %s%s" % (
            self.slurm_id, "exit %d" % code if code >= 0 else "signal %d" % -code, ": " + said if said else "")
        raise SourceError(self.ended_why)

    # -- a read

    def read(self, budget):
        if self.process is None:
            self._start()
        lines = self._take_lines(budget)
        now = time.time()
        for line in lines:
            self._take(line, now)
        code = self.process.poll()
        if code is not None and not lines:
            self._ended(code)
        return {"job": self.key, "nodes": sorted(self.latest), "time": now} if lines else None

    def _take_lines(self, budget):
        """The complete lines the step wrote since the last read: waits for the first up to about
        an interval, then takes what is there (a line past LINE_CAP is skipped and counted)."""
        out = self.process.stdout
        lines = []
        wait_s = max(0.0, min(self.interval_s, budget.remaining_s() - self.deadline_s / 4))
        while True:
            ready, _, _ = select.select([out], [], [], wait_s)
            if not ready:
                return lines
            try:
                data = os.read(out.fileno(), 65536)
            except OSError as exc:
                if exc.errno in (errno.EAGAIN, errno.EWOULDBLOCK):
                    return lines
                raise
            if not data:
                return lines  # the step closed its output: poll() says how it ended
            budget.take(len(data))
            pieces = (self._partial + data).split(b"\n")
            self._partial = pieces.pop()
            for piece in pieces:
                if self._skipping:
                    self._skipping = False  # the end of a line that was too long
                elif len(piece) <= LINE_CAP:
                    lines.append(piece)
                else:
                    self.lines_cut += 1
            if len(self._partial) > LINE_CAP:
                self._partial, self._skipping = b"", True
                self.lines_cut += 1
            wait_s = 0.0

    def _take(self, line, now):
        try:
            sample = json.loads(line)
        except ValueError:
            return  # not a sample (a stray line a site's prolog printed)
        if not isinstance(sample, dict) or not isinstance(sample.get("gpus"), list) or not isinstance(sample.get("host"), dict):
            return
        node = sample.get("node")
        if node not in self.nodes:
            return
        sample.setdefault("processes", [])
        sample.setdefault("nvml", {})
        if not isinstance(sample.get("time"), (int, float)):
            sample["time"] = now
        self.latest[node] = (sample, now)
        self.ended_why = None
        self.feed.record(self, node, sample)

    # -- what the host's telemetry sample carries

    def node_figures(self, now, worker):
        """{node: its latest sample with the job, its age and why it is not current}."""
        error = (worker.error if worker is not None else None) or self.ended_why
        figures = {}
        for node in self.nodes:
            sample, came_at = self.latest.get(node, (None, None))
            if sample is None:
                figures[node] = {"node": node, "time": None, "host": {}, "nvml": {"available": False, "reason": "not sampled yet"},
                                 "gpus": [], "processes": [], "age_s": None, "stale": True,
                                 "error": error or "waiting for its first sample (the step is starting)"}
            else:
                age = max(0.0, now - came_at)
                stale = age > self.stale_after_s
                figures[node] = dict(sample, age_s=round(age), stale=stale,
                                     error=error or ("no sample from %s for %d s" % (node, age) if stale else None))
            figures[node].update(job_id=self.key, slurm_job_id=self.slurm_id)
        return figures


class NodeFeed(Feed):
    """`daemon.services.get("nodes")`: the running Slurm jobs' nodes, one sampling step a job."""

    name = node_sample.NODES_SERVICE
    key_field = "job"
    topic_capacity = 64  # stale markers only: the samples go on the telemetry stream

    def __init__(self, daemon):
        super().__init__(daemon)
        self._wanted = {}
        self._jobs_at = 0.0
        self.recorder = node_sample.NodeRecorder(daemon)
        self.directory = os.path.join(paths.state_dir(), "nodes")
        os.makedirs(self.directory, mode=0o700, exist_ok=True)

    def discover(self):
        now = time.monotonic()
        if now - self._jobs_at < JOBS_EVERY_S:
            return self._wanted
        self._jobs_at = now
        wanted = {}
        for job in self.daemon.jobs.list():
            found = slurm_of(job)
            if found is not None:
                wanted[job["id"]] = (found[0], tuple(found[1]))
        for gone in set(self._wanted) - set(wanted):
            self.recorder.end(gone)
        self._wanted = wanted
        return wanted

    def make_source(self, key, spec):
        return NodeStep(key, self, spec)

    def refresh(self):
        """Look at the jobs again now (a Slurm job started or ended)."""
        self._jobs_at = 0.0
        self.daemon.services.wake(self.name)

    # -- what the sources call

    def record(self, source, node, sample):
        """One node's sample: recorded as telemetry (remote/telemetry/node_sample.py)."""
        self.recorder.record(source.key, source.slurm_id, node, sample)

    # -- questions

    def node_samples(self):
        """{node: latest sample, with job_id, slurm_job_id, age_s, stale, error} of every node of
        every running Slurm job (remote/telemetry's samples carry it under `nodes`)."""
        now = time.time()
        figures = {}
        for worker in self.workers():
            figures.update(worker.source.node_figures(now, worker))
        return figures

    def detail_extra(self):
        steps = [w.source for w in self.workers()]
        return {"jobs": len(steps), "nodes": sum(len(s.nodes) for s in steps),
                "step_starts": sum(s.starts for s in steps), "lines_cut": sum(s.lines_cut for s in steps)}


SERVICES = (NodeFeed,)
