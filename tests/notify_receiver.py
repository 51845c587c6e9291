"""A real HTTP receiver on loopback for the notification tests and benchmark: it keeps every
request (path, headers, body; a GET's body is empty, its `method` GET), answers 200, 500 (with any reason phrase), never or a byte every
0.5 s (`mode`), and can go down and come back up on the same port."""

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest


class Receiver:
    def __init__(self, mode="ok"):
        self.mode = mode
        self.reason = None  # the status line's reason phrase (None: the usual one)
        self.requests = []
        self.changed = threading.Condition()
        self.release = threading.Event()  # ends the waits of a receiver that never answers
        self.port = None
        self._server = None
        self.up()

    @property
    def url(self):
        return "http://127.0.0.1:%d" % self.port

    def up(self):
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                with receiver.changed:
                    receiver.requests.append({"method": self.command, "path": self.path, "headers": dict(self.headers), "body": body, "at": time.time()})
                    receiver.changed.notify_all()
                if receiver.mode == "hang":
                    receiver.release.wait(120)
                    return
                self.send_response(500 if receiver.mode == "500" else 200, receiver.reason)
                if receiver.mode == "trickle":  # one byte every 0.5 s, for a minute
                    self.send_header("Content-Length", "120")
                    self.end_headers()
                    for _ in range(120):
                        if receiver.release.wait(0.5):
                            return
                        self.wfile.write(b"x")
                        self.wfile.flush()
                    return
                self.send_header("Content-Length", "2")
                self.end_headers()
                self.wfile.write(b"ok")

            def do_GET(self):  # a heartbeat's ping: kept like a POST (no Content-Length: an empty body)
                self.do_POST()

            def log_message(self, *args):
                pass

        ThreadingHTTPServer.allow_reuse_address = True
        self._server = ThreadingHTTPServer(("127.0.0.1", self.port or 0), Handler)
        self._server.daemon_threads = True
        self.port = self._server.server_address[1]
        threading.Thread(target=self._server.serve_forever, daemon=True).start()

    def down(self):
        self._server.shutdown()
        self._server.server_close()

    def close(self):
        self.release.set()
        self.down()

    def wait_for(self, count, timeout_s=60.0):
        """The requests once there are `count` of them (AssertionError after timeout_s)."""
        deadline = time.monotonic() + timeout_s
        with self.changed:
            while len(self.requests) < count:
                left = deadline - time.monotonic()
                assert left > 0, "the receiver got %d requests, not %d" % (len(self.requests), count)
                self.changed.wait(left)
            return list(self.requests)

    def json_bodies(self):
        return [json.loads(r["body"]) for r in self.requests]


@pytest.fixture
def receiver():
    """A loopback receiver of the host's alerts, closed after the test."""
    found = Receiver()
    yield found
    found.close()
