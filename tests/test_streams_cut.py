"""Every stream kind resumed after a cut link, on one real cut (a veth pair taken down under a
real sshd in a network namespace): the job events, a job's log and the telemetry samples each
arrive in order, with nothing repeated, and what happened during the cut arrives after it."""

import threading
import time

from tests.conftest import laptop_for
from tests.sshd_fixtures import wait_for
from tui.client import AgentClient
from tui.connection import link_factory


class Recorder:
    def __init__(self):
        self.frames = []  # (seq, data)
        self.lock = threading.Lock()

    def __call__(self, data, seq):
        with self.lock:
            self.frames.append((seq, data))

    def seqs(self):
        with self.lock:
            return [seq for seq, _ in self.frames]


def test_every_stream_kind_resumes_after_a_cut_link(netns_host, tmp_path, monkeypatch, host_python):
    laptop_for(netns_host, tmp_path, monkeypatch)
    client = AgentClient(link_factory("gpuhost", python=host_python), reconnect=True)
    client.start()
    try:
        events, log, samples = Recorder(), Recorder(), Recorder()
        client.subscribe("jobs.events", {}, events)
        count = 80
        job = client.call("jobs.submit", {"argv": ["bash", "-c", "for i in $(seq 1 %d); do echo line $i; sleep 0.1; done" % count]})
        client.subscribe("jobs.follow", {"id": job["id"], "after": 0}, log)
        client.subscribe("telemetry.follow", {}, samples)
        wait_for(lambda: len(samples.frames) >= 2 and len(log.frames) >= 2, 30, message="streams never started")

        # During the cut: a job starts and ends, the log grows, samples are taken.
        netns_host.cut()
        wait_for(lambda: client.state == "reconnecting", 30, message="the cut was never noticed")
        samples_before = len(samples.frames)
        short = netns_host.ns_run(["true"], check=False)  # the namespace is alive
        assert short.returncode == 0
        time.sleep(3)
        netns_host.restore()
        wait_for(lambda: client.state == "connected", 30, message="never reconnected")
        quick = client.call("jobs.submit", {"argv": ["sh", "-c", "exit 4"]})

        def ended(job_id):
            return [r for _, data in events.frames for r in data.get("records", []) if r["id"] == job_id and r["event"] == "ended"]

        wait_for(lambda: ended(job["id"]) and ended(quick["id"]), 60, message="job ends never arrived")
        wait_for(lambda: len(samples.frames) >= samples_before + 3, 30, message="samples did not resume")
        assert samples.frames[0][1].get("snapshot"), "a new subscriber gets the whole latest sample first"

        for name, recorder in (("jobs.events", events), ("jobs.follow", log), ("telemetry.follow", samples)):
            seqs = recorder.seqs()
            assert seqs == sorted(seqs) and len(seqs) == len(set(seqs)), "%s repeated or reordered frames: %r" % (name, seqs)
        assert len(ended(job["id"])) == 1 and ended(quick["id"])[0]["job"]["exit_code"] == 4
        lines = "".join(data["text"] for _, data in log.frames).splitlines()
        assert lines == ["line %d" % i for i in range(1, count + 1)]
        # The samples taken while the link was down were delivered after it, not lost.
        times = [record["time"] for _, data in samples.frames for record in data.get("records", [])]
        gaps = [b - a for a, b in zip(times, times[1:])]
        assert gaps and max(gaps) < 2.5, "a hole in the samples across the cut: %r" % gaps
    finally:
        client.close()
