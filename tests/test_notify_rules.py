"""The rules behind delivery, driven with their own clock instead of waiting: the queue's
backoff, a channel shown failing, alerts given up after two days (not one), quiet hours that
hold all but failures; and the host's own evaluation of serving and training figures (accept
length under break-even for 5 minutes, an attached server that stopped answering, a flat loss,
a run's stall limit), fed through the real topics the feeds publish to."""

import time

import pytest

from remote.jobs.store import JobStore
from remote.core.streams import Topic
from remote.notify.channels import ChannelStore, quiet_until, wants
from remote.notify import stalls
from remote.notify.evaluate import Evaluator
from remote.notify.queue import GATHER_S, RETRY_FOR_S, AlertQueue
from remote.serving.sampler import ServingFeed


class Clock:
    def __init__(self):
        self.now = time.time()

    def __call__(self):
        return self.now


def alert(key, urgent=False, categories=("gpu",)):
    return {"id": key, "kind": "gpu_idle", "categories": list(categories), "urgent": urgent, "message": key}


def test_backoff_failing_and_two_days_before_giving_up(tmp_path):
    clock = Clock()
    queue = AlertQueue(str(tmp_path / "notify.sqlite"), clock=clock)
    assert queue.raise_alert(alert("a1"), ["c1"]) and not queue.raise_alert(alert("a1"), ["c1"])  # once per key
    assert queue.channels_due(lambda c: None) == []  # gathered first
    clock.now += GATHER_S
    assert queue.channels_due(lambda c: None) == ["c1"]
    for failures, wait_s in ((1, 10.0), (2, 30.0), (3, 60.0)):
        [(key, _)] = queue.take("c1", 100)
        queue.failed("c1", [key], "HTTP 502")
        assert queue.channels_due(lambda c: None) == []
        assert queue.status("c1")["next_try_at"] == pytest.approx(clock.now + wait_s)
        clock.now += wait_s
    status = queue.status("c1")
    assert (status["state"], status["failures"], status["last_error"], status["pending"]) == ("failing", 3, "HTTP 502", 1)
    clock.now += 86400.0  # a day later it is still tried
    assert [k for k, _ in queue.take("c1", 100)] == ["a1"]
    clock.now += RETRY_FOR_S
    assert queue.take("c1", 100) == [] and queue.status("c1")["expired"] == 1


def test_quiet_hours_hold_all_but_failures(tmp_path):
    night = time.mktime((2026, 3, 10, 23, 30, 0, 0, 0, -1))
    noon = time.mktime((2026, 3, 10, 12, 0, 0, 0, 0, -1))
    assert quiet_until("22:00-07:00", night) == time.mktime((2026, 3, 11, 7, 0, 0, 0, 0, -1))
    assert quiet_until("22:00-07:00", noon) is None and quiet_until(None, night) is None
    clock = Clock()
    clock.now = night
    queue = AlertQueue(str(tmp_path / "notify.sqlite"), clock=clock)
    queue.raise_alert(alert("idle"), ["c1"])
    clock.now += GATHER_S
    quiet = lambda channel: quiet_until("22:00-07:00", clock.now)  # noqa: E731
    assert queue.channels_due(quiet) == []
    queue.raise_alert(alert("failed", urgent=True, categories=("failed",)), ["c1"])
    clock.now += GATHER_S
    assert queue.channels_due(quiet) == ["c1"]
    assert [k for k, _ in queue.take("c1", 100, urgent_only=True)] == ["failed"]


def test_channels_take_what_they_are_on(tmp_path):
    store = ChannelStore(str(tmp_path))
    gpu = store.add(url="https://ntfy.sh/topic", on="gpu,training")
    everything = store.add(argv=["true"])
    assert gpu["format"] == "ntfy" and everything["on"] == ["all"]
    assert wants(gpu, {"categories": ["gpu"]}) and not wants(gpu, {"categories": ["failed"]})
    assert wants(gpu, {"categories": ["finished"], "watched": True})  # a job that asked is told everywhere
    with pytest.raises(ValueError, match="no alert category"):
        store.add(url="https://ntfy.sh/x", on="failed,gpus")
    with pytest.raises(ValueError) as refused:
        store.add(url="https://ntfy.sh/x", quiet="25:00-07:00")
    assert "quiet hours are HH:MM-HH:MM" in str(refused.value)


class Host:
    """What the evaluator reads of a daemon: its hello, topics, job store and the serving feed
    (whose rule gives a server's break-even; the feed is not started: nothing is scraped)."""

    def __init__(self, root):
        self.hello = {"hostname": "gpu01"}
        self.jobs = JobStore(str(root))
        self.topics = {name: Topic(name) for name in ("jobs", "alerts", "training", "serving")}
        self.services = {"serving": ServingFeed(self)}


