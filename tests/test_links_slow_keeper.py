"""A link keeper that is running but slow to greet (a laptop whose cores are busy) is waited
for; one that is stopped is left alone after GREETING_TIMEOUT_S (tests/test_links_keeper.py
stops a real one). Here a keeper of our own, on a real Unix socket, greets after the timeout."""

import json
import os
import socket
import threading
import time

import pytest

from tui.transport import links
from tui.transport.client import ConnectError


def slow_keeper(path, greet_after_s):
    """A keeper that greets `greet_after_s` late, then answers a link request with its own error."""
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(path)
    server.listen(1)

    def serve():
        conn, _ = server.accept()
        time.sleep(greet_after_s)
        conn.sendall(json.dumps({"keeper": "hello", "pid": os.getpid()}).encode() + b"\n")
        request = conn.recv(65536)
        assert json.loads(request.partition(b"\n")[0])["op"] == "link"
        conn.sendall(json.dumps({"ok": False, "error": {"type": "ConnectError", "message": "answered by the slow keeper"}}).encode() + b"\n")
        conn.close()
        server.close()

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    return thread


def test_a_running_keeper_that_greets_late_is_waited_for(tmp_path, monkeypatch):
    path = str(tmp_path / "keeper.sock")
    monkeypatch.setattr(links, "socket_path", lambda: path)
    thread = slow_keeper(path, links.GREETING_TIMEOUT_S + 1.0)
    started = time.monotonic()
    with pytest.raises(ConnectError, match="answered by the slow keeper"):
        links.keeper_link("gpuhost", "python3", accept_new=lambda key: False)
    assert time.monotonic() - started > links.GREETING_TIMEOUT_S  # it did wait past the first timeout
    thread.join(5)
