"""A receiver that answers and then trickles its body a byte at a time costs the host's daemon one
bounded try per ping or delivery, and nothing after it: the real daemon, pinging 15 heartbeats
each second and retrying 5 channels, all to one real trickling receiver on loopback, keeps the
same count of threads and open descriptors (read from /proc of its process) from the end of the
first tries to the end of the third. Before, each try that reached its deadline left its thread
reading and its socket open (the issue: 18 -> 44 threads, 20 -> 45 descriptors in 4.5 minutes).

The daemon also starts with its soft limit on open descriptors raised to the hard one."""

import os
import resource

from remote.notify import heartbeat, send
from tests.helpers.cli import daemon_pid
from tests.helpers.waits import wait_for
from tests.notify_receiver import Receiver

HEARTBEATS = 15
CHANNELS = 5
TIMED_OUT = "no complete answer within %d s" % send.TRY_DEADLINE_S


def counts(pid):
    """(threads, open descriptors) of process `pid`, as /proc shows them."""
    return len(os.listdir("/proc/%d/task" % pid)), len(os.listdir("/proc/%d/fd" % pid))


def soft_and_hard_nofile(pid):
    """The process's limits on open files as /proc says them ("1024", "unlimited")."""
    with open("/proc/%d/limits" % pid) as f:
        line = next(line for line in f if line.startswith("Max open files"))
    return tuple(line.split()[3:5])


def test_tries_that_reach_their_deadline_leave_no_thread_or_socket_behind(agent_home, monkeypatch):
    from tui.transport.connection import open_client

    monkeypatch.setenv(heartbeat.MIN_EVERY_ENV, "1")
    trickling = Receiver(mode="trickle")  # 200 and its headers at once, then a byte each 0.5 s for a minute
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (min(soft, hard, 512), hard))  # the daemon starts under a low soft limit
    try:
        client = open_client("local")
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
    try:
        pid = daemon_pid(agent_home)
        said = "unlimited" if hard == resource.RLIM_INFINITY else str(hard)
        assert soft_and_hard_nofile(pid) == (said, said)

        for number in range(CHANNELS):
            client.call("notify.add", {"url": "%s/hook%d" % (trickling.url, number), "format": "json"})
        for number in range(HEARTBEATS):
            client.call("notify.heartbeat", {"url": "%s/ping%d" % (trickling.url, number), "every": 1})
        client.call("notify.send", {"message": "a job failed", "urgent": True})

        def all_tried(tries):
            listed = client.call("notify.list")
            beats = [h for h in listed["heartbeats"] if h["pings"] >= tries]
            channels = [c for c in listed["channels"] if c["status"]["requests"] >= tries]
            return listed if len(beats) == HEARTBEATS and len(channels) == CHANNELS else None

        # The first tries ended at their deadline: each heartbeat's next ping and each channel's
        # retry is under way now, one try each.
        first = wait_for(lambda: all_tried(1), message="every first try at its deadline")
        assert {h["last_error"] for h in first["heartbeats"]} == {TIMED_OUT}
        assert {c["status"]["last_error"] for c in first["channels"]} == {TIMED_OUT}
        client.call("notify.retry", {}, timeout=60)  # the channels try again now (the reply: once tried)
        settled = counts(pid)

        # Two more rounds of tries, each ending at its deadline.
        seen = [settled]
        for tries in (2, 3):
            client.call("notify.retry", {}, timeout=60)
            wait_for(lambda: all_tried(tries), message="every try %d at its deadline" % tries)
            seen.append(counts(pid))
        print("threads, descriptors of the daemon after each round: %s" % seen)
        last = client.call("notify.list")
        assert {h["last_error"] for h in last["heartbeats"]} == {TIMED_OUT}
        assert {c["status"]["last_error"] for c in last["channels"]} == {TIMED_OUT}
        threads, descriptors = seen[-1]
        # One try under way per heartbeat and channel at most, then as now: a few of slack for
        # the daemon's own comings and goings, far under the 15 + 5 a round that leaked before.
        assert threads <= settled[0] + 5, seen
        assert descriptors <= settled[1] + 5, seen
    finally:
        client.close()
        trickling.close()
