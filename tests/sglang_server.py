"""SGLang's server as `python -m sglang.launch_server` answers a specdeck test, where SGLang
itself cannot run (it needs a GPU): its recorded data (tests/data/sglang/) served by a real HTTP
server on the given port (/health, /metrics, /get_server_info and /server_info), and its recorded
decode lines printed to its log with the time of printing in SGLang's own prefix. Used as the
`sglang` package (SGLANG_STANDIN_DIR on PYTHONPATH) of a job `serve --engine sglang` starts."""

import argparse
import os
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

DATA = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data", "sglang")
PACKAGE = {"__init__.py": "", "launch_server.py": "from tests.sglang_server import main\nmain()\n"}


def install(directory):
    """A `sglang` package in `directory` whose launch_server is this server; returns directory."""
    os.makedirs(os.path.join(directory, "sglang"), exist_ok=True)
    for name, text in PACKAGE.items():
        with open(os.path.join(directory, "sglang", name), "w") as f:
            f.write(text)
    return directory


def read(name):
    with open(os.path.join(DATA, name), "rb") as f:
        return f.read()


class Recorded(BaseHTTPRequestHandler):
    ROUTES = {"/health": (b"", "text/plain"), "/metrics": (read("metrics.txt"), "text/plain; version=0.0.4"),
              "/get_server_info": (read("server_info.json"), "application/json"),
              "/server_info": (read("server_info.json"), "application/json")}

    def do_GET(self):
        if self.path not in self.ROUTES:
            self.send_error(404)
            return
        body, kind = self.ROUTES[self.path]
        self.send_response(200)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


def decode_lines(now=None):
    """The recorded log's lines, each prefix's time made `now` (UTC, as SGLang writes it)."""
    stamp = time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(time.time() if now is None else now))
    return ["[%s%s" % (stamp, line[len("[2025-10-02 09:14:01"):]) for line in read("decode.log").decode().splitlines()]


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, required=True)
    args, _rest = parser.parse_known_args()
    server = ThreadingHTTPServer((args.host, args.port), Recorded)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    for line in decode_lines():
        sys.stdout.write(line + "\n")
    sys.stdout.flush()
    threading.Event().wait()
