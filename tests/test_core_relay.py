"""The relay's way to its daemon (remote/core/relay.py) over a real Unix socket at the daemon's
path: a daemon that resets the connection before its hello (the loser of two started at once
by two consoles) is tried again, not the end of the console's session; one that accepts and
says nothing does not hold the relay past its deadline."""

import os
import select
import socket
import threading

import pytest

from remote.core import buildinfo, paths, relay
from remote.core.protocol import encode


@pytest.fixture
def state(tmp_path, monkeypatch):
    monkeypatch.setenv("SPECDECK_HOME", str(tmp_path / "state"))

    def no_start():
        raise AssertionError("the relay started a daemon where one listens")

    monkeypatch.setattr(relay, "_start_daemon", no_start)
    return paths.socket_path()


def listen(path):
    """A listening socket put at `path` in one step (renamed over what was there)."""
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(path + ".new")
    server.listen(4)
    os.rename(path + ".new", path)
    return server


def serve(path, answers):
    """A daemon at `path` answering one connection after another: "lost" is a daemon that loses
    the race for the socket (it closes its listening socket with the connection waiting in its
    backlog, which resets it, once another listens in its place), "closed" accepts and closes,
    "silent" accepts and says nothing, bytes are sent as they are (and the connection kept)."""
    kept = [listen(path)]

    def loop():
        for answer in answers:
            if answer == "lost":
                select.select([kept[0]], [], [])
                lost, kept[0] = kept[0], listen(path)
                lost.close()
                continue
            conn, _ = kept[0].accept()
            kept.append(conn)
            if answer == "closed":
                conn.close()
            elif answer != "silent":
                conn.sendall(answer)

    threading.Thread(target=loop, daemon=True).start()
    return kept


def test_a_daemon_that_resets_before_its_hello_is_tried_again(state):
    hello = encode({"hello": "specdeck", "build": buildinfo.build_id()})
    kept = serve(state, ["lost", "closed", hello + b"after"])  # reset, closed with nothing said, then the one that stays
    sock, line, rest = relay.connect_daemon(start=True)
    try:
        assert line + b"\n" == hello and rest == b"after"
        assert len(kept) == 3  # the listener and the two it accepted: no try more than needed
    finally:
        sock.close()


def test_only_a_running_daemon_refuses_at_once_and_a_silent_one_within_the_deadline(state, monkeypatch):
    monkeypatch.setattr(relay, "CONNECT_TRIES_S", 0.5)
    kept = serve(state, ["lost", "silent", "silent"])  # kept open to the end
    with pytest.raises(ConnectionError, match="before its hello"):
        relay.connect_daemon(start=False)  # the keeper's spare: no retry, no start
    with pytest.raises(ConnectionError, match="before its hello"):
        relay.connect_daemon(start=False)
    with pytest.raises(ConnectionError, match="could not reach a specdeck daemon"):
        relay.connect_daemon(start=True)  # a silent daemon, accepting: the deadline ends the tries
    for conn in kept:
        conn.close()
