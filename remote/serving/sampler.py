"""The serving feed (remote/core/feeds.py): every running server job and every attached server
is a source read once a second on a thread of its own: its /metrics scraped within a deadline
and a size cap (scrape.py), the figures of each second published to the `serving` topic and
recorded in the history store (source "serving", labels {"job": id}, at most the RECORDED series
and MAX_POSITIONS positions per server), and the last hour of snapshots kept so any window's
figures can be computed exactly from the counters. A server whose metrics cannot be read is
read from its log instead: vLLM's `SpecDecoding metrics` and SGLang's `accept len:` lines, with
the source said so (and judged stale against the engine's log interval, not the scrape's).
A server whose /metrics has SGLang's gauges is also read as sglang.Server reads it: its log's
decode lines in windows, its gauges as the latest value with their age, its speculative settings.

A server run through Slurm is read at its node (location.py): its source is made once Slurm
runs the job, and asks the node's address (through the Slurm area's service) on its own thread
at its first read, so a slow controller delays that server's figures and no other's.

Attached servers (started some other way, known by URL and optionally a log file) are kept in
attached.json in the agent's state directory, so a restarted daemon samples them again.

Each record carries the server's break-even line, `break_even: {accept_length, source, how}`,
by the one rule (`ServingFeed.break_even`) the notify rules and the fleet summary use too, and
what the served drafter's speculation profile predicts, `predicted` (served_profile.py; None for
a drafter without one), which the notify rule under_predicted compares with the live figures.
"""

import logging
import os
import threading
import time

from ..core import words
from ..core.feed_source import BadSample, FeedSource, SourceError
from ..core.feeds import Feed
from ..core.protocol import RemoteError
from ..core.records import write_json
from . import baselines, location, metrics, root_cause, scrape, served_profile, sglang
from .snapshot_ring import SnapshotRing
from .location import attached_entries, attached_path
from .break_even_store import BreakEvenStore, clean_entry, target_key, valid_length

log = logging.getLogger("specdeck.serving")

SNAPSHOTS_KEPT = 3600  # one an hour at one a second, per server
LOG_TAIL_BYTES = 65536
LOG_STALE_S = 30.0  # engines log their figures every ~10 s: a log figure is stale after three
# Each record also carries the figures over the last RECENT_S seconds (`recent`), computed from
# the counters as `serving.stats` with that window computes them: vLLM updates its counters in
# bursts, so one second's division swings between 0 and several times the rate; ten seconds
# show what a person means by "now".
RECENT_S = 10.0
# What goes to the history store, one series each.
RECORDED = ("accept_length", "draft_acceptance_rate", "accepted_tps", "drafted_tps", "generation_tps", "running",
            "waiting", "kv_cache_usage")
PROFILE_CHECK_S = 30.0  # a profile whose file did not change is read again this often (the drafter's weights may have)
LINE_CACHE_S = 30.0  # a server's break-even is looked up again this often (a benchmark that ended; the job list is read), at once when one is set


def how_it_ended(job, first_error=None):
    """`exited 1: ValueError: ...`: how a server job ended, with the engine's first error line."""
    ended = words.how_it_ended(job)
    return "%s: %s" % (ended, first_error) if first_error else ended


