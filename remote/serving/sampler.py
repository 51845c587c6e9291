"""The speculation sampler: a daemon service that reads every running server job's /metrics
(and every attached server's) once a second, publishes the figures of each second to the
`serving` topic, records them in the history store (source "serving", labels {"job": id}),
and keeps the last hour of snapshots so any window's figures can be computed exactly from the
counters. A server whose metrics cannot be reached is read from its log instead: vLLM's
`SpecDecoding metrics` and SGLang's `accept len:` lines, with the source said so.

Attached servers (started some other way, known by URL and optionally a log file) are kept in
attached.json in the agent's state directory, so a restarted daemon samples them again.
"""

import collections
import os
import threading
import time

from ..core import paths
from ..core.jobs import read_json, write_json
from ..core.services import Service
from ..core.streams import Topic
from . import engines, metrics

SNAPSHOTS_KEPT = 3600  # one an hour at one a second, per server
SCRAPE_TIMEOUT_S = 0.8
LOG_TAIL_BYTES = 65536
# What goes to the history store, one series each.
RECORDED = ("accept_length", "draft_acceptance_rate", "accepted_tps", "drafted_tps", "generation_tps", "running",
            "waiting", "kv_cache_usage")


def attached_path():
    return os.path.join(paths.state_dir(), "attached.json")


class Server:
    """One server the sampler watches: its snapshots and what it read last."""

    def __init__(self, server_id, url, log_path=None, meta=None):
        self.id = server_id
        self.url = url.rstrip("/")
        self.log_path = log_path
        self.meta = meta or {}
        self.snapshots = collections.deque(maxlen=SNAPSHOTS_KEPT)
        self.latest = None  # the last record published
        self.source = None
        self.error = None
        self._last_log_line = None


