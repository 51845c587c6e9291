"""The feed framework (remote/core/feeds.py) with real threads, topics and a real history store:
a source that hangs past its deadline or fails never holds up the others nor stops the
service, its figure is marked stale with its age, a source cannot grow the store past its
series cap; and what every feed shares on the wire: one duration parser, a checked history
window, one error for a daemon without a store, one name per capability and its history read back."""

import threading
import time

import pytest

from remote import areas  # noqa: F401  (installs the areas, as the agent's entry point does)
from remote.core import wire
from remote.core.feed_source import FeedSource, SourceError
from remote.core.feeds import Feed
from remote.history.store import HistoryStore
from remote.core.protocol import RemoteError
from remote.core.services import Services
from remote.core.streams import Topic
from remote.core.windows import parse_duration
from tests.helpers.waits import wait_for


class Host:
    """What a feed needs of the daemon: its topics and (optionally) its history."""

    def __init__(self, history=None):
        self.topics = {"jobs": Topic("jobs")}
        self.history = history


class StoreOnly:
    def __init__(self, store):
        self.store = store
        self.add_many = store.add_many


class Counting(FeedSource):
    interval_s = 0.1
    deadline_s = 0.2

    def __init__(self, key, release, series=1):
        super().__init__(key)
        self.release = release
        self.count = 0
        self.series = series

    def read(self, budget):
        if self.key == "hangs":
            self.release.wait()  # ignores its budget: what a driver call that never returns does
        if self.key == "fails":
            raise SourceError("sensor unplugged")
        if self.key == "bug":
            return {"value": 1 / 0}
        self.count += 1
        return {"value": self.count}

    def history_points(self, record):
        return [("value", {"n": str(index)}, float(record["value"])) for index in range(self.series)]


class CountingFeed(Feed):
    name = "counting"
    key_field = "source"

    def __init__(self, daemon, keys, series=1):
        super().__init__(daemon)
        self.keys = keys
        self.series = series
        self.release = threading.Event()

    def discover(self):
        return {key: None for key in self.keys}

    def make_source(self, key, spec):
        return Counting(key, self.release, self.series)


def status_of(feed, key):
    return next(s for s in feed.detail()["source_list"] if s["key"] == key)


def test_a_hung_or_failing_source_leaves_the_others_fresh_and_the_service_running():
    services = Services()
    feed = services.add(CountingFeed(Host(), ["good", "hangs", "fails", "bug"]))
    try:
        wait_for(lambda: status_of(feed, "hangs")["state"] == "overdue", 30)
        wait_for(lambda: status_of(feed, "fails")["failures"] >= 2 and status_of(feed, "bug")["failures"] >= 2, 30)
        good = feed.figure("good")
        assert good["stale"] is False and good["value"] >= 3  # read all along, every 0.1 s
        assert status_of(feed, "fails")["error"] == "sensor unplugged"
        assert status_of(feed, "bug")["error"].startswith("ZeroDivisionError")
        assert feed.figure("hangs") is None and status_of(feed, "hangs")["stale"] is True
        (runner,) = services.status()
        assert runner["state"] == "running" and runner["error"] is None
        # A follower learns that the hung source has no current figure, with why.
        records = wait_for(lambda: [r for r in feed.topic.after(0)[0] if r.get("stale") and r["source"] == "hangs"], 30)
        assert "deadline" in records[-1]["error"]
        assert "overdue" in feed.detail()["source hangs"]
    finally:
        feed.release.set()
        services.stop()


def test_a_figure_turns_stale_with_its_age_when_its_source_stops_answering():
    services = Services()
    feed = services.add(CountingFeed(Host(), ["good"]))
    try:
        first = wait_for(lambda: feed.figure("good"), 30)
        assert first["stale"] is False and first["age_s"] < 1.0
        feed.keys = ["good", "other"]  # the feed goes on; only "good" is made to fail
        feed.source("good").key = "fails"
        stale = wait_for(lambda: (lambda f: f if f["stale"] else None)(feed.figure("good")), 30)
        assert stale["age_s"] > feed.source("good").stale_after_s and stale["error"] == "sensor unplugged"
        assert stale["value"] == max(r["value"] for r in feed.topic.after(0)[0] if "value" in r and not r.get("stale"))
    finally:
        services.stop()


