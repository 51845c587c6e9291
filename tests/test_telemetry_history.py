"""The history store on real SQLite files: tiers that keep spikes, windows across tier seams,
its size after a simulated week, a corrupt file (kept aside) or a locked one (kept, waited
for), and the store inside a real daemon that is killed, restarted, has its file locked under
it and is started while another process holds it locked."""

import glob
import os
import re
import signal
import socket
import subprocess
import sys
import time

import pytest

from remote.core import paths
from remote.history.store import HistoryStore, StoreUnavailable, default_tiers
from remote.core.protocol import FrameReader, encode
from tests.helpers.cli import REPO_ROOT, daemon_pid
from tests.helpers.waits import wait_for
from tests.history_fixtures import SimulatedGpus

DAY_S = 86400
START = 1_749_999_600.0  # an hour boundary


class Clock:
    def __init__(self, now=START):
        self.now = now

    def __call__(self):
        return self.now


def open_store(tmp_path, clock, **options):
    return HistoryStore(str(tmp_path / "history.sqlite"), clock=clock, **options).open()


def record_line(store, clock, seconds, value=lambda t: t, every_s=1, flush_every_s=60):
    """One series ("test", "line") whose value at time t is value(t); service steps between."""
    end = clock.now + seconds
    while clock.now < end:
        store.add("test", "line", {"unit": "a"}, value(clock.now), clock.now)
        clock.now += every_s
        if (clock.now - START) % flush_every_s == 0 or clock.now >= end:
            store.flush()
            while store.maintain():
                pass


def points(store, start, end, resolution_s, name="line"):
    series, used = store.query("test", name, None, start, end, resolution_s)
    assert len(series) == 1
    return series[0]["points"], used


def test_a_one_second_spike_is_the_max_of_its_minute_a_day_later(tmp_path):
    clock = Clock()
    store = open_store(tmp_path, clock, tiers=default_tiers(raw_s=3600, ten_seconds_s=4 * 3600))
    spike_at = START + 1800 + 17
    record_line(store, clock, 3600, value=lambda t: 900.0 if t == spike_at else 40.0 + (t % 7))
    record_line(store, clock, DAY_S, value=lambda t: 40.0 + (t % 7), every_s=60, flush_every_s=3600)
    # Raw points and 10 s buckets of that hour have aged out; the minute keeps the spike.
    marks = store.marks()
    assert marks["kept_raw"] > spike_at and marks["kept_10s"] > spike_at
    minute = START + 1800
    found, used = points(store, minute, minute + 60, 60)
    assert used == 60 and len(found) == 1
    t, low, mean, high = found[0]
    assert (t, low, high) == (minute, 40.0, 900.0)
    assert 40 < mean < 60  # the mean of the minute, the spike one sample of 60
    # An hour at screen resolution: the spike is the max of its group, the others stay low.
    hour, _ = points(store, START, START + 3600, 300)
    assert [p[3] for p in hour].count(900.0) == 1 and max(p[3] for p in hour if p[3] != 900.0) == 46.0


def test_a_window_across_tiers_has_no_hole_and_no_double_point(tmp_path):
    clock = Clock()
    store = open_store(tmp_path, clock, tiers=default_tiers(raw_s=600, ten_seconds_s=1800, one_minute_s=DAY_S))
    record_line(store, clock, 2 * 3600 + 25, flush_every_s=5)  # value = time, at 1 Hz
    marks = store.marks()
    # Raw only for the last ~10 minutes, 10 s buckets for ~30, the rest in 1 min buckets; the
    # newest 10 s and minute are not rolled up yet, and the two seams are not minute-aligned.
    assert START + 3600 < marks["kept_10s"] < marks["kept_raw"] < marks["rolled_10s"] < clock.now
    assert marks["rolled_10s"] % 60 != 0
    end = clock.now
    by_minute, _ = points(store, START, end, 60)
    assert [p[0] for p in by_minute] == [START + 60 * i for i in range(len(by_minute))]
    assert by_minute[-1][0] == (end - 1) // 60 * 60
    for t, low, mean, high in by_minute[:-1]:  # whole minutes, whichever tiers they came from
        assert (low, mean, high) == (t, t + 29.5, t + 59)
    # At 1 s: 1 min buckets, then 10 s buckets, then every raw point, in order.
    fine, used = points(store, end - 3600, end, 1)
    assert used == 1
    times = [p[0] for p in fine]
    assert times == sorted(set(times))
    steps = [b - a for a, b in zip(times, times[1:])]
    assert set(steps) == {60, 10, 1}
    assert times[-1] == end - 1 and fine[-1][1:] == [end - 1] * 3  # raw: min = mean = max
    assert all(fine[i][1] == times[i] for i in range(len(fine)))  # each group starts at its min


