"""Every stream kind resumed after a cut link, on one real cut (a veth pair taken down under a
real sshd in a network namespace): the job events, a job's log, the telemetry samples and alerts,
the speculation figures of a server (a metrics endpoint in the namespace, serving vLLM's recorded
text) and a training run's records (a real speculators log replayed over the cut) each arrive in
order, with nothing repeated, and what happened during the cut arrives after it."""

import os
import shutil
import threading
import time
from pathlib import Path

from remote.training import logparse
from tests.helpers.cli import laptop_for
from tests.helpers.waits import wait_for
from tui.transport.client import AgentClient
from tui.transport.connection import link_factory


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

    def records(self):
        with self.lock:
            return [record for _, data in self.frames for record in data.get("records") or []]


DATA = Path(__file__).parent
# A /metrics endpoint inside the namespace, its counters growing by one recorded interval a request.
METRICS_SERVER = """
import http.server, sys
text = open(sys.argv[1]).read()
count = [0]
class Handler(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        count[0] += 1
        lines = []
        for line in text.splitlines():
            if line.startswith("vllm:") and "_total" in line.split(" ")[0]:
                name, value = line.rsplit(" ", 1)
                line = "%s %r" % (name, float(value) * count[0])
            lines.append(line)
        body = ("\\n".join(lines) + "\\n").encode()
        self.send_response(200)
        self.send_header("Content-Type", "text/plain; version=0.0.4")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
    def log_message(self, *args):
        pass
server = http.server.HTTPServer(("127.0.0.1", 0), Handler)
open(sys.argv[2] + ".tmp", "w").write(str(server.server_address[1]))
__import__("os").rename(sys.argv[2] + ".tmp", sys.argv[2])
server.serve_forever()
"""
# A training run's log, printed in twelve parts a second apart (the cut falls among them).
REPLAY = """
import sys, time
lines = open(sys.argv[1]).read().splitlines(True)
size = len(lines) // 12 + 1
for start in range(0, len(lines), size):
    sys.stdout.write("".join(lines[start:start + size]))
    sys.stdout.flush()
    time.sleep(1.0)
"""


def host_files(user, tmp_path):
    """The scripts and data the host user's jobs read, in a directory that user owns."""
    place = Path(user.home) / "cut-test"
    place.mkdir(exist_ok=True)
    (place / "metrics_server.py").write_text(METRICS_SERVER)
    (place / "replay.py").write_text(REPLAY)
    shutil.copy(DATA / "serving_data" / "vllm_metrics_after.txt", place / "metrics.txt")
    shutil.copy(DATA / "data" / "speculators-train-80cols.log", place / "train.log")
    for path in [place, *place.iterdir()]:
        shutil.chown(path, user.name, user.name)
    return place


def test_every_stream_kind_resumes_after_a_cut_link(netns_host, host_user, tmp_path, monkeypatch, host_python):
    laptop_for(netns_host, tmp_path, monkeypatch)
    place = host_files(host_user, tmp_path)
    client = AgentClient(link_factory("gpuhost", python=host_python), reconnect=True)
    client.start()
    try:
        events, log, samples, alerts, figures, training = Recorder(), Recorder(), Recorder(), Recorder(), Recorder(), Recorder()
        client.subscribe("jobs.events", {}, events)
        client.subscribe("telemetry.alerts_follow", {}, alerts)
        client.subscribe("training.follow", {}, training)
        port_file = str(place / "port")
        client.call("jobs.submit", {"argv": [host_python, str(place / "metrics_server.py"), str(place / "metrics.txt"), port_file],
                                    "name": "metrics endpoint"})
        wait_for(lambda: os.path.exists(port_file), 30, message="the metrics endpoint never started")
        server = client.call("serving.attach", {"url": "http://127.0.0.1:%s" % open(port_file).read()})
        client.subscribe("serving.follow", {}, figures)
        count = 80
        job = client.call("jobs.submit", {"argv": ["bash", "-c", "for i in $(seq 1 %d); do echo line $i; sleep 0.1; done" % count]})
        client.subscribe("jobs.follow", {"id": job["id"], "after": 0}, log)
        client.subscribe("telemetry.follow", {}, samples)
        failing = client.call("jobs.submit", {"argv": ["sh", "-c", "sleep 3; exit 3"], "name": "fails during the cut"})
        run = client.call("training.start", {"argv": [host_python, str(place / "replay.py"), str(place / "train.log")],
                                             "name": "replayed over the cut"})
        wait_for(lambda: len(samples.frames) >= 2 and len(log.frames) >= 2 and figures.records() and training.records(), 30,
                 message="streams never started")

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
        steps = [r for r in logparse.parse_text((place / "train.log").read_text()) if r["kind"] == "step"]
        wait_for(lambda: ended(run["id"]), 60, message="the training run never ended")
        wait_for(lambda: len([r for r in training.records() if r["kind"] == "step"]) >= len(steps), 30,
                 message="the training steps after the cut never came")

        streams = (("jobs.events", events), ("jobs.follow", log), ("telemetry.follow", samples),
                   ("telemetry.alerts_follow", alerts), ("serving.follow", figures), ("training.follow", training))
        for name, recorder in streams:
            seqs = recorder.seqs()
            assert seqs == sorted(seqs) and len(seqs) == len(set(seqs)), "%s repeated or reordered frames: %r" % (name, seqs)
        assert len(ended(job["id"])) == 1 and ended(quick["id"])[0]["job"]["exit_code"] == 4
        lines = "".join(data["text"] for _, data in log.frames).splitlines()
        assert lines == ["line %d" % i for i in range(1, count + 1)]
        # The samples taken while the link was down were delivered after it, not lost.
        times = [record["time"] for _, data in samples.frames for record in data.get("records", [])]
        gaps = [b - a for a, b in zip(times, times[1:])]
        assert gaps and max(gaps) < 2.5, "a hole in the samples across the cut: %r" % gaps
        # The server's figures, one a second: none missing across the cut, none twice.
        times = [r["time"] for r in figures.records() if r["server"] == server["id"]]
        gaps = [b - a for a, b in zip(times, times[1:])]
        assert len(times) == len(set(times)) and max(gaps) < 2.5, "a hole in the speculation figures: %r" % gaps
        # Every step of the run, once and in order, though some were read while the link was down.
        got = [r["step"] for r in training.records() if r["kind"] == "step" and r["job"] == run["id"]]
        assert got == [r["step"] for r in steps]
        # The job that failed during the cut raised its alert once, delivered after the cut.
        failed = [a for a in alerts.records() if a["kind"] == "job_failed" and a.get("job_id") == failing["id"]]
        assert len(failed) == 1, failed
    finally:
        client.close()