@pytest.fixture
def host(tmp_path, monkeypatch):
    monkeypatch.setenv("SPECDECK_HOME", str(tmp_path / "home"))  # where the feed keeps break-even lines and attached servers
    found = Host(tmp_path / "jobs")
    (tmp_path / "jobs").mkdir()
    yield found
    for job in found.jobs.list():
        if job["process_state"] in ("running", "starting"):
            found.jobs.stop(job["id"], grace_s=0.0)


def test_accept_length_under_break_even_for_five_minutes_is_told_once(host):
    server = host.jobs.submit(["sleep", "60"], kind="server", name="vllm k2.5 + ours", meta={"break_even": 2.46, "url": "http://127.0.0.1:9"})
    raised = []
    evaluator = Evaluator(host, raised.append, lambda job_id: False)
    start = time.time()
    for second in range(0, 400, 10):
        host.topics["serving"].publish({"server": server["id"], "time": start + second, "accept_length": 2.0 if second else 3.1})
        evaluator.poll()
    [told] = raised
    assert told["kind"] == "below_break_even" and told["categories"] == ["speculation"] and told["job_id"] == server["id"]
    assert "accept length 2.00 under break-even 2.46 for 5 min (line: server meta)" in told["message"]
    assert told["server"] == server["id"] and told["break_even"] == {"accept_length": 2.46, "source": "server meta", "how": None}
    host.topics["serving"].publish({"server": server["id"], "time": start + 500, "accept_length": None})  # idle: says nothing
    evaluator.poll()
    assert len(raised) == 1


def test_a_line_set_for_the_target_is_the_rule_and_kept_on_the_host(host):
    """A line set by hand for the server's target beats its meta's, the time under it counts
    from when it was set, and a restarted daemon's feed (a new one) still has it."""
    server = host.jobs.submit(["sleep", "60"], kind="server", name="vllm k2.5 + ours",
                              meta={"break_even": 2.46, "target": "/data/k2.5/", "url": "http://127.0.0.1:9"})
    raised = []
    evaluator = Evaluator(host, raised.append, lambda job_id: False)
    feed = host.services["serving"]
    start = time.time()
    host.topics["serving"].publish({"server": server["id"], "time": start, "accept_length": 2.6})  # over the meta's 2.46
    evaluator.poll()
    feed.set_break_even(server["id"], accept_length=2.8)
    for second in range(10, 400, 10):
        host.topics["serving"].publish({"server": server["id"], "time": start + second, "accept_length": 2.6})
        evaluator.poll()
    [told] = raised
    assert "accept length 2.60 under break-even 2.80 for 5 min (line: set)" in told["message"]
    assert told["time"] == start + 10  # under the new line from its first figure after it was set
    assert ServingFeed(host).break_even(server["id"]) == {"accept_length": 2.8, "source": "set", "how": None}


def test_an_attached_server_that_stops_answering_is_told_and_a_flat_loss_too(host):
    raised = []
    evaluator = Evaluator(host, raised.append, lambda job_id: False)
    start = time.time()
    serving, training = host.topics["serving"], host.topics["training"]
    serving.publish({"server": "u1", "time": start, "accept_length": 3.0})
    for second in (5, 30, 70):
        serving.publish({"server": "u1", "time": start + second, "stale": True, "error": "connection refused"})
    for minute, loss in ((0, 2.0), (10, 1.5), (20, 1.6), (45, 1.55), (50, 1.7)):
        training.publish({"job": "j4", "kind": "step", "time": start + 60 * minute, "step": minute * 10, "loss": loss})
    evaluator.poll()
    kinds = {a["kind"]: a for a in raised}
    assert set(kinds) == {"server_died", "training_flat"}
    assert kinds["server_died"]["urgent"] and "attached server u1 has not answered for 1 min: connection refused" in kinds["server_died"]["message"]
    assert "j4: the loss has not fallen below 1.5 for 35 min (step 450)" in kinds["training_flat"]["message"]


def told_resumed(evaluator, raised, at, monkeypatch):
    """One check of the rule's clock a second after `at`, with the hold a run that moved again
    waits (RESUME_HOLD_S: a run that steps and ends is told once) taken away: these tests are about
    the limits, not the hold (tests/test_notify_stalls.py holds the hold to a real run)."""
    monkeypatch.setattr(stalls, "RESUME_HOLD_S", 0.0)
    evaluator.stalls.check(at + stalls.CHECK_EVERY_S)


