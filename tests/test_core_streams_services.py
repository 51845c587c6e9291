"""Streams and daemon services, one level below the wire: a Topic read "after seq N", a stream
pumped to a connection and cancelled, a reused stream id, and a service that fails without
taking anything down. Then the same through the real daemon: its services' status, and job
events pushed to a subscriber while jobs start and end."""

import threading
import time

from remote.core import streams
from remote.core.services import Service, ServiceRunner, Services
from remote.core.streams import Topic, TopicSource
from tests.helpers.waits import wait_for
from tui.transport.connection import open_client


class Collector:
    """A connection as streams.serve sees it: frames are kept."""

    def __init__(self):
        self.streams = {}
        self.closed = threading.Event()
        self.frames = []
        self.changed = threading.Condition()

    def send(self, frame):
        with self.changed:
            self.frames.append(frame)
            self.changed.notify_all()
        return True

    def wait_for(self, predicate, timeout_s=10):
        deadline = time.monotonic() + timeout_s
        with self.changed:
            while not predicate(self.frames):
                left = deadline - time.monotonic()
                if left <= 0:
                    raise AssertionError("timed out; frames: %r" % self.frames[-5:])
                self.changed.wait(left)


def records_of(frames, stream_id):
    return [r for f in frames if f.get("stream") == stream_id and "data" in f for r in f["data"].get("records", [])]


def test_topic_reads_after_a_seq_and_reports_a_gap():
    topic = Topic("t", capacity=3)
    first = topic.publish("a")
    topic.publish("b")
    records, seq, gap = topic.after(first)
    assert records == ["b"] and seq == first + 1 and not gap
    for name in "cdef":
        topic.publish(name)
    records, seq, gap = topic.after(first)
    assert records == ["d", "e", "f"] and gap, "records dropped from the ring must be reported"
    assert topic.after(seq) == ([], seq, False)
    # A seq from an earlier daemon (before this topic's clock-based start) is a gap too.
    assert topic.after(1)[2]


def test_topic_seqs_grow_across_restarts():
    old = Topic("t")
    last = old.publish("x")
    time.sleep(0.01)
    new = Topic("t")
    assert new.publish("y") > last


def test_a_stream_resumes_after_a_seq_without_repeats_and_a_new_reader_gets_a_snapshot():
    topic = Topic("jobs")
    state = {"jobs": ["j1"]}
    connection = Collector()
    streams.serve(connection, "s1", TopicSource(topic, snapshot=lambda: list(state["jobs"])), None)
    connection.wait_for(lambda frames: any("snapshot" in f.get("data", {}) for f in frames))
    seqs = [topic.publish({"n": n}) for n in range(5)]
    connection.wait_for(lambda frames: len(records_of(frames, "s1")) == 5)
    assert [r["n"] for r in records_of(connection.frames, "s1")] == [0, 1, 2, 3, 4]
    assert streams.cancel(connection, "s1")

    # Resumed after the third record: the last two, once, and no snapshot.
    again = Collector()
    streams.serve(again, "s2", TopicSource(topic, snapshot=lambda: list(state["jobs"])), seqs[2])
    again.wait_for(lambda frames: len(records_of(frames, "s2")) == 2)
    assert [r["n"] for r in records_of(again.frames, "s2")] == [3, 4]
    assert not any("snapshot" in f.get("data", {}) for f in again.frames)
    streams.cancel(again, "s2")


def test_a_reused_stream_id_replaces_the_old_follower():
    topic = Topic("t")
    connection = Collector()
    streams.serve(connection, "s", TopicSource(topic), None)
    first = connection.streams["s"]
    streams.serve(connection, "s", TopicSource(topic), None)
    assert connection.streams["s"] is not first
    first.thread.join(5)
    assert not first.thread.is_alive(), "the first follower was not cancelled"
    topic.publish("once")
    connection.wait_for(lambda frames: len(records_of(frames, "s")) >= 1)
    time.sleep(0.5)
    assert records_of(connection.frames, "s") == ["once"], "two followers sent the same record"
    assert streams.cancel(connection, "s") and not connection.streams


def test_a_failing_source_ends_its_stream_with_the_reason():
    class Broken(streams.Source):
        def read(self, after):
            raise ValueError("disk on fire")

    connection = Collector()
    streams.serve(connection, "s", Broken(), 0)
    connection.wait_for(lambda frames: any(f.get("end") for f in frames))
    assert "disk on fire" in connection.frames[-1]["data"]["error"]


class Flaky(Service):
    name = "flaky"
    interval_s = 0.01

    def __init__(self, failures):
        self.failures = failures
        self.steps = 0
        self.starts = 0

    def start(self):
        self.starts += 1

    def step(self):
        self.steps += 1
        if self.steps <= self.failures:
            raise RuntimeError("sensor unplugged")


