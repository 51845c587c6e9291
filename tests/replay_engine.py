"""A stand-in for `python -m vllm.entrypoints.cli.main serve ...` that replays a real vLLM's
/metrics: `install(directory)` writes a package named `vllm` there whose entry point is a real
HTTP server on the port it is told (stdlib only: it runs under the server's PYTHONPATH alone),
answering /health and /metrics with the exposition text of the file at $REPLAY_METRICS, every
counter multiplied by the number of scrapes so far (the same traffic once more each scrape), the
drafts counter also by $REPLAY_DRAFTS_FACTOR (2: the same accepted tokens over twice the drafts)."""

from tests import hostile_engine

MAIN = r'''
import os, sys, threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

argv = sys.argv[1:]
port = int(argv[argv.index("--port") + 1])
with open(os.environ["REPLAY_METRICS"]) as f:
    recorded = f.read()
drafts_factor = float(os.environ.get("REPLAY_DRAFTS_FACTOR") or 1.0)
scrapes = [0]
lock = threading.Lock()


def now_text():
    with lock:
        scrapes[0] += 1
        factor = scrapes[0]
    lines = []
    for line in recorded.splitlines():
        name = line.split(" ")[0]
        if line.startswith("vllm:") and "_total" in name:
            value = float(line.rsplit(" ", 1)[1]) * factor
            if name.startswith("vllm:spec_decode_num_drafts_total"):
                value *= drafts_factor
            line = "%s %r" % (line.rsplit(" ", 1)[0], value)
        lines.append(line)
    return "\n".join(lines) + "\n"


class Handler(BaseHTTPRequestHandler):
    def do_GET(self):
        body = now_text().encode() if self.path == "/metrics" else b""
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


ThreadingHTTPServer(("127.0.0.1", port), Handler).serve_forever()
'''


def install(directory):
    """A `vllm` package in `directory` whose CLI entry point is the replaying server."""
    return hostile_engine.install(directory, MAIN)