def test_a_late_point_is_folded_into_buckets_already_rolled(tmp_path):
    clock = Clock()
    store = open_store(tmp_path, clock)
    record_line(store, clock, 600, value=lambda t: 5.0)
    store.add("test", "line", {"unit": "a"}, 77.0, START + 65.5)  # a sampler that lagged 9 minutes
    store.flush()
    found, _ = points(store, START + 60, START + 120, 60)
    assert found == [[START + 60, 5.0, (5.0 * 60 + 77.0) / 61, 77.0]]
    assert points(store, START + 60, START + 70, 10)[0][0][3] == 77.0


def test_queries_stay_bounded_and_latest_and_series_say_what_is_recorded(tmp_path):
    clock = Clock()
    store = open_store(tmp_path, clock)
    for gpu in range(3):
        store.add_many([("gpu", "power_w", {"gpu": gpu}, 100.0 + gpu + i, START + i) for i in range(3000)])
    store.add("gpu", "power_w", {"gpu": "0"}, float("nan"), START + 5000)  # a sensor that failed: skipped
    clock.now = START + 3000
    store.flush()
    found, used = store.query("gpu", "power_w", None, START, START + 3000, 0.001)
    assert len(found) == 3 and used == 3000 / 5000
    assert all(len(s["points"]) <= 5000 for s in found)
    one, _ = store.query("gpu", "power_w", {"gpu": 2}, START, START + 3000, 1)
    assert [s["labels"] for s in one] == [{"gpu": "2"}] and len(one[0]["points"]) == 3000
    assert store.query("gpu", "power_w", {"gpu": "9"}, START, START + 3000, 1)[0] == []
    latest = store.latest("gpu")
    assert [(s["labels"], s["time"], s["value"]) for s in latest] == [({"gpu": str(g)}, START + 2999, 3099.0 + g) for g in range(3)]
    listed = store.series("gpu")
    assert [(s["first"], s["last"], s["points"]["raw"]) for s in listed] == [(START, START + 2999, 3000)] * 3


def test_a_week_of_a_gpu_stays_within_its_documented_size(tmp_path):
    # 15 metrics of one GPU for a simulated week, with the rows a 1 Hz week leaves on disk:
    # 1 Hz for the 6 hours raw points are kept, two samples per bucket while 10 s buckets are
    # kept, two a minute before that (two, so that buckets hold a min, a max and a mean of their
    # own, as at 1 Hz). benchmarks/bench_history.py runs 8 GPUs at 1 Hz throughout.
    gpus = SimulatedGpus(gpus=1, start=START)
    store = HistoryStore(str(tmp_path / "history.sqlite"), clock=gpus.clock).open()
    gpus.run(store, 4 * DAY_S, every_s=30, flush_every_s=3600)
    spike_at = gpus.now + 17 * 60
    gpus.run(store, 3 * DAY_S - 6 * 3600, every_s=5, flush_every_s=600, spike=(spike_at, 5, 9999.0))
    gpus.run(store, 6 * 3600, every_s=1, flush_every_s=60)
    week_bytes = os.path.getsize(store.path)
    assert week_bytes <= 24_900_000  # remote/history/store.py's docstring: 24.9 MB a GPU-week at 1 Hz
    status = store.status()
    # The newest 10 s bucket and minute are rolled up once they are over.
    assert [t["points"] for t in status["tiers"]] == [15 * 6 * 3600, 15 * (3 * 8640 - 1), 15 * (7 * 1440 - 1)]
    # The whole week at screen resolution, from its first minute to its last.
    week, used = store.query("gpu", "power_w", {"gpu": "0"}, START, gpus.now, 7 * DAY_S / 200)
    assert used == 3060 and week[0]["points"][0][0] <= START and week[0]["points"][-1][0] >= gpus.now - 3060
    assert len(week[0]["points"]) in (198, 199, 200)
    # Nine more days at a sample a minute (16 days in all): the first day has aged out of the
    # 1 min tier, which keeps 15 days and no more; the spike is still the max of its minute.
    gpus.run(store, 9 * DAY_S, every_s=60, flush_every_s=3600)
    assert store.query("gpu", "power_w", None, START, START + DAY_S, 60)[0][0]["points"] == []
    assert store.status()["tiers"][2]["points"] == 15 * (15 * 1440 - 1)
    minute, _ = store.query("gpu", "power_w", {"gpu": "0"}, spike_at, spike_at + 60, 60)
    assert minute[0]["points"][0][3] == 9999.0


