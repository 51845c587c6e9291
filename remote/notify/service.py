"""The delivery service: a daemon service (remote/core/services.py) that, four times a second,
evaluates what the other services published (evaluate.py), queues each new alert for the
channels that want it (queue.py) and hands each channel with something due to a sender thread
of its own, so a receiver that never answers costs that channel's thread a bounded try
(send.py) and delays neither the other channels nor the daemon's other work.

What goes out together goes out as one request: everything due for a channel when its sender
runs (alerts raised within GATHER_S of each other, a queue that waited through an outage) is
one digest of up to DIGEST_MAX alerts; and after BURST single messages within BURST_WINDOW_S,
a channel's next alerts wait for the window and go as one digest, so a storm of 50 alerts in a
minute is a handful of messages, not 50. Quiet hours hold all but urgent alerts (failures, stalls).
"""

import collections
import logging
import threading
import time

from ..core.services import Service
from ..core.streams import Topic
from .channels import ChannelStore, mask_url, quiet_until, wants
from .evaluate import Evaluator
from .queue import AlertQueue
from .send import deliver

log = logging.getLogger("specdeck.notify")

DIGEST_MAX = 100
BURST = 5
BURST_WINDOW_S = 60.0
PRUNE_EVERY_S = 3600.0


class NotifyService(Service):
    name = "notify"
    interval_s = 0.25

    def __init__(self, daemon):
        self.daemon = daemon
        self.host = daemon.hello.get("hostname") or "host"
        self.store = ChannelStore()
        self.topic = daemon.topics.setdefault("notify", Topic("notify", capacity=512))
        self.clock_shift_s = 0.0  # moved on by notify.retry's advance_s (tests, benchmarks)
        self.queue = None
        self._senders = {}  # channel id -> its thread while it sends
        self._sends = collections.defaultdict(collections.deque)  # channel id -> times of recent single sends
        self._lock = threading.Lock()
        self._pruned_at = 0.0
        self.raised = 0
        self.evaluator = Evaluator(daemon, self.raise_alert, self.is_watched)

    def stalled_since(self, job_id):
        """When the job's open stall began, else None (stalls.py's rule, as its alert says)."""
        return self.evaluator.stalls.stalled_since(job_id)

    def clock(self):
        return time.time() + self.clock_shift_s

    def open_queue(self):
        """The queue, opened by whoever needs it first (the service's start, or a request that came sooner)."""
        with self._lock:
            if self.queue is None:
                self.queue = AlertQueue(clock=self.clock)
            return self.queue

    # -- the service

    def start(self):
        self.evaluator.catch_up(self.open_queue().created_at())

    def stop(self):
        # Senders finish their try (bounded) on their own; the queue stays open for them.
        pass

    def step(self):
        self.evaluator.poll()
        self.dispatch()
        if self.clock() - self._pruned_at > PRUNE_EVERY_S:
            self._pruned_at = self.clock()
            self.queue.prune()

    def detail(self):
        channels = self.store.list()
        failing = sum(1 for c in channels if self.queue is not None and self.queue.status(c["id"])["state"] == "failing")
        return {"channels": len(channels), "failing": failing, "alerts_raised": self.raised, "sending": len(self._senders)}

    # -- alerts

    def raise_alert(self, alert):
        """Queue an alert for every channel that wants it (once per key) and tell the console."""
        self.open_queue()
        targets = [c["id"] for c in self.store.list() if wants(c, alert)]
        if not self.queue.raise_alert(alert, targets):
            return False
        self.raised += 1
        log.info("alert %s (%s) for %d channel(s): %s", alert["id"], alert["kind"], len(targets), alert["message"])
        self.topic.publish(alert)
        return True

    def is_watched(self, job_id):
        return self.queue is not None and self.queue.is_watched(job_id)

    # -- delivery

    def dispatch(self):
        channels = {c["id"]: c for c in self.store.list()}
        now = self.clock()
        with self._lock:
            busy = set(self._senders)
        due = self.queue.channels_due(lambda cid: quiet_until(channels[cid].get("quiet"), now) if cid in channels else None)
        for channel_id in due:
            channel = channels.get(channel_id)
            if channel is None or channel_id in busy or self._held(channel_id, now):
                continue
            thread = threading.Thread(target=self._send_all, args=(channel,), name="notify-%s" % channel_id, daemon=True)
            with self._lock:
                self._senders[channel_id] = thread
            thread.start()

    def _held(self, channel_id, now):
        """Whether a channel's BURST singles this window are spent (its next alerts wait, then go as a digest)."""
        sends = self._sends[channel_id]
        while sends and now - sends[0] >= BURST_WINDOW_S:
            sends.popleft()
        return len(sends) >= BURST

    def _send_all(self, channel):
        channel_id = channel["id"]
        try:
            while True:
                urgent_only = quiet_until(channel.get("quiet"), self.clock()) is not None
                batch = self.queue.take(channel_id, DIGEST_MAX, urgent_only)
                if not batch:
                    return
                alerts = [alert for _, alert in batch]
                error = deliver(channel, alerts, self.host)
                keys = [key for key, _ in batch]
                if error is not None:
                    self.queue.failed(channel_id, keys, error)
                    log.warning("channel %s (%s, %s): %d alert(s) not delivered: %s", channel_id, channel["format"],
                                mask_url(channel["url"]) if "url" in channel else channel["argv"][0], len(keys), error)
                    return
                self.queue.delivered(channel_id, keys)
                if len(batch) == 1:
                    self._sends[channel_id].append(self.clock())
                if len(batch) < DIGEST_MAX:
                    return
        except Exception:
            log.exception("channel %s: delivery failed", channel_id)
        finally:
            with self._lock:
                self._senders.pop(channel_id, None)

    def send_test(self, channel):
        """Send a test alert to `channel` now, on the caller's thread: None when delivered, else why not."""
        now = time.time()
        from .alert import make_alert

        alert = make_alert("test:%s:%d" % (channel["id"], int(now * 1000)), "test", [], self.host, "specdeck test on %s" % self.host,
                           "a test alert from specdeck on %s: this channel works" % self.host, now)
        error = deliver(channel, [alert], self.host)
        if self.queue is not None:
            self.queue.tested(channel["id"], error)
        return error

    def retry_now(self, channel_id=None, advance_s=0.0):
        """Try a channel's (or every channel's) pending alerts now, its backoff forgotten; with
        `advance_s`, move the queue's clock on that far first (a day of outage without a day's wait)."""
        self.clock_shift_s += max(0.0, advance_s)
        if advance_s <= 0:
            self.queue.retry_now(channel_id)
        self._sends.clear()
        self.daemon.services.wake(self.name)