class ServerSource(FeedSource):
    """One server: its snapshots and what it read last."""

    interval_s = 1.0
    deadline_s = 0.8
    max_bytes = 4 << 20  # vLLM's whole /metrics is ~100 KB; room for many ranks and histograms
    max_series = len(RECORDED) + metrics.MAX_POSITIONS
    backoff_s = (1.0, 2.0, 4.0, 5.0)  # a server that is starting answers within seconds of its first try

    def __init__(self, key, url, log_path=None, meta=None, locate=None, started_at=None, line=None, baseline=None, predicted=None):
        super().__init__(key)
        self.predicted = predicted  # () -> what the served drafter's profile predicts (served_profile.read), in each record
        self.baseline = baseline  # () -> the saved baseline of the server's pair (baselines.py), in each record
        self.line = line  # () -> the server's break-even line (the feed's rule), carried in each record
        self.url = url.rstrip("/") if url else None
        # When the server's process started (its job's start; None for an attached server):
        # vLLM's counters count from there, so a window reaching back past it takes them whole.
        self.started_at = started_at
        self.first_kept = True  # the first snapshot ever read is still the oldest kept
        self.locate = locate  # url None: `locate()` gives it (a Slurm server's node), RemoteError if it cannot
        self.log_path = log_path
        self.meta = meta or {}
        self.snapshots = SnapshotRing(SNAPSHOTS_KEPT)
        self.from_log = False
        self.metrics_error = None
        self._last_log_line = None
        self.sglang = None  # an SGLang server's log windows and settings (sglang.Server), from its first read

    @property
    def stale_after_s(self):
        return LOG_STALE_S if self.from_log else self.interval_s + self.deadline_s

    def read(self, budget):
        record = self._read(budget)
        record["break_even"] = self.line() if self.line is not None else None
        record["baseline"] = self.baseline() if self.baseline is not None else None
        record["predicted"] = self.predicted() if self.predicted is not None else None
        return record

    def _read(self, budget):
        now = time.time()
        if self.url is None:
            try:
                self.url = self.locate().rstrip("/")
            except RemoteError as exc:
                raise SourceError(exc.message)
        try:
            snapshot = metrics.parse(scrape.get(self.url + "/metrics", budget).decode("utf-8", "replace"), now)
            if snapshot["engine"] is None:
                # A page that answers (a health check's `ok`, another service) is no fresh window of nothing.
                raise SourceError("%s/metrics has no speculation figures: none of vLLM's or SGLang's series are in it" % self.url)
        except BadSample:
            raise  # the server answered, wrongly: its log is no better a witness
        except (SourceError, ValueError, metrics.MissingParser) as exc:
            reason = str(exc) if isinstance(exc, SourceError) else "could not read %s/metrics: %s" % (self.url, exc)
            self.metrics_error = reason
            record = self._from_log() if self.log_path else None
            if record is None:
                raise SourceError(reason)
            record.update(server=self.key, time=now, error=reason)
            self.from_log = True
            return record
        self.from_log, self.metrics_error = False, None
        previous = self.snapshots[-1] if self.snapshots else None
        if len(self.snapshots) == self.snapshots.maxlen:
            self.first_kept = False
        self.snapshots.append(snapshot)
        record = metrics.window(previous, snapshot)
        record.update(source="metrics", engine=snapshot["engine"], server=self.key, time=now)
        if snapshot["notes"]:
            record["notes"] = snapshot["notes"]
        record["recent"] = self.snapshots.figures(RECENT_S)
        if snapshot["engine"] == "sglang":
            self.sglang = self.sglang or sglang.Server(self.url, self.log_path)
            self.sglang.read(budget, scrape.get)
            record = self.sglang.figures(record, snapshot, RECENT_S)  # its gauges are per interval: a second says nothing more
            record["recent"] = self.sglang.figures(record["recent"], snapshot, RECENT_S)
        return record

    def _from_log(self):
        try:
            with open(self.log_path, "rb") as f:
                f.seek(max(0, os.fstat(f.fileno()).st_size - LOG_TAIL_BYTES))
                text = f.read(LOG_TAIL_BYTES).decode("utf-8", "replace")
        except OSError:
            return None
        lines = [line for line in text.splitlines() if metrics.parse_log_line(line)]
        if not lines or lines[-1] == self._last_log_line:
            return None  # nothing new since the last line we published
        self._last_log_line = lines[-1]
        figures = metrics.parse_log_line(lines[-1])
        figures["source"] = "log"
        figures["per_position"] = figures["per_position"][: metrics.MAX_POSITIONS]
        figures["per_k"] = figures["per_k"][: metrics.MAX_POSITIONS]
        figures["per_position_conditional"] = figures["per_position_conditional"][: metrics.MAX_POSITIONS]
        return figures

    def history_points(self, record):
        labels = {"job": self.key}
        points = [(name, labels, float(record[name])) for name in RECORDED if record.get(name) is not None]
        for position, rate in enumerate((record.get("per_position") or [])[: metrics.MAX_POSITIONS]):
            points.append(("per_position", dict(labels, position=str(position)), float(rate)))
        return points


