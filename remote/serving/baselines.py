"""Acceptance baselines, kept on the host where the regression alert is raised: a server's accept
length and per-position rates saved as the baseline of its (target, drafter) pair (an attached
server's: of its URL), so every later server of that pair (a drafter retrained in place, a new
engine version) is judged against it while no console is open, for every laptop.

    baselines.json: {"entries": [{"target": "/data/k2.5", "drafter": "/ckpt/eagle3", "url": null,
                     "accept_length": 3.1, "per_position": [0.8, 0.6, 0.4], "saved_at": 1764740000.0,
                     "margin": 0.1, "for_s": 600.0, "from": "j4"}]}

Bounded like break_evens.json (break_even_store.py): at most MAX_ENTRIES (the oldest saved is
dropped), keys of at most MAX_KEY characters, values read back only when they are in range.
"""

import math
import os
import threading
import time

from ..core import paths
from ..core.records import read_json, write_json
from .break_even_store import MAX_KEY, target_key, valid_length
from .location import attached_entries

MAX_ENTRIES = 256
MAX_POSITIONS = 32
DEFAULT_MARGIN = 0.10
DEFAULT_FOR_S = 600.0
MAX_FOR_S = 7 * 86400.0
PAIR_CACHE_S = 5.0
VIEW_FIELDS = ("accept_length", "per_position", "saved_at", "margin", "for_s")


def store_path():
    return os.path.join(paths.state_dir(), "baselines.json")


def _number(value):
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def check_margin(margin, for_s):
    """ValueError, in one line, for a margin outside [0, 1) or a duration outside [0, a week]."""
    if not _number(margin) or not 0 <= margin < 1:
        raise ValueError("the margin is a fraction from 0 to under 1 (10%% is 0.1), not %r" % (margin,))
    if not _number(for_s) or not 0 <= for_s <= MAX_FOR_S:
        raise ValueError("the duration is 0 to %d seconds, not %r" % (MAX_FOR_S, for_s))


def pair_key(target=None, drafter=None, url=None):
    """(target, drafter, url) as a baseline is keyed: a served pair's paths without a trailing
    slash, or an attached server's URL; None when neither is known."""
    if url:
        return (None, None, url.rstrip("/"))
    target, drafter = target_key(target), target_key(drafter)
    return (target, drafter, None) if target and drafter else None


def clean_entry(entry):
    """An entry as read back, or None when it is not one."""
    if not isinstance(entry, dict) or not valid_length(entry.get("accept_length")):
        return None
    key = pair_key(entry.get("target") if isinstance(entry.get("target"), str) else None,
                   entry.get("drafter") if isinstance(entry.get("drafter"), str) else None,
                   entry.get("url") if isinstance(entry.get("url"), str) else None)
    if key is None or any(part is not None and len(part) > MAX_KEY for part in key):
        return None
    positions = entry.get("per_position") if isinstance(entry.get("per_position"), list) else []
    margin = entry.get("margin") if _number(entry.get("margin")) and 0 <= entry["margin"] < 1 else DEFAULT_MARGIN
    for_s = entry.get("for_s") if _number(entry.get("for_s")) and 0 <= entry["for_s"] <= MAX_FOR_S else DEFAULT_FOR_S
    return {"target": key[0], "drafter": key[1], "url": key[2], "accept_length": float(entry["accept_length"]),
            "per_position": [float(p) for p in positions[:MAX_POSITIONS] if _number(p) and 0 <= p <= 1],
            "saved_at": entry.get("saved_at") if _number(entry.get("saved_at")) else None, "margin": float(margin),
            "for_s": float(for_s), "from": entry.get("from")[:40] if isinstance(entry.get("from"), str) else None}


def view(entry):
    """What `serving.stats` and `--json` carry: `{accept_length, per_position, saved_at, margin, for_s}`."""
    return dict((field, entry[field]) for field in VIEW_FIELDS) if entry else None


def floor_of(entry):
    """The accept length under which a live figure counts as a regression."""
    return entry["accept_length"] * (1.0 - entry["margin"])


class BaselineStore:
    """The saved baselines; reads are cached until the file or `version` changes."""

    def __init__(self, path=None):
        self._path = path
        self._lock = threading.Lock()
        self._cache = (None, None)  # (file's (mtime, size), entries)
        self._pairs = {}  # server id -> (looked up at, pair key)

    @property
    def path(self):
        return self._path or store_path()

    def entries(self):
        try:
            stat = os.stat(self.path)
            stamp = (stat.st_mtime_ns, stat.st_size)
        except OSError:
            return []
        if self._cache[0] == stamp:
            return list(self._cache[1])
        table = read_json(self.path)
        raw = table.get("entries") if isinstance(table, dict) and isinstance(table.get("entries"), list) else []
        found = [entry for entry in (clean_entry(e) for e in raw[:MAX_ENTRIES]) if entry is not None]
        self._cache = (stamp, found)
        return list(found)

    def of_pair(self, key):
        return next((e for e in self.entries() if (e["target"], e["drafter"], e["url"]) == key), None) if key else None

    def save(self, key, accept_length, per_position, margin, for_s, source=None):
        if key is None:
            raise ValueError("a baseline needs a server with a target and a drafter (or an attached server's URL)")
        if not valid_length(accept_length):
            raise ValueError("a baseline is an accept length above 0, not %r" % (accept_length,))
        check_margin(margin, for_s)
        entry = clean_entry({"target": key[0], "drafter": key[1], "url": key[2], "accept_length": accept_length,
                             "per_position": list(per_position or []), "saved_at": time.time(), "margin": margin,
                             "for_s": for_s, "from": source})
        if entry is None:
            raise ValueError("a baseline's target, drafter or URL is longer than %d characters" % MAX_KEY)
        with self._lock:
            kept = [e for e in self.entries() if (e["target"], e["drafter"], e["url"]) != key] + [entry]
            kept.sort(key=lambda e: e["saved_at"] or 0.0)
            write_json(self.path, {"entries": kept[-MAX_ENTRIES:]})
        return entry

    def remove(self, key):
        with self._lock:
            entries = self.entries()
            kept = [e for e in entries if (e["target"], e["drafter"], e["url"]) != key]
            if len(kept) != len(entries):
                write_json(self.path, {"entries": kept})
            return len(kept) != len(entries)

    def pair_of(self, daemon, server_id):
        """The pair key of a server job (its meta's target and drafter) or an attached server
        (its URL), cached for PAIR_CACHE_S; None for a baseline server or one not known."""
        now = time.monotonic()
        cached = self._pairs.get(server_id)
        if cached is not None and now - cached[0] < PAIR_CACHE_S:
            return cached[1]
        try:
            if server_id.startswith("u"):
                key = pair_key(url=(attached_entries().get(server_id) or {}).get("url"))
            else:
                meta = daemon.jobs.describe(server_id).get("meta") or {}
                key = pair_key(meta.get("target"), meta.get("drafter"))
        except Exception:  # forgotten meanwhile: no baseline this time
            key = None
        if len(self._pairs) > 4 * MAX_ENTRIES:
            self._pairs.clear()
        self._pairs[server_id] = (now, key)
        return key

    def of_server(self, daemon, server_id):
        return self.of_pair(self.pair_of(daemon, server_id))


STORE = BaselineStore()  # the daemon's one store (tests give their own path)
