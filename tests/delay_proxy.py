"""A TCP proxy on loopback that delays every byte by a fixed time each way: a long link (a GPU
host an ocean away) for tests and benchmarks, where the kernel has no netem. Order and
bandwidth are kept; only latency is added. `DelayProxy(port, rtt_s=0.15)` listens on
127.0.0.1 at `.port` and forwards to 127.0.0.1:`port`; `stop()` closes it and every link.
`turns` counts the times the conversation changed direction (laptop to host after host to
laptop): about the round trips a protocol took.
"""

import heapq
import socket
import threading
import time


class DelayProxy:
    def __init__(self, target_port, rtt_s=0.15, target_host="127.0.0.1"):
        self.target = (target_host, target_port)
        self.one_way_s = rtt_s / 2.0
        self.turns = 0
        self._last_direction = None
        self._listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._listener.bind(("127.0.0.1", 0))
        self._listener.listen(64)
        self.port = self._listener.getsockname()[1]
        self._sockets = []
        self._lock = threading.Lock()
        self._stopped = threading.Event()
        threading.Thread(target=self._accept, name="delay-proxy", daemon=True).start()

    def _accept(self):
        while not self._stopped.is_set():
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            try:
                upstream = socket.create_connection(self.target, timeout=10)
            except OSError:
                client.close()
                continue
            for sock in (client, upstream):
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                sock.settimeout(None)
            with self._lock:
                self._sockets += [client, upstream]
            for source, sink, direction in ((client, upstream, "up"), (upstream, client, "down")):
                Pipe(self, source, sink, direction).start()

    def note(self, direction):
        with self._lock:
            if direction == "up" and self._last_direction == "down":
                self.turns += 1
            self._last_direction = direction

    def stop(self):
        self._stopped.set()
        try:
            self._listener.close()
        except OSError:
            pass
        with self._lock:
            sockets, self._sockets = self._sockets, []
        for sock in sockets:
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            sock.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.stop()


class Pipe:
    """One direction of one link: a reader that stamps each chunk, a writer that sends it when
    its time has come."""

    def __init__(self, proxy, source, sink, direction):
        self.proxy, self.source, self.sink, self.direction = proxy, source, sink, direction
        self.queue = []  # (due, order, bytes); None bytes: the source closed
        self.order = 0
        self.ready = threading.Condition()

    def start(self):
        threading.Thread(target=self._read, daemon=True).start()
        threading.Thread(target=self._write, daemon=True).start()

    def _read(self):
        while True:
            try:
                data = self.source.recv(65536)
            except OSError:
                data = b""
            if data:
                self.proxy.note(self.direction)
            with self.ready:
                self.order += 1
                heapq.heappush(self.queue, (time.monotonic() + self.proxy.one_way_s, self.order, data or None))
                self.ready.notify()
            if not data:
                return

    def _write(self):
        while True:
            with self.ready:
                while not self.queue:
                    self.ready.wait()
                due, _, data = self.queue[0]
                wait = due - time.monotonic()
                if wait > 0:
                    self.ready.wait(wait)
                    continue
                heapq.heappop(self.queue)
            try:
                if data is None:
                    self.sink.shutdown(socket.SHUT_WR)
                    return
                self.sink.sendall(data)
            except OSError:
                return
