"""A stand-in for `python -m vllm.entrypoints.cli.main serve ...` that answers the benchmark with
hostile per-request speculation metrics: `install(directory)` writes a package named `vllm` there
whose entry point is a real HTTP server on the port it is told (stdlib only: it runs under the
server's PYTHONPATH alone). It answers /health, /metrics (vLLM's counters, growing with each
completion) and /v1/completions: a baseline server (no --speculative-config) with plain replies,
a speculative one with the raw reply bodies of the JSON list at $HOSTILE_REPLIES, one per request
in order (the first for the benchmark's warm-up request), the last repeated."""

import json
import os

MAIN = r'''
import json, os, sys
from http.server import BaseHTTPRequestHandler, HTTPServer

argv = sys.argv[1:]
port = int(argv[argv.index("--port") + 1])
speculative = "--speculative-config" in argv
with open(os.environ["HOSTILE_REPLIES"]) as f:
    scripted = json.load(f)
served = [0]


def plain(tokens):
    return json.dumps({"id": "cmpl-1", "object": "text_completion", "choices": [{"index": 0, "text": " ok" * tokens}],
                       "usage": {"prompt_tokens": 7, "completion_tokens": tokens, "total_tokens": 7 + tokens}})


class Handler(BaseHTTPRequestHandler):
    def _send(self, body, length=True):
        body = body.encode() if isinstance(body, str) else body
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        if length:
            self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self):
        if self.path == "/health":
            return self._send("")
        n = served[0]
        text = ("vllm:spec_decode_num_drafts_total{engine=\"0\",model_name=\"m\"} %d\n"
                "vllm:spec_decode_num_draft_tokens_total{engine=\"0\",model_name=\"m\"} %d\n"
                "vllm:spec_decode_num_accepted_tokens_total{engine=\"0\",model_name=\"m\"} %d\n"
                "vllm:generation_tokens_total{engine=\"0\",model_name=\"m\"} %d\n") % (4 * n, 12 * n, 12 * n, 16 * n)
        self._send(text if speculative else "")

    def do_POST(self):
        request = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        index, served[0] = served[0], served[0] + 1
        if not speculative:
            return self._send(plain(request["max_tokens"]))
        entry = scripted[min(index, len(scripted) - 1)]
        self._send(entry["body"], length=entry.get("length", True))

    def log_message(self, *args):
        pass


HTTPServer(("127.0.0.1", port), Handler).serve_forever()
'''


def install(directory, main=MAIN):
    """A `vllm` package in `directory` whose CLI entry point is `main` (the hostile server by
    default; tests/replay_engine.py installs its own the same way)."""
    package = os.path.join(str(directory), "vllm", "entrypoints", "cli")
    os.makedirs(package)
    for level in ("vllm", "vllm/entrypoints", "vllm/entrypoints/cli"):
        open(os.path.join(str(directory), level, "__init__.py"), "w").close()
    with open(os.path.join(package, "main.py"), "w") as f:
        f.write(main)
    return str(directory)


def script(path, replies):
    """Write the speculative server's replies: each a raw body (str), or (body, False) for one
    sent without a Content-Length (read until the server closes)."""
    entries = [{"body": r[0], "length": r[1]} if isinstance(r, tuple) else {"body": r} for r in replies]
    with open(str(path), "w") as f:
        json.dump(entries, f)
    return str(path)