def test_a_wire_method_waits_for_a_first_read_once_and_for_a_hung_one_until_its_deadline():
    feed = CountingFeed(Host(), ["good", "hangs"])
    answered = {}

    def ask():  # a wire method called the moment the daemon starts: the feed has no source yet
        answered["in_time"] = feed.await_read(lambda: feed.figure("good") is not None, 30)
        answered["figure"] = feed.figure("good")

    asker = threading.Thread(target=ask)
    asker.start()
    services = Services()
    services.add(feed)
    try:
        asker.join(60)
        assert answered["in_time"] is True and answered["figure"]["value"] >= 1
        # A source that never answers: the caller gets its answer at the deadline, not never.
        assert feed.await_read(lambda: feed.figure("hangs") is not None, 0.3) is False
        assert feed.figure("hangs") is None
    finally:
        feed.release.set()
        services.stop()


def test_a_source_cannot_grow_the_store_past_its_series_cap(tmp_path):
    store = HistoryStore(str(tmp_path / "history.sqlite")).open()
    services = Services()
    feed = services.add(CountingFeed(Host(StoreOnly(store)), ["good"], series=1000))
    try:
        wait_for(lambda: status_of(feed, "good")["reads"] >= 3, 30)
        store.flush()
        assert len(store.series("counting")) == FeedSource.max_series
        assert status_of(feed, "good")["series_dropped"] >= 3 * (1000 - FeedSource.max_series)
    finally:
        services.stop()
        store.close()


def test_one_duration_parser_for_every_window():
    assert [parse_duration(t) for t in ("90", "30s", "5m", "8h", "1d", "1w", "1.5h")] == [90, 30, 300, 8 * 3600, 86400, 7 * 86400, 5400]
    for bad in ("soon", "5y", "-5m", "0s", "1e308", "99999w"):
        with pytest.raises(ValueError):
            parse_duration(bad)


class NoStore:
    """A daemon that keeps no history store."""

    services = None


@pytest.mark.parametrize("method, params", [
    ("telemetry.history", {"metric": "utilization_percent"}),
    ("serving.history", {"id": "j1", "metric": "accept_length"}),
    ("history.query", {"source": "serving", "name": "accept_length"}),
    ("history.status", {}),
])
def test_every_history_reader_gives_the_one_no_history_error(method, params):
    wire.load_areas()
    with pytest.raises(RemoteError) as caught:
        wire.dispatch(NoStore(), None, method, params)
    assert caught.value.type == "NoHistory"


def test_one_name_per_capability_and_its_history_reads_back(agent_home):
    from tui.transport.connection import open_client

    store = HistoryStore(str(agent_home / "history.sqlite")).open()
    now = time.time()
    store.add_many([("telemetry", "utilization_percent", {"gpu": "0"}, 42.0, now - 600 + i) for i in range(60)]
                   + [("telemetry", "cpu_percent", {"device": "host"}, 7.0, now - 600 + i) for i in range(60)])
    store.flush()
    store.close()
    client = open_client("local")
    try:
        names = {s["name"] for s in client.call("daemon.services")["services"]}
        assert {"serving", "telemetry", "training"} <= names and "speculation" not in names
        gpu = client.call("telemetry.history", {"metric": "utilization_percent", "gpu": 0, "since_s": 3600, "resolution_s": 1})
        assert [p for p in gpu["series"][0]["points"] if p[2] == 42.0][:60] and gpu["series"][0]["gpu_index"] == 0
        host = client.call("telemetry.history", {"metric": "cpu_percent", "host": True, "since_s": 3600, "resolution_s": 1})
        assert len([p for p in host["series"][0]["points"] if p[2] == 7.0]) == 60
        wait_for(lambda: client.call("history.series", {"source": "telemetry"})["series"], 30)
        with pytest.raises(RemoteError) as caught:
            client.call("telemetry.history", {"metric": "utilization_percent", "since_s": 1e308})
        assert caught.value.type == "BadRequest" and "ten years" in caught.value.message
        latest = client.call("telemetry.latest")
        assert latest["stale"] is False and latest["age_s"] < 3
    finally:
        client.close()
