"""A server's last hour of /metrics snapshots, and the figures of any window of it in the time of
one: the counters are cumulative, so a window's figures need only its first snapshot and the
newest. The first is found by binary search over the snapshots' times (kept beside them in a
fixed ring, as their running maximum: a wall clock stepped back never unsorts them); a counter
reset inside the window (a restarted engine) is folded in from running sums of the counts lost
at each reset, kept per snapshot as they are read (a new dict only when a reset happens), so no
window walks its snapshots. Nothing is copied per read. The sampler's thread appends while a
wire method's thread asks for a window: a lock keeps a window from reading a slot being reused.
"""

import threading

from . import metrics


class SnapshotRing:
    """The newest `maxlen` snapshots, oldest first: `append`, `len`, `[i]` (i from either end),
    and `figures(window_s, origin)`."""

    def __init__(self, maxlen):
        self.maxlen = maxlen
        self._snapshots = [None] * maxlen
        self._times = [0.0] * maxlen  # running maximum of the snapshots' times: sorted
        self._lost = [None] * maxlen  # (counters, per_position) lost at resets up to this snapshot, cumulative
        self._head = 0  # the physical index of the oldest
        self._count = 0
        self._lock = threading.Lock()

    @classmethod
    def of(cls, snapshots):
        """A ring holding `snapshots` (oldest first), for a caller that has them as a list."""
        ring = cls(max(1, len(snapshots)))
        for snapshot in snapshots:
            ring.append(snapshot)
        return ring

    def __len__(self):
        return self._count

    def __getitem__(self, index):
        if index < 0:
            index += self._count
        if not 0 <= index < self._count:
            raise IndexError("snapshot index out of range")
        return self._snapshots[(self._head + index) % self.maxlen]

    def __iter__(self):
        return (self[i] for i in range(self._count))

    def append(self, snapshot):
        with self._lock:
            self._append(snapshot)

    def _append(self, snapshot):
        if self._count:
            newest = (self._head + self._count - 1) % self.maxlen
            previous, lost, time_key = self._snapshots[newest], self._lost[newest], max(self._times[newest], snapshot["time"])
            lost = _after_resets(lost, previous, snapshot)
        else:
            lost, time_key = ({}, {}), snapshot["time"]
        if self._count == self.maxlen:
            self._head = (self._head + 1) % self.maxlen
        else:
            self._count += 1
        slot = (self._head + self._count - 1) % self.maxlen
        self._snapshots[slot], self._times[slot], self._lost[slot] = snapshot, time_key, lost

    def first_within(self, window_s):
        """The index of the oldest snapshot taken within `window_s` of the newest."""
        cutoff = self._times[(self._head + self._count - 1) % self.maxlen] - window_s
        low, high = 0, self._count - 1
        while low < high:
            middle = (low + high) // 2
            if self._times[(self._head + middle) % self.maxlen] >= cutoff:
                high = middle
            else:
                low = middle + 1
        return low

    def figures(self, window_s=None, origin=None):
        """The figures of the last `window_s` seconds (None: all kept): the window starts at the
        oldest snapshot taken within `window_s` of the newest, so the same snapshots give the same
        figures to every asker (a follower's `recent`, `serving.stats`). `origin` (a snapshot of
        zeros at the server's start) starts the window instead, when given."""
        with self._lock:
            return self._figures(window_s, origin)

    def _figures(self, window_s, origin):
        newest = self[-1]
        first = 0 if window_s is None or origin is not None else self.first_within(window_s)
        oldest = origin if origin is not None else self[first]
        start = None  # one snapshot: no window yet
        if oldest is not newest:
            start = _rebased(oldest, self._lost[(self._head + first) % self.maxlen], self._lost[(self._head + self._count - 1) % self.maxlen])
        figures = metrics.window(start, newest)
        figures.update(source="metrics", engine=newest["engine"], time=newest["time"],
                       reset=figures["reset"] or (start is not None and start is not oldest))
        if newest.get("notes"):
            figures["notes"] = newest["notes"]
        return figures


def _after_resets(lost, before, after):
    """The running sums of counts lost at resets, with those of `before` -> `after` added: the
    same (shared) pair when no counter went down."""
    counters, positions = lost
    grown = None
    for kind, (old, new) in enumerate(((before["counters"], after["counters"]), (before["per_position"], after["per_position"]))):
        for field, value in old.items():
            if new.get(field, value) < value:
                if grown is None:
                    grown = (dict(counters), dict(positions))
                grown[kind][field] = grown[kind].get(field, 0.0) + value
    return grown or lost


def _rebased(start, lost_at_start, lost_at_newest):
    """The window's start snapshot, with any counter reset inside the window folded in: the counts
    before a reset are taken off the start so the window's growth is the sum of the parts."""
    if lost_at_start is lost_at_newest:
        return start
    parts = []
    for kind, key in enumerate(("counters", "per_position")):
        at_start, at_newest = lost_at_start[kind], lost_at_newest[kind]
        lost = {f: v - at_start.get(f, 0.0) for f, v in at_newest.items() if v != at_start.get(f, 0.0)}
        parts.append({f: start[key].get(f, 0.0) - lost.get(f, 0.0) for f in set(start[key]) | set(lost)})
    return dict(start, counters=parts[0], per_position=parts[1])