def test_a_runs_stall_limit_is_ten_times_its_median_step_interval_and_at_least_two_minutes(host, monkeypatch):
    slow = host.jobs.submit(["sleep", "60"], kind="training", name="slow run")
    fast = host.jobs.submit(["sleep", "60"], kind="training", name="fast run")
    raised = []
    evaluator = Evaluator(host, raised.append, lambda job_id: False)
    now = time.time()
    training = host.topics["training"]
    for n in range(10):  # a step every 30 s (and one late one: the median holds), and one every second
        training.publish({"job": slow["id"], "kind": "step", "time": now - 30 * (9 - n) + (15 if n == 5 else 0), "step": n, "loss": 1.0})
        training.publish({"job": fast["id"], "kind": "step", "time": now - (9 - n), "step": n, "loss": 1.0})
    evaluator.poll()
    for after_s, told in ((119, []), (121, [fast["id"]]), (299, [fast["id"]]), (301, [fast["id"], slow["id"]]), (900, [fast["id"], slow["id"]])):
        evaluator.stalls.check(now + after_s)
        assert [a["job_id"] for a in raised] == told, after_s
    assert {a["kind"] for a in raised} == {"training_stalled"}
    assert "(stall limit 5 min); before: step 9, loss 1, 0.0333 steps/s" in raised[1]["message"], raised[1]["message"]
    training.publish({"job": slow["id"], "kind": "step", "time": now + 1000, "step": 10, "loss": 0.9})
    evaluator.poll()
    told_resumed(evaluator, raised, now + 1000, monkeypatch)
    assert raised[-1]["kind"] == "resumed" and raised[-1]["message"].startswith("%s resumed after 16 min (step 10" % slow["id"])


def test_a_data_generation_whose_counter_stands_still_is_told(host, monkeypatch):
    job = host.jobs.submit(["sleep", "60"], kind="datagen", name="hidden states")
    raised = []
    evaluator = Evaluator(host, raised.append, lambda job_id: False)
    now = time.time()
    live = dict(host.jobs.describe(job["id"]), process_state="running", progress={"state": "generating", "done": 40, "total": 100, "rate": 2.5})
    host.topics["jobs"].publish({"event": "progress", "id": job["id"], "job": live})
    evaluator.poll()
    evaluator.stalls.check(now + 119)
    assert raised == []
    evaluator.stalls.check(now + 125)
    [told] = raised
    assert (told["kind"], told["categories"], told["job_id"]) == ("job_stalled", ["stalled", "training"], job["id"])
    assert "its progress has not moved for 2 min (stall limit 2 min); before: 40 samples of 100, 2.5 samples/s" in told["message"]
    host.topics["jobs"].publish({"event": "progress", "id": job["id"], "job": dict(live, progress=dict(live["progress"], done=41))})
    evaluator.poll()
    told_resumed(evaluator, raised, now + 125, monkeypatch)
    assert [a["kind"] for a in raised][:2] == ["job_stalled", "resumed"]


def test_a_run_under_half_its_hours_median_for_ten_minutes_is_told_once_and_when_back(host):
    """The default limits (0.5, 10 min, 1 h), on the steps' own times: a run at 1 step/s for an
    hour, then at a quarter of it; one `slowdown` at 10 min under the line, one `pace_back`."""
    job = host.jobs.submit(["sleep", "60"], kind="training", name="eagle3")
    raised = []
    evaluator = Evaluator(host, raised.append, lambda job_id: False)
    training, start, step = host.topics["training"], time.time() - 7200, 0
    times = [start + s for s in range(3600)] + [start + 3600 + 4 * s for s in range(1, 200)]
    times += [times[-1] + s for s in range(1, 30)]
    for when in times:
        training.publish({"job": job["id"], "kind": "step", "time": when, "step": step, "loss": 1.0})
        step += 1
        if step % 500 == 0:
            evaluator.poll()
    evaluator.poll()
    slow, back = [a for a in raised if "slowdown" in a["categories"]]  # (its synthetic past also makes a stall)
    assert slow["kind"] == "slowdown" and back["kind"] == "pace_back"
    assert slow["message"].startswith("%s (eagle3) at 0.25 steps/s, its hour's median 1 steps/s, for 10 min; " % job["id"])
    assert slow["pace"] == 0.25 and slow["median_pace"] == 1.0 and slow["time"] <= start + 3600 + 4
    assert back["message"].startswith("%s (eagle3) back to pace after 13 min: " % job["id"]), back["message"]
