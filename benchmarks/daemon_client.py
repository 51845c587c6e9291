"""A bare connection to an agent's daemon socket for the benchmarks: one request at a time, stream
frames skipped, each reply with its size on the wire (what a client reads for it)."""

import json
import os
import socket


class Client:
    def __init__(self, home, timeout_s=600):
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.settimeout(timeout_s)
        self.sock.connect(os.path.join(home, "daemon.sock"))
        self.buffer = b""
        self.next_id = 0
        self.hello = json.loads(self.line())

    def line(self):
        while b"\n" not in self.buffer:
            chunk = self.sock.recv(1 << 20)
            if not chunk:
                raise ConnectionError("the daemon closed the connection")
            self.buffer += chunk
        line, _, self.buffer = self.buffer.partition(b"\n")
        return line

    def call_sized(self, method, params=None):
        """(reply frame, its size in bytes)."""
        self.next_id += 1
        self.sock.sendall(json.dumps({"id": self.next_id, "method": method, "params": params or {}}).encode() + b"\n")
        while True:
            line = self.line()
            frame = json.loads(line)
            if frame.get("id") == self.next_id:
                return frame, len(line)

    def call(self, method, params=None):
        return self.call_sized(method, params)[0]

    def close(self):
        self.sock.close()