def test_over_its_cap_the_store_drops_its_oldest_buckets(tmp_path):
    clock = Clock()
    store = open_store(tmp_path, clock, max_bytes=500_000, tiers=default_tiers(raw_s=1800, ten_seconds_s=3 * 3600))
    for gpu in range(8):
        store.add_many([("gpu", "temperature_c", {"gpu": gpu}, 50.0 + i % 9, START + i * 60) for i in range(3 * 1440)])
    clock.now = START + 3 * DAY_S
    store.flush()
    for _ in range(2000):
        if not store.maintain():
            break
    status = store.status()
    assert status["used_bytes"] <= 500_000
    remaining = store.query("gpu", "temperature_c", {"gpu": "0"}, START, clock.now, 60)[0][0]["points"]
    assert remaining[-1][0] == clock.now - 60 and remaining[0][0] > START + 3600  # the newest kept, the oldest gone
    # Free pages went back to the file system (all but a few, kept for the next writes).
    assert os.path.getsize(store.path) <= 500_000 + 64 * 4096


def test_a_file_that_is_not_a_database_is_kept_aside_for_a_fresh_store(tmp_path, caplog):
    path = tmp_path / "history.sqlite"
    path.write_bytes(b"this is not a database, it is a note someone saved here\n" * 100)
    store = HistoryStore(str(path), clock=Clock()).open()
    assert store.recovered and "not a usable database" in store.recovered["reason"]
    kept = glob.glob(str(path) + ".corrupt-*")
    assert kept == [store.recovered["kept_as"]]
    with open(kept[0], "rb") as old:
        assert old.read().startswith(b"this is not a database")
    assert [r.message for r in caplog.records if "kept it as" in r.message] == [
        "history store %s %s; kept it as %s and started a fresh store" % (path, store.recovered["reason"], kept[0])]
    store.add("test", "line", {}, 1.0, START)
    store.flush()
    assert store.latest("test")[0]["value"] == 1.0
    assert store.detail()["recovered"]["kept_as"] == kept[0]


