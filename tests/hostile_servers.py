"""Real /metrics servers on loopback for the feed tests and benchmark: a healthy one serving a
real vLLM's exposition (its counters grow each minute of the test as the test says), and the
hostile ones a user met: one that trickles a byte each half second, one that streams hundreds
of MB, one with NaN/+Inf/negative counters, one flooding per-position series and label sets,
and one that redirects to another host. Raw sockets, one thread per connection, so each
misbehaves exactly as written and stops when closed."""

import functools
import socket
import threading
import time
from pathlib import Path

import pytest

DATA = Path(__file__).parent / "serving_data"
IDLE = (DATA / "vllm_metrics_idle.txt").read_text()
AFTER = (DATA / "vllm_metrics_after.txt").read_text()  # 62 drafts, 186 drafted, 180 accepted
AFTER_ACCEPT_LENGTH = 1 + 180 / 62
HUGE_BYTES = 300 << 20
FLOOD_POSITIONS = 40_000  # 2.9 MB: under the 4 MiB cap, so the series caps are what stops it


def nan_text():
    return ("# TYPE vllm:spec_decode_num_drafts counter\nvllm:spec_decode_num_drafts_total{engine=\"0\"} NaN\n"
            "# TYPE vllm:spec_decode_num_accepted_tokens counter\nvllm:spec_decode_num_accepted_tokens_total{engine=\"0\"} +Inf\n"
            "# TYPE vllm:spec_decode_num_draft_tokens counter\nvllm:spec_decode_num_draft_tokens_total{engine=\"0\"} -5.0\n")


def flood_text(step):
    """Per-position series 0..FLOOD_POSITIONS-1 and, for position 0, as many label sets; the
    counts grow with `step`, so each scrape is a new sample of every series."""
    lines = ["# TYPE vllm:spec_decode_num_drafts counter", "vllm:spec_decode_num_drafts_total %d" % (10 * step),
             "# TYPE vllm:spec_decode_num_accepted_tokens_per_pos counter"]
    lines += ['vllm:spec_decode_num_accepted_tokens_per_pos_total{position="%d"} %d' % (p, step) for p in range(FLOOD_POSITIONS)]
    lines += ['vllm:spec_decode_num_accepted_tokens_per_pos_total{position="0",rank="%d"} %d' % (r, step) for r in range(2000)]
    return "\n".join(lines) + "\n"


class RawServer:
    """Listens on 127.0.0.1; each connection is answered by `behaviour(sock, server)` on a thread."""

    def __init__(self, behaviour):
        self.behaviour = behaviour
        self.text = IDLE  # what the healthy behaviour serves
        self.scrapes = 0
        self.closed = threading.Event()
        self.listener = socket.socket()
        self.listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.listener.bind(("127.0.0.1", 0))
        self.listener.listen(16)
        self.listener.settimeout(0.2)
        self.url = "http://127.0.0.1:%d" % self.listener.getsockname()[1]
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self):
        while not self.closed.is_set():
            try:
                sock, _ = self.listener.accept()
            except socket.timeout:
                continue
            except OSError:
                return
            threading.Thread(target=self._serve, args=(sock,), daemon=True).start()

    def _serve(self, sock):
        try:
            sock.settimeout(5)
            request = b""
            while b"\r\n\r\n" not in request:
                chunk = sock.recv(4096)
                if not chunk:
                    return
                request += chunk
            self.scrapes += 1
            self.behaviour(sock, self)
        except OSError:
            pass  # the reader hung up (its deadline or cap): what a hostile server gets
        finally:
            sock.close()

    def close(self):
        self.closed.set()
        self.listener.close()


def _reply(sock, body, status="200 OK", headers=""):
    sock.sendall(("HTTP/1.1 %s\r\nContent-Length: %d\r\n%sConnection: close\r\n\r\n" % (status, len(body), headers)).encode() + body)


def healthy(sock, server):
    _reply(sock, server.text.encode())


def trickle(sock, server):
    sock.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 100000\r\n\r\n")
    text = AFTER.encode()
    for index in range(100000):
        if server.closed.is_set():
            return
        sock.sendall(text[index % len(text): index % len(text) + 1])
        time.sleep(0.5)


def huge(sock, server):
    # No length said: the only way to know it is huge is to read it.
    sock.sendall(b"HTTP/1.1 200 OK\r\nConnection: close\r\n\r\n")
    line = b"vllm:some_histogram_bucket{le=\"0.5\",engine=\"0\"} 12345\n"
    block = line * (65536 // len(line))
    sent = 0
    while sent < HUGE_BYTES and not server.closed.is_set():
        sock.sendall(block)
        sent += len(block)


def nan(sock, server):
    _reply(sock, nan_text().encode())


def flood(sock, server):
    _reply(sock, flood_text(server.scrapes).encode())


def redirect(sock, server):
    # 127.0.0.2 is loopback too, but another host as far as the URL says.
    port = server.listener.getsockname()[1]
    _reply(sock, b"", "302 Found", "Location: http://127.0.0.2:%d/metrics\r\n" % port)


def html(sock, server):
    _reply(sock, b"<!DOCTYPE html><html><body>Welcome to nginx!</body></html>\n", headers="Content-Type: text/html\r\n")


@functools.lru_cache(maxsize=1)
def _bomb():
    import gzip

    return gzip.compress(b"0" * (64 << 20))  # made once: compressing it at each request costs more than a read's deadline on a busy machine


def gzip_bomb(sock, server):
    # 64 KiB on the wire, 64 MiB once decompressed: a reader must stop at its cap while inflating.
    _reply(sock, _bomb(), headers="Content-Encoding: gzip\r\n")


def empty(sock, server):
    # Its headers, then nothing: the connection closed with no body.
    sock.sendall(b"HTTP/1.1 200 OK\r\nConnection: close\r\n\r\n")


BEHAVIOURS = {"html": html, "gzip_bomb": gzip_bomb, "empty": empty, "healthy": healthy, "trickle": trickle, "huge": huge, "nan": nan, "flood": flood, "redirect": redirect}


@pytest.fixture
def servers():
    """servers(behaviour=healthy): a RawServer with that behaviour, each closed after the test."""
    made = []

    def make(behaviour=healthy):
        server = RawServer(behaviour)
        made.append(server)
        return server

    yield make
    for server in made:
        server.close()
