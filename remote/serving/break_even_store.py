"""Break-even lines set by hand, kept on the host where the alert that compares a server with
its line is raised: one per target model (every server of that target, whoever started it),
in break_evens.json in the agent's state directory, so the line holds while no console is
open, across daemon restarts, and for every laptop. An attached server (no target known) keeps
its line in its attached.json entry instead (remote/serving/sampler.py), gone when it is detached.

    {"/data/k2.5": {"accept_length": 2.46, "how": "30 ms x 82 tok/s", "set_at": 1764740000.0}}

Bounded: at most MAX_TARGETS lines (the oldest set is dropped), keys of at most MAX_KEY
characters, values read back only when they are positive finite numbers under MAX_LENGTH.
"""

import math
import os
import threading
import time

from ..core import paths
from ..core.records import read_json, write_json

MAX_TARGETS = 256
MAX_KEY = 4096
MAX_HOW = 80
MAX_LENGTH = 1000.0  # accept lengths are tokens per cycle: K+1 at most, K is tens at most


def store_path():
    return os.path.join(paths.state_dir(), "break_evens.json")


def target_key(target):
    """A target's key: its path (or hub id) without a trailing slash; None when not known."""
    key = target.rstrip("/") if isinstance(target, str) else None
    return key or None


def valid_length(value):
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value) and 0 < value <= MAX_LENGTH


def clean_entry(entry):
    """An entry as read back: `{accept_length, how, set_at}`, or None when it is not one."""
    if not isinstance(entry, dict) or not valid_length(entry.get("accept_length")):
        return None
    how = entry.get("how") if isinstance(entry.get("how"), str) else None
    set_at = entry.get("set_at") if isinstance(entry.get("set_at"), (int, float)) else None
    return {"accept_length": float(entry["accept_length"]), "how": how[:MAX_HOW] if how else None, "set_at": set_at}


class BreakEvenStore:
    """The lines set by hand, per target; `version` grows with every change (readers that cache
    a server's line ask again when it moved)."""

    def __init__(self, path=None):
        self._path = path
        self._lock = threading.Lock()
        self.version = 0

    @property
    def path(self):
        return self._path or store_path()

    def entries(self):
        table = read_json(self.path)
        if not isinstance(table, dict):
            return {}
        found = {}
        for key, entry in table.items():
            cleaned = clean_entry(entry)
            if isinstance(key, str) and len(key) <= MAX_KEY and cleaned is not None:
                found[key] = cleaned
        return found

    def of(self, target):
        key = target_key(target)
        return self.entries().get(key) if key else None

    def set(self, target, accept_length, how=None):
        """Set (or with accept_length None, remove) a target's line; returns the entry or None."""
        key = target_key(target)
        if key is None or len(key) > MAX_KEY:
            raise ValueError("a break-even line needs a target of at most %d characters" % MAX_KEY)
        if accept_length is not None and not valid_length(accept_length):
            raise ValueError("break-even is an accept length above 0 (at most %g), not %r" % (MAX_LENGTH, accept_length))
        with self._lock:
            table = self.entries()
            table.pop(key, None)
            entry = None
            if accept_length is not None:
                entry = {"accept_length": float(accept_length), "how": (how or None) and how[:MAX_HOW], "set_at": time.time()}
                table[key] = entry
                while len(table) > MAX_TARGETS:
                    del table[min(table, key=lambda k: table[k].get("set_at") or 0.0)]
            write_json(self.path, table)
            self.version += 1
            return entry