class ServingFeed(Feed):
    """Publishes `{server, time, source, accept_length, per_position, ..., age_s, stale}` records
    to the `serving` topic once a second per server (`window` keys of remote/serving/metrics.py)."""

    name = "serving"
    key_field = "server"

    def __init__(self, daemon):
        super().__init__(daemon)
        self._attach_lock = threading.Lock()
        self._ended_noted = set()  # server jobs whose end is written in their progress.json
        self.lines = BreakEvenStore()
        self._lines_lock = threading.Lock()
        self._line_cache = {}  # server id -> (looked up at: monotonic, store version, line)
        self._profiles = {}  # server id -> (read at: monotonic, the profile file's signature, prediction)
        self._profiles_lock = threading.Lock()

    # -- which servers

    def attach(self, url, log_path=None, name=None, stall_after_s=None):
        """Watch a server started some other way; returns its id (`u1`, `u2`, ...)."""
        with self._attach_lock:
            attached = attached_entries()
            for server_id, entry in attached.items():
                if entry["url"].rstrip("/") == url.rstrip("/"):
                    return server_id
            number = max([int(k[1:]) for k in attached if k[1:].isdigit()] + [0]) + 1
            server_id = "u%d" % number
            attached[server_id] = {"url": url, "log_path": log_path, "name": name or url, "attached_at": time.time(),
                                   "stall_after_s": stall_after_s}
            write_json(attached_path(), attached)
            return server_id

    def attached_entry(self, server_id):
        """An attached server's entry ({url, log_path, name, attached_at, stall_after_s}), or None."""
        return attached_entries().get(server_id)

    def detach(self, server_id):
        with self._attach_lock:
            attached = attached_entries()
            found = attached.pop(server_id, None) is not None
            write_json(attached_path(), attached)
            return found

    def discover(self):
        """{id: (url, log path, node, port, started at)} of every running server job and
        attached server; a Slurm server's url is None (its source asks where its node is), its
        node given; an attached server's start is not known."""
        targets = {}
        for job in self.daemon.jobs.list(kind="server"):
            meta = job.get("meta") or {}
            if job["process_state"] == "running" and location.is_remote(job) and location.node_of(job) and meta.get("port"):
                targets[job["id"]] = (None, self.daemon.jobs.log_path(job["id"]), location.node_of(job), meta["port"], job.get("started_at"))
            elif job["process_state"] == "running" and meta.get("url"):
                targets[job["id"]] = (meta["url"], self.daemon.jobs.log_path(job["id"]), None, None, job.get("started_at"))
            elif job["process_state"] in ("failed", "lost") and job["id"] not in self._ended_noted:
                self._note_end(job)
        for server_id, entry in attached_entries().items():
            targets[server_id] = (entry["url"], entry.get("log_path"), None, None, None)
        return targets

    def _note_end(self, job):
        """A server that failed gets its end and the engine's first error line in its
        progress.json (`progress.error` of jobs.get and job events), read once from its log:
        the reason is then one line wherever the job is shown, not 140 lines up its log."""
        self._ended_noted.add(job["id"])
        if (job.get("progress") or {}).get("error"):
            return
        try:
            job_dir = self.daemon.jobs.job_dir(job["id"])
            first = root_cause.first_error_in(os.path.join(job_dir, "output.log"))
            write_json(os.path.join(job_dir, "progress.json"), {"error": how_it_ended(job, first), "first_error": first})
        except Exception as exc:  # a job removed meanwhile, a full disk: the status still says it
            log.warning("could not note how server %s ended: %s", job["id"], exc)

    def make_source(self, key, spec):
        url, log_path, node, port, started_at = spec
        locate = None if url else (lambda: location.node_url(self.daemon, node, port))
        return ServerSource(key, url, log_path, locate=locate, started_at=started_at, line=lambda: self.break_even(key),
                            baseline=lambda: baselines.view(baselines.STORE.of_server(self.daemon, key)),
                            predicted=lambda: self.predicted(key))

    def detail_extra(self):
        workers = self.workers()
        reads = sum(w.reads for w in workers)
        cpu_s = sum(w.cpu_s for w in workers)
        # Each scrape's own thread's CPU (time.thread_time), not the daemon's: the cost of reading.
        return {"servers": len(workers), "scrapes": reads, "cpu_ms_per_scrape": round(1000.0 * cpu_s / reads, 3) if reads else None}

    # -- questions from wire methods and other services

    def server_url(self, job):
        """Where a server job answers: `(url, None)`, or `(None, why not yet)` for a Slurm server
        that has no node yet. Other areas (a coverage job over a running server's tokens) ask it
        here, through the service registry."""
        return location.server_url(self.daemon, job)

    @staticmethod
    def builtin_prompts():
        """The benchmark's built-in prompts, for what else sends a server prompts of its own."""
        from .bench import BUILTIN_PROMPTS

        return list(BUILTIN_PROMPTS)

    def break_even(self, server_id):
        """A server's break-even line, `{accept_length, source, how}` (source: `set`, by hand for
        its target, or for an attached server for itself; `server meta`, its job's meta
        `break_even`; `benchmark jN`, the newest A/B benchmark of the same target and drafter, a
        K sweep's row of the server's K), or None when none says. The one rule for everything
        that compares a server with its break-even (the records, the notify rules, the fleet
        summary, advice); looked up again every LINE_CACHE_S, at once after a line is set."""
        now = time.monotonic()
        with self._lines_lock:
            cached = self._line_cache.get(server_id)
            if cached is not None and now - cached[0] < LINE_CACHE_S and cached[1] == self.lines.version:
                return cached[2]
            version = self.lines.version
        try:
            line = self._look_up_break_even(server_id)
        except Exception as exc:  # a job store being rewritten: no line this time, the figures still go out
            log.warning("could not look up the break-even of %s: %s", server_id, exc)
            line = None
        with self._lines_lock:
            self._line_cache[server_id] = (now, version, line)
        return line

    def predicted(self, server_id):
        """What the speculation profile beside a server job's drafter predicts at the server's K
        (served_profile.read: with its age, conditions, notes, or `error` when refused), or None
        (no drafter, no profile, an attached server). Read again when the file changes, and
        every PROFILE_CHECK_S (the drafter's weights may change under it)."""
        if server_id.startswith("u"):
            return None
        now = time.monotonic()
        with self._profiles_lock:
            cached = self._profiles.get(server_id)
        if cached is not None and now - cached[0] < PROFILE_CHECK_S and (cached[3] is None or served_profile.signature(cached[3]) == cached[1]):
            return cached[2]
        try:
            meta = self.daemon.jobs.describe(server_id).get("meta") or {}
        except Exception:  # forgotten meanwhile
            return None
        path = served_profile.path_of(meta.get("drafter"))
        if path is None:  # no drafter, or one named by hub id: nothing beside it here
            with self._profiles_lock:
                self._profiles[server_id] = (now, None, None, None)
            return None
        signature = served_profile.signature(path)
        try:
            view = served_profile.read(meta.get("drafter"), meta.get("k"), meta.get("target"))
        except Exception as exc:  # whatever a file does, the figures still go out, the profile refused
            log.warning("could not read the profile of %s's drafter: %s", server_id, exc)
            view = {"path": path, "error": "%s refused: %s" % (served_profile.FILE_NAME, exc), "accept_length": None, "per_position": []}
        with self._profiles_lock:
            self._profiles[server_id] = (now, signature, view, path)
        return view

    def _look_up_break_even(self, server_id):
        if server_id.startswith("u"):
            entry = clean_entry((attached_entries().get(server_id) or {}).get("break_even"))
            return _line(entry["accept_length"], "set", entry["how"]) if entry else None
        try:
            meta = self.daemon.jobs.describe(server_id).get("meta") or {}
        except Exception:  # forgotten meanwhile
            return None
        entry = self.lines.of(meta.get("target"))
        if entry is not None:
            return _line(entry["accept_length"], "set", entry["how"])
        if valid_length(meta.get("break_even")):
            return _line(meta["break_even"], "server meta")
        if not meta.get("drafter"):
            return None
        for bench in reversed(self.daemon.jobs.list(kind="benchmark")):
            result = (bench.get("progress") or {}).get("result") or {}
            bench_meta = bench.get("meta") or {}
            if (target_key(bench_meta.get("target")), bench_meta.get("drafter")) != (target_key(meta.get("target")), meta.get("drafter")):
                continue
            if result.get("sweep"):  # a sweep's break-evens are per K: the row of the server's K
                rows = [row for row in result["sweep"] if isinstance(row, dict) and row.get("k") == meta.get("k")]
                value = rows[0].get("break_even_accept_length") if rows else None
            else:
                value = result.get("break_even_accept_length")
            if valid_length(value):
                return _line(value, "benchmark %s" % bench["id"])
        return None

    def set_break_even(self, server_id=None, target=None, accept_length=None, how=None):
        """Set (accept_length None: remove) the line set by hand for a server's target (an
        attached server's for itself), or for `target`; returns (what it holds for: the target
        or the attached server's id, the entry or None). ValueError for a server job without a
        target or a value out of bounds; KeyError for an attached server not known."""
        if server_id is not None and server_id.startswith("u"):
            if accept_length is not None and not valid_length(accept_length):
                raise ValueError("break-even is an accept length above 0, not %r" % (accept_length,))
            with self._attach_lock:
                attached = attached_entries()
                if server_id not in attached:
                    raise KeyError(server_id)
                entry = {"accept_length": float(accept_length), "how": how, "set_at": time.time()} if accept_length is not None else None
                attached[server_id]["break_even"] = entry
                write_json(attached_path(), attached)
                self.lines.version += 1
            return server_id, clean_entry(entry)
        if server_id is not None:
            target = (self.daemon.jobs.describe(server_id).get("meta") or {}).get("target")
            if target_key(target) is None:
                raise ValueError("server %s has no target model: its break-even cannot be kept for one" % server_id)
        return target_key(target), self.lines.set(target, accept_length, how)

    def server(self, server_id):
        return self.source(server_id)

    def window_figures(self, server_id, window_s=None):
        """The figures over the last `window_s` seconds (None: the server's whole life, or
        since the feed first read it when its start is not known), from the kept snapshots, with
        `age_s` and `stale` of the newest; a log-read server gives its last line's figures."""
        worker = next((w for w in self.workers() if w.source.key == server_id), None)
        if worker is None:
            return None
        server = worker.source
        snapshots = server.snapshots
        if server.from_log or not snapshots:
            if worker.latest is not None:
                figures = dict((k, v) for k, v in worker.latest.items() if k != "recent")
                figures["break_even"] = self.break_even(server_id)
                figures["predicted"] = self.predicted(server_id)
                return self.aged(worker, figures)
            return {"server": server_id, "source": None, "error": worker.error or server.metrics_error, "age_s": None, "stale": True,
                    "break_even": self.break_even(server_id), "predicted": self.predicted(server_id)}
        figures = snapshots.figures(window_s, origin=_origin(server, snapshots, window_s))
        figures["server"] = server_id
        newest = snapshots[-1]
        now = time.time()
        age = max(0.0, now - newest["time"])
        if newest["engine"] == "sglang" and server.sglang is not None:
            figures = server.sglang.figures(figures, newest, window_s)
        figures.update(age_s=round(age, 3), stale=age > server.stale_after_s, break_even=self.break_even(server_id),
                       predicted=self.predicted(server_id))
        if worker.error:
            figures["error"] = worker.error
        return figures


def _line(accept_length, source, how=None):
    return {"accept_length": float(accept_length), "source": source, "how": how}


def _origin(server, snapshots, window_s):
    """A snapshot of zeros at the server's start, when the window reaches back past it and
    nothing read since is lost: vLLM's counters count from its start, so what it did before the
    sampler's first read (a burst right after it turned ready) is in the window too. None else
    (an SGLang server's gauges, an attached server, an hour-old server whose first reads fell out)."""
    start, newest = server.started_at, snapshots[-1]
    if start is None or not server.first_kept or newest["engine"] != "vllm" or start > snapshots[0]["time"]:
        return None
    if window_s is not None and newest["time"] - window_s > start:
        return None
    first = snapshots[0]
    return {"time": start, "engine": first["engine"], "counters": dict.fromkeys(first["counters"], 0.0),
            "per_position": dict.fromkeys(first["per_position"], 0.0), "gauges": {}, "notes": []}


def figures_over(snapshots, window_s=None, origin=None):
    """SnapshotRing.figures of a list of snapshots (oldest first)."""
    return SnapshotRing.of(snapshots).figures(window_s, origin)
