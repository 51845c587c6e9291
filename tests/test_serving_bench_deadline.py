"""A benchmark request has one deadline for the whole of it, carried by its socket: an engine that
answers and then trickles its reply a byte at a time, or never answers, is a refused reply at the
deadline (named in the run's records) and the next request goes on; a real HTTP server on loopback."""

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from remote.serving import bench


@pytest.fixture
def engine():
    """A completions endpoint whose first two requests trickle and hang, the rest answered at once."""
    release = threading.Event()
    served = []

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self):
            request = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            served.append(request["prompt"])
            body = json.dumps({"choices": [{"index": 0, "text": " ok" * request["max_tokens"]}],
                               "usage": {"prompt_tokens": 3, "completion_tokens": request["max_tokens"]}}).encode()
            if len(served) == 2:  # never a status line
                release.wait(120)
                return
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            if len(served) == 1:  # a byte every 0.1 s: each read in time, the reply never whole in time
                for byte in body:
                    if release.wait(0.1):
                        return
                    self.wfile.write(bytes([byte]))
                    self.wfile.flush()
                return
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield "http://127.0.0.1:%d" % server.server_address[1], served
    release.set()
    server.shutdown()
    server.server_close()


def test_a_trickling_or_silent_engine_costs_a_request_its_deadline_not_the_run(engine):
    url, served = engine
    records = []
    tokens, seconds, request_tps = bench.run_requests(url, "m", ["trickled", "silent", "answered"], 8, records=records, deadline_s=1.5)
    assert served == ["trickled", "silent", "answered"]  # the run went on past both
    assert [r["refused"] for r in records[:2]] == ["no complete reply within 1.5 s"] * 2
    assert records[2]["refused"] is None and records[2]["tokens"] == 8 and tokens == 8
    assert request_tps[:2] == [None, None] and request_tps[2] > 0
