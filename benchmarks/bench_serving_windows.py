"""What a server's windows cost the sampler each second: before, every record's `recent` figures
copied the kept hour of snapshots (up to 3600) into a list and walked it; now they come from the
snapshot ring (remote/serving/snapshot_ring.py): a binary search for the window's first snapshot
and the running sums of counts lost at resets, nothing copied. Same snapshots, same run, side by
side; the figures of both ways are checked equal.

  python benchmarks/bench_serving_windows.py

Rows: `recent` (10 s, each record, once a second per server), serving.stats over 5 min and over
the whole hour, each with a full hour kept (3600 snapshots of the /metrics a real vLLM wrote,
one a second, an engine restart half an hour ago). Per call in microseconds; ratio before / now.
"""

import collections
import os
import sys
import time
import timeit

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from benchmarks.bench_serving import grown  # noqa: E402
from remote.serving import metrics  # noqa: E402
from remote.serving.sampler import RECENT_S, SNAPSHOTS_KEPT  # noqa: E402
from remote.serving.snapshot_ring import SnapshotRing  # noqa: E402


# ---- before: the sampler's window as it was (a copy of the kept hour, walked from the newest back)

def figures_before(snapshots, window_s=None):
    newest = snapshots[-1]
    first = 0
    if window_s is not None:
        first = len(snapshots) - 1
        while first > 0 and snapshots[first - 1]["time"] >= newest["time"] - window_s:
            first -= 1
        snapshots = snapshots[first:]
    oldest = snapshots[0]
    start = rebased_before(snapshots, oldest) if oldest is not newest else None
    figures = metrics.window(start, newest)
    figures.update(source="metrics", engine=newest["engine"], time=newest["time"],
                   reset=figures["reset"] or (start is not None and start is not oldest))
    if newest.get("notes"):
        figures["notes"] = newest["notes"]
    return figures


def rebased_before(snapshots, oldest):
    start, index, lost, lost_positions = oldest, snapshots.index(oldest), {}, {}
    for before, after in zip(snapshots[index:], snapshots[index + 1:]):
        for field, value in before["counters"].items():
            if after["counters"].get(field, value) < value:
                lost[field] = lost.get(field, 0.0) + value
        for position, value in before["per_position"].items():
            if after["per_position"].get(position, value) < value:
                lost_positions[position] = lost_positions.get(position, 0.0) + value
    if not lost and not lost_positions:
        return start
    counters = {f: start["counters"].get(f, 0.0) - lost.get(f, 0.0) for f in set(start["counters"]) | set(lost)}
    per_position = {p: start["per_position"].get(p, 0.0) - lost_positions.get(p, 0.0) for p in set(start["per_position"]) | set(lost_positions)}
    return dict(start, counters=counters, per_position=per_position)


def hour_of_snapshots(seconds=SNAPSHOTS_KEPT):
    """Snapshots a second apart: the real /metrics text, its counters growing each second, the
    engine restarted at second 1800 (its counters from zero again)."""
    base = metrics.parse(grown(1), 0.0)
    snapshots = []
    for second in range(seconds):
        factor = 1 + (second if second < 1800 else second - 1800)
        snapshots.append(dict(base, time=1.0e9 + second, counters={k: v * factor for k, v in base["counters"].items()},
                              per_position={p: v * factor for p, v in base["per_position"].items()}))
    return snapshots


def per_second(snapshots, calls=1000):
    """The sampler's work of one second with an hour kept, each way: keep the new snapshot,
    compute the record's `recent` figures (before: a deque, copied to a list and walked)."""
    kept = collections.deque(snapshots[:SNAPSHOTS_KEPT], maxlen=SNAPSHOTS_KEPT)
    ring = SnapshotRing.of(snapshots[:SNAPSHOTS_KEPT])
    fresh = snapshots[SNAPSHOTS_KEPT:SNAPSHOTS_KEPT + calls]
    began = time.perf_counter()
    for snapshot in fresh:
        kept.append(snapshot)
        before = figures_before(list(kept), RECENT_S)
    before_s = (time.perf_counter() - began) / len(fresh)
    began = time.perf_counter()
    for snapshot in fresh:
        ring.append(snapshot)
        now = ring.figures(RECENT_S)
    now_s = (time.perf_counter() - began) / len(fresh)
    assert before == now
    return before_s, now_s


def main():
    snapshots = hour_of_snapshots(SNAPSHOTS_KEPT + 1000)
    before_s, now_s = per_second(snapshots)
    print("%-34s %12s %12s %8s" % ("per server, 3600 snapshots kept", "before us", "now us", "ratio"))
    print("%-34s %12.1f %12.1f %8.1f" % ("each second: keep one, `recent`", before_s * 1e6, now_s * 1e6, before_s / now_s))
    snapshots = snapshots[:SNAPSHOTS_KEPT]
    ring = SnapshotRing.of(snapshots)
    kept = snapshots  # what the deque held: `list(self.snapshots)` copied it each time
    for label, window_s in (("recent, 10 s, every second", RECENT_S), ("serving.stats, 5 min", 300.0), ("serving.stats, the hour", None)):
        assert figures_before(list(kept), window_s) == ring.figures(window_s), label
        runs = 200 if window_s is not None and window_s < 60 else 20
        before = min(timeit.repeat(lambda: figures_before(list(kept), window_s), number=runs, repeat=5)) / runs
        now = min(timeit.repeat(lambda: ring.figures(window_s), number=runs, repeat=5)) / runs
        print("%-34s %12.1f %12.1f %8.1f" % (label, before * 1e6, now * 1e6, before / now))


if __name__ == "__main__":
    main()