class SpeculationSampler(Service):
    """Publishes `{server, time, source, accept_length, per_position, ...}` records to the
    `serving` topic once a second per server (`window` keys of remote/serving/metrics.py)."""

    name = "speculation"
    interval_s = 1.0

    def __init__(self, daemon):
        self.daemon = daemon
        self.topic = daemon.topics.setdefault("serving", Topic("serving"))
        self.servers = {}
        self._lock = threading.Lock()
        self.scrape_cpu_s = 0.0
        self.scrapes = 0

    # -- which servers

    def attach(self, url, log_path=None, name=None):
        """Watch a server started some other way; returns its id (`u1`, `u2`, ...)."""
        with self._lock:
            attached = read_json(attached_path()) or {}
            for server_id, entry in attached.items():
                if entry["url"].rstrip("/") == url.rstrip("/"):
                    return server_id
            number = max([int(k[1:]) for k in attached if k[1:].isdigit()] + [0]) + 1
            server_id = "u%d" % number
            attached[server_id] = {"url": url, "log_path": log_path, "name": name or url, "attached_at": time.time()}
            write_json(attached_path(), attached)
            return server_id

    def detach(self, server_id):
        with self._lock:
            attached = read_json(attached_path()) or {}
            found = attached.pop(server_id, None) is not None
            write_json(attached_path(), attached)
            self.servers.pop(server_id, None)
            return found

    def _targets(self):
        """{id: (url, log path, meta)} of every running server job and attached server."""
        targets = {}
        for job in self.daemon.jobs.list(kind="server"):
            meta = job.get("meta") or {}
            if job["process_state"] == "running" and meta.get("url"):
                targets[job["id"]] = (meta["url"], self.daemon.jobs.log_path(job["id"]), meta)
        for server_id, entry in (read_json(attached_path()) or {}).items():
            targets[server_id] = (entry["url"], entry.get("log_path"), dict(entry, attached=True))
        return targets

    # -- the service

    def step(self):
        began_cpu = time.process_time()
        targets = self._targets()
        with self._lock:
            for server_id in set(self.servers) - set(targets):
                del self.servers[server_id]
            for server_id, (url, log_path, meta) in targets.items():
                if server_id not in self.servers:
                    self.servers[server_id] = Server(server_id, url, log_path, meta)
            servers = list(self.servers.values())
        for server in servers:
            self._sample(server)
        self.scrape_cpu_s += time.process_time() - began_cpu
        self.scrapes += len(servers)

    def detail(self):
        return {"servers": len(self.servers), "scrapes": self.scrapes,
                "cpu_ms_per_scrape": 1000.0 * self.scrape_cpu_s / self.scrapes if self.scrapes else None}

    def _sample(self, server):
        now = time.time()
        status, body = engines.http_get(server.url + "/metrics", SCRAPE_TIMEOUT_S)
        record = None
        if status == 200:
            try:
                snapshot = metrics.parse(body.decode("utf-8", "replace"), now)
            except (ValueError, metrics.MissingParser) as exc:
                server.error = "could not read /metrics: %s" % exc
                snapshot = None
            if snapshot is not None:
                previous = server.snapshots[-1] if server.snapshots else None
                server.snapshots.append(snapshot)
                record = metrics.window(previous, snapshot)
                record["source"] = "metrics"
                record["engine"] = snapshot["engine"]
                server.error = None
        else:
            server.error = "%s/metrics did not answer (%s)" % (server.url, "HTTP %s" % status if status else "no connection")
        if record is None and server.log_path:
            record = self._from_log(server)
        if record is None:
            return
        record.update(server=server.id, time=now)
        server.latest, server.source = record, record["source"]
        self.topic.publish(record)
        self._record_history(server.id, record, now)

    def _from_log(self, server):
        try:
            with open(server.log_path, "rb") as f:
                f.seek(max(0, os.fstat(f.fileno()).st_size - LOG_TAIL_BYTES))
                text = f.read().decode("utf-8", "replace")
        except OSError:
            return None
        lines = [line for line in text.splitlines() if metrics.parse_log_line(line)]
        if not lines or lines[-1] == server._last_log_line:
            return None  # nothing new since the last line we published
        server._last_log_line = lines[-1]
        figures = metrics.parse_log_line(lines[-1])
        figures["source"] = "log"
        return figures

    def _record_history(self, server_id, record, now):
        store = getattr(self.daemon, "history", None)
        if store is None:
            return
        labels = {"job": server_id}
        for name in RECORDED:
            if record.get(name) is not None:
                store.add("serving", name, labels, float(record[name]), now)
        for position, rate in enumerate(record.get("per_position") or []):
            store.add("serving", "per_position", dict(labels, position=str(position)), float(rate), now)

    # -- questions from wire methods

    def server(self, server_id):
        with self._lock:
            return self.servers.get(server_id)

    def window_figures(self, server_id, window_s=None):
        """The figures over the last `window_s` seconds (None: since the sampler first read the
        server), from the kept snapshots; a log-read server gives its last line's figures."""
        server = self.server(server_id)
        if server is None:
            return None
        snapshots = list(server.snapshots)
        if not snapshots:
            return dict(server.latest) if server.latest else {"source": None, "error": server.error}
        newest = snapshots[-1]
        oldest = snapshots[0]
        if window_s is not None:
            for snapshot in snapshots:
                if snapshot["time"] >= newest["time"] - window_s:
                    oldest = snapshot
                    break
        start = _rebased(snapshots, oldest) if oldest is not newest else None  # one snapshot: no window yet
        figures = metrics.window(start, newest)
        figures.update(source="metrics", engine=newest["engine"], server=server_id, time=newest["time"],
                       reset=figures["reset"] or (start is not None and start is not oldest))
        if server.error:
            figures["error"] = server.error
        return figures

    def snapshot(self):
        """The latest record of every server (what a new `serving.follow` subscriber sees first)."""
        with self._lock:
            return {server_id: server.latest for server_id, server in self.servers.items() if server.latest}


def _rebased(snapshots, oldest):
    """The window's start snapshot, with any counter reset inside the window folded in: the
    counts before a reset are added to the start so the window's growth is the sum of the parts."""
    start = oldest
    index = snapshots.index(oldest)
    lost = {}
    lost_positions = {}
    for before, after in zip(snapshots[index:], snapshots[index + 1 :]):
        for field, value in before["counters"].items():
            if after["counters"].get(field, value) < value:
                lost[field] = lost.get(field, 0.0) + value
        for position, value in before["per_position"].items():
            if after["per_position"].get(position, value) < value:
                lost_positions[position] = lost_positions.get(position, 0.0) + value
    if not lost and not lost_positions:
        return start
    # Growth before each reset counts too: start from (start - all counts lost at resets).
    counters = {f: start["counters"].get(f, 0.0) - lost.get(f, 0.0) for f in set(start["counters"]) | set(lost)}
    per_position = {p: start["per_position"].get(p, 0.0) - lost_positions.get(p, 0.0) for p in set(start["per_position"]) | set(lost_positions)}
    return dict(start, counters=counters, per_position=per_position)


def attached_entries():
    return read_json(attached_path()) or {}