def test_a_file_failing_its_check_is_kept_aside_with_a_one_line_reason(tmp_path, caplog):
    clock = Clock()
    store = open_store(tmp_path, clock)
    record_line(store, clock, 3000)
    store.close()
    path = tmp_path / "history.sqlite"
    # Bad cell offsets in a page in the middle of the file (a disk that went bad under it):
    # quick_check reports each cell, dozens of lines in one row.
    with open(path, "r+b") as f:
        f.seek(os.path.getsize(path) // 4096 // 2 * 4096 + 100)
        f.write(b"\x00\x05" * 40)
    reopened = HistoryStore(str(path), clock=clock).open()
    reason = reopened.recovered["reason"]
    assert re.fullmatch(r"is not a usable database \(quick_check: On tree page \d+ cell \d+: .+ \(and \d+ more\)\)", reason), reason
    assert os.path.exists(reopened.recovered["kept_as"]) and reopened.series() == []
    logged = [r.getMessage() for r in caplog.records if "kept it as" in r.getMessage()]
    assert len(logged) == 1 and "\n" not in logged[0]


LOCKER = """
import sqlite3, sys, time
conn = sqlite3.connect(sys.argv[1], isolation_level=None)
conn.execute("BEGIN EXCLUSIVE")
print("locked", flush=True)
time.sleep(600)
"""


def lock_file(path):
    """Another process that holds an exclusive lock on `path` until killed."""
    locker = subprocess.Popen([sys.executable, "-c", LOCKER, str(path)], stdout=subprocess.PIPE, text=True)
    assert locker.stdout.readline().strip() == "locked"
    return locker


def test_a_file_locked_by_another_process_keeps_its_history(tmp_path):
    clock = Clock()
    store = open_store(tmp_path, clock)
    record_line(store, clock, 120)
    store.close()
    path = tmp_path / "history.sqlite"
    locker = lock_file(path)
    try:
        with pytest.raises(StoreUnavailable, match="is locked by another process .*its history is kept, trying again"):
            HistoryStore(str(path), clock=clock).open()
    finally:
        locker.kill()
        locker.wait()
    assert glob.glob(str(path) + ".*-*") == []  # nothing renamed
    reopened = HistoryStore(str(path), clock=clock).open()
    assert reopened.recovered is None and reopened.series("test")[0]["points"]["raw"] == 120


# ---------------------------------------------------------------- inside a real daemon

LAUNCHER = r"""
import sys
import remote.areas
from remote.core import daemon
from remote.core.services import Service

class Counter(Service):
    '''A sampler whose every point is known: 1, 2, 3 ... every 0.2 s.'''
    name = "test-counter"
    interval_s = 0.2

    def __init__(self, owner):
        self.owner, self.count = owner, 0

    def step(self):
        self.count += 1
        self.owner.history.add("test", "counter", {"run": sys.argv[1]}, self.count)

class Broken(Service):
    name = "test-broken"
    interval_s = 0.1

    def step(self):
        raise RuntimeError("sensor unplugged")

start_services = daemon.Daemon.start_services

def with_test_services(self):
    start_services(self)
    self.services.add(Counter(self))
    self.services.add(Broken())

daemon.Daemon.start_services = with_test_services
sys.exit(daemon.run_daemon(foreground=True))
"""


def start_daemon(home, run):
    env = dict(os.environ, SPECDECK_HOME=str(home), PYTHONPATH=str(REPO_ROOT))
    process = subprocess.Popen([sys.executable, "-c", LAUNCHER, run], env=env, cwd=str(home),
                               stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    wait_for(lambda: daemon_pid(home) == process.pid, 30)
    return process


def call(home, method, params=None):
    """One request to the daemon over its socket; the result, or AssertionError with the error."""
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.settimeout(60)
    try:
        sock.connect(paths.socket_path())
        reader = FrameReader(sock.recv)
        next(reader)  # hello
        sock.sendall(encode({"id": 1, "method": method, "params": params or {}}))
        reply = next(frame for frame in reader if isinstance(frame, dict) and frame.get("id") == 1)
    finally:
        sock.close()
    assert reply["ok"], reply["error"]
    return reply["result"]


def counter_values(home, run, since=None):
    # The last two minutes (or since `since`): at most 5,000 points a series makes that 24 ms
    # (for ten minutes 120 ms), finer than the counter.
    found = call(home, "history.query", {"source": "test", "name": "counter", "labels": {"run": run},
                                         "start": since or time.time() - 120, "resolution_s": 0.001})["series"]
    return [(p[0], p[1]) for p in found[0]["points"]] if found else []


def services(home):
    return {s["name"]: s for s in call(home, "daemon.services")["services"]}


def test_daemon_killed_keeps_what_was_committed_and_lives_through_failing_services(agent_home):
    began = time.time()
    first = start_daemon(agent_home, "a")
    try:
        wait_for(lambda: services(agent_home)["history"]["state"] == "running", 30)
        assert call(agent_home, "daemon.services")["services"][0]["name"] == "history"  # before any sampler
        seen = wait_for(lambda: len(counter_values(agent_home, "a")) >= 15 and counter_values(agent_home, "a"), 60)
        # A service that fails every step is retried with backoff and reported; the rest go on.
        broken = wait_for(lambda: services(agent_home)["test-broken"]["failures"] >= 2 and services(agent_home)["test-broken"], 30)
        assert broken["state"] == "retrying" and broken["error"] == "RuntimeError: sensor unplugged"
        assert services(agent_home)["history"]["state"] == "running"
    finally:
        os.kill(first.pid, signal.SIGKILL)
        first.wait()

    second = start_daemon(agent_home, "b")
    try:
        wait_for(lambda: services(agent_home)["history"]["state"] == "running", 30)
        after = counter_values(agent_home, "a")
        # Every point a client saw before the kill is there, and nothing committed is missing.
        assert after[: len(seen)] == seen
        assert [value for _, value in after] == list(range(1, len(after) + 1))
        assert services(agent_home)["history"]["detail"].get("recovered") is None
        wait_for(lambda: len(counter_values(agent_home, "b")) >= 10, 30)
        listed = {s["labels"]["run"]: s for s in call(agent_home, "history.series", {"source": "test"})["series"]}
        # (A query's times are the starts of its groups, here 24 ms wide.)
        assert listed["a"]["points"]["raw"] == len(after) and 0 <= listed["a"]["last"] - after[-1][0] < 0.024
        status = call(agent_home, "history.status")
        assert status["file_bytes"] > 0 and status["max_bytes"] == 512 << 20 and status["recovered"] is None

        # Another process locks the file under the running store: the history service fails and
        # is retried; once the lock is gone it goes on in the same file, nothing lost or renamed.
        store_path = os.path.join(paths.state_dir(), "history.sqlite")
        locker = lock_file(store_path)
        try:
            failing = wait_for(lambda: (lambda h: h["state"] == "retrying" and h)(services(agent_home)["history"]), 60)
            assert "locked" in failing["error"] and failing["detail"].get("recovered") is None
            assert call(agent_home, "ping")["time"] > 0
        finally:
            locker.kill()
            locker.wait()
        history = wait_for(lambda: (lambda h: h["state"] == "running" and h["last_ok_at"] > time.time() - 2 and h)(
            services(agent_home)["history"]), 120)
        assert history["restarts"] >= 1 and history["detail"].get("recovered") is None
        # Points buffered while the store was locked were written to it: run b is whole.
        values_b = counter_values(agent_home, "b", since=began)
        assert [v for _, v in values_b] == list(range(1, len(values_b) + 1))
    finally:
        second.send_signal(signal.SIGTERM)
        second.wait(30)

    # A daemon started while another process holds the store locked waits for it: the history
    # of both runs is still there afterwards, nothing was renamed aside.
    locker = lock_file(store_path)
    try:
        third = start_daemon(agent_home, "c")
        waiting = wait_for(lambda: (lambda h: h["state"] == "retrying" and h)(services(agent_home)["history"]), 60)
        assert "is locked by another process" in waiting["error"] and "its history is kept" in waiting["error"]
    finally:
        locker.kill()
        locker.wait()
    try:
        wait_for(lambda: services(agent_home)["history"]["state"] == "running", 120)
        # (Values compared: a query's times are the starts of its groups, which move with the window.)
        assert [v for _, v in counter_values(agent_home, "a", since=began)] == [v for _, v in after]
        kept_b = [v for _, v in counter_values(agent_home, "b", since=began)]  # and what run b flushed as it stopped
        assert kept_b[: len(values_b)] == [v for _, v in values_b] and kept_b == list(range(1, len(kept_b) + 1))
        values_c = wait_for(lambda: (lambda v: len(v) >= 5 and v)(counter_values(agent_home, "c")), 30)
        assert [v for _, v in values_c] == list(range(1, len(values_c) + 1))  # what waited in the buffer, then the rest
        assert glob.glob(store_path + ".*-*") == []
        with open(os.path.join(paths.state_dir(), "daemon.log")) as log_file:
            assert "kept it as" not in log_file.read()
    finally:
        third.send_signal(signal.SIGTERM)
        third.wait(30)


@pytest.mark.parametrize("params, named", [
    ({"start": -1e308}, "start"), ({"start": 0, "end": 1e300}, "end"), ({"start": 1e20, "end": 1e21}, "start"),
    ({"resolution_s": 1e300}, "resolution_s"),
])
def test_a_window_out_of_any_clock_is_a_one_line_bad_request(client, params, named):
    from remote.core.protocol import RemoteError

    with pytest.raises(RemoteError) as caught:
        client.call("history.query", dict({"source": "gpu", "name": "utilization_percent"}, **params))
    assert caught.value.type == "BadRequest" and named in caught.value.message and "\n" not in caught.value.message
    assert client.call("ping", {}) is not None  # the daemon still answers
