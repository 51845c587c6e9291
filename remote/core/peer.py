"""Who is at the other end of a Unix socket: a client of one of specdeck's sockets (the host's
daemon, the laptop's link keeper) checks that its peer is this very user before it sends a byte,
so that a socket someone else put in the path's place (a directory swapped between a check and
a connect) is told nothing, whatever the directories' modes said a moment before."""

import os
import socket
import struct


class NotOurs(OSError):
    """The socket's peer is another user (or cannot be told)."""


def peer_uid(sock):
    """The uid of the process at `sock`'s other end; None where this system cannot tell."""
    if hasattr(socket, "SO_PEERCRED"):  # Linux: struct ucred {pid, uid, gid}
        size = struct.calcsize("3i")
        return struct.unpack("3i", sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, size))[1]
    if hasattr(os, "uname") and os.uname().sysname == "Darwin":  # LOCAL_PEERCRED: struct xucred {version, uid, ...}
        sol_local, local_peercred = 0, 1
        return struct.unpack("2I", sock.getsockopt(sol_local, local_peercred, 76)[:8])[1]
    return None


def connect_own(path, timeout_s=None):
    """A socket connected to `path` whose peer is this user; NotOurs (nothing sent) otherwise.
    OSError as connect raises it (nobody listens, a stale socket)."""
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.settimeout(timeout_s)
        sock.connect(path)
        uid = peer_uid(sock)
        if uid != os.getuid():
            raise NotOurs("the socket %s is held by %s, not this user (uid %d): not used" % (
                path, "uid %d" % uid if uid is not None else "a process this system cannot name", os.getuid()))
        return sock
    except BaseException:
        sock.close()
        raise