def test_a_failing_service_is_retried_with_backoff_and_reports_it(monkeypatch):
    from remote.core import services

    monkeypatch.setattr(services, "BACKOFF_S", (0.05, 0.1))
    service = Flaky(failures=3)
    runner = ServiceRunner(service)
    runner.start()
    deadline = time.monotonic() + 10
    seen_error = None
    while time.monotonic() < deadline and service.steps < 6:
        status = runner.status()
        if status["state"] == "retrying":
            seen_error = status["error"]
        time.sleep(0.005)
    runner.stop()
    assert seen_error == "RuntimeError: sensor unplugged"
    assert service.steps >= 6 and service.starts == 4, "each failure restarts the service afresh"
    assert runner.status()["state"] == "stopped"


def test_services_are_found_by_name_and_stop_together():
    group = Services()
    service = group.add(Flaky(failures=0))
    assert group.get("flaky") is service
    time.sleep(0.1)
    assert [s["state"] for s in group.status()] == ["running"]
    group.stop()
    assert [s["state"] for s in group.status()] == ["stopped"]


def test_the_daemon_reports_its_services_and_pushes_job_events(agent_home):
    client = open_client("local")
    try:
        services = {s["name"]: s for s in client.call("daemon.services")["services"]}
        assert services["job-events"]["state"] in ("starting", "running")

        frames = []
        arrived = threading.Condition()

        def on_data(data, seq):
            with arrived:
                frames.append(data)
                arrived.notify_all()

        client.subscribe("jobs.events", {}, on_data)
        job = client.call("jobs.submit", {"argv": ["sh", "-c", "sleep 0.5; exit 3"]})

        def events():
            return [(r["event"], r["job"]["exit_code"] if r.get("job") else None) for f in frames for r in f.get("records", []) if r["id"] == job["id"]]

        with arrived:
            assert arrived.wait_for(lambda: ("ended", 3) in events(), timeout=30), events()
        assert "snapshot" in frames[0], "a new subscriber starts from the state of every job"
        kinds = [event for event, _ in events()]
        assert kinds[0] == "submitted" and kinds[-1] == "ended"
    finally:
        client.close()


def test_following_the_last_bytes_of_a_log_starts_on_a_whole_line(agent_home):
    client = open_client("local")
    try:
        job = client.call("jobs.submit", {"argv": ["printf", "aaaa\\nbbbb\\ncccc\\n"]})
        wait_for(lambda: client.call("jobs.get", {"id": job["id"]})["log_bytes"] >= 15, 30, message="the job's three lines")
        ended = threading.Event()
        texts = []
        client.subscribe("jobs.follow", {"id": job["id"], "after": -7}, lambda data, seq: texts.append(data["text"]), lambda data: ended.set())
        assert ended.wait(30)
        assert "".join(texts) == "cccc\n", "the follow started mid-line: %r" % texts
    finally:
        client.close()


def test_an_opening_reply_says_where_a_stream_cut_before_its_first_frame_resumes(agent_home):
    """A quiet stream (alerts) resumes from the seq it opened at, so what fires while the link is
    down still comes; a stream that opens with a snapshot is asked again from now, for a new one."""
    client = open_client("local")
    try:
        quiet = client.subscribe("telemetry.alerts_follow", {}, lambda data, seq: None)
        assert quiet.start_seq is not None and quiet.resume_params()["after"] == quiet.start_seq
        with_snapshot = client.subscribe("jobs.events", {}, lambda data, seq: None)
        assert with_snapshot.start_seq is None
        replies = [client.call(method, {"stream": "probe-%d" % i}) for i, method in enumerate(("jobs.events", "telemetry.alerts_follow"))]
        assert [reply["snapshot"] for reply in replies] == [True, False]
        resumed = client.call("jobs.events", {"stream": "probe-2", "after": replies[0]["seq"]})
        assert resumed == {"stream": "probe-2", "seq": replies[0]["seq"], "snapshot": False}
    finally:
        client.close()


def test_a_job_that_fails_at_once_is_announced_as_ended_and_raises_its_alert(agent_home):
    """A job that ends before the job watcher first sees it (a bad argument, exit 2 at once) is
    both submitted and ended on the events stream, so the failure alert fires for it too."""
    from remote.jobs.watcher import _events

    assert _events(None, {"process_state": "failed"}) == ["submitted", "ended"]
    assert _events(None, {"process_state": "running"}) == ["submitted"]
    client = open_client("local")
    try:
        frames, alerts = [], []
        client.subscribe("jobs.events", {}, lambda data, seq: frames.append(data))
        client.subscribe("telemetry.alerts_follow", {}, lambda data, seq: alerts.extend(data.get("records") or []))
        jobs = [client.call("jobs.submit", {"argv": ["sh", "-c", "exit 2"]}) for _ in range(3)]

        def ended(job_id):
            return [r for f in frames for r in f.get("records", []) if r["id"] == job_id and r["event"] == "ended"]

        wait_for(lambda: all(ended(job["id"]) for job in jobs), 30,
                 message=lambda: "every end: %r" % [(r["id"], r["event"]) for f in frames for r in f.get("records", [])])
        wait_for(lambda: len(alerts) >= 3, 30, message="three alerts")
        assert sorted(a["job_id"] for a in alerts if a["kind"] == "job_failed") == sorted(job["id"] for job in jobs)
    finally:
        client.close()
