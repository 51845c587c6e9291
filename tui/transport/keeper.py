"""The link keeper: one background process per laptop user that keeps SSH links to hosts open
between headless commands, as OpenSSH's ControlPersist does, so that a command to a host it
holds costs one request's round trip instead of a new SSH connection.

It holds one paramiko transport per host (keyed by the destination as typed and as resolved,
user@host:port) and spare relays on it (tui/transport/warm_links.py); a command that asks
(tui/transport/links.py) is handed one at once and its bytes are copied to it.

Host keys are checked against known_hosts here exactly as a command checks them; an unknown
key is accepted only for a command that said --accept-new (or whose user accepted that very
fingerprint). Every connection's peer is checked with SO_PEERCRED: only this user, greeted with
one line before its request is read (tui/transport/links.py).

It ends itself after `[links] keep` (tui.config.link_keep_s, read at every check so a changed
file applies) without a command, closes a host's link unused that long, ends at once when it
holds no link any more (nothing to keep warm; the next command starts another), and ends on
`specdeck disconnect` with no host (tui/cli/links.py) or SIGTERM, removing its socket. Its
lines go to the specdeck log file.
"""

import fcntl
import json
import logging
import os
import signal
import socket
import struct
import sys
import threading
import time

from .client import ConnectError
from .warm_links import Cold, KeptLink, splice

log = logging.getLogger("tui.keeper")

CHECK_S = 1.0
EMPTY_GRACE_S = 5.0  # a keeper that holds no link waits this long for a command, then ends
HEADER_TIMEOUT_S = 10.0
LOCK_WAIT_S = 5.0
# A relay taken by a command that is still running (a follow of a log, a long listing) is
# replaced this long after it was taken: the next command still finds the other spare at once.
REPLACE_AFTER_S = 1.0


def main(argv):
    """`python -m tui.transport.keeper SOCKET`: detach, take the socket, serve until idle."""
    path = argv[0]
    if os.fork():  # the starter returns at once; the keeper is nobody's child and no session leader
        os._exit(0)
    os.umask(0o077)
    os.chdir("/")
    lock = open(path + ".lock", "a")
    if not take_lock(lock, path):
        return 0  # another keeper runs for this socket: the command reaches that one
    leave_out_invoke()
    # SSH's library (150 ms of imports) loads while the socket is made and the first command
    # sends its request, not after: a cold command waits for it otherwise.
    threading.Thread(target=_import_ssh, name="keeper-import", daemon=True).start()
    try:
        os.unlink(path)  # a killed keeper's socket: no one listens on it any more
    except FileNotFoundError:
        pass
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(path)
    listener.listen(64)
    from .. import logs

    logs.setup(0, to_stderr=False)
    # The agent's zipapp is built (tens of ms, mostly zlib, which lets go of the GIL) while the
    # first command's SSH connection is being made, not after it.
    threading.Thread(target=_build_agent, name="keeper-build", daemon=True).start()
    keeper = Keeper(listener, path)
    signal.signal(signal.SIGTERM, lambda *_: keeper.stop())
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        keeper.serve()
    finally:
        keeper.end()
        lock.close()
    os._exit(0)  # the links' threads are not waited for


def take_lock(lock, path):
    """The keeper's lock for `path`. Held by a keeper that is ending (its socket already gone),
    it is waited for: that one is about to exit. Held by one that listens: False."""
    deadline = time.monotonic() + LOCK_WAIT_S
    while True:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return True
        except BlockingIOError:
            if os.path.exists(path) or time.monotonic() > deadline:
                return False
            time.sleep(0.01)


def _import_ssh():
    from . import ssh_transport  # noqa: F401 (imported for its cost, ahead of the first connection)

    import paramiko  # noqa: F401


def _build_agent():
    from .bootstrap import build_agent

    build_agent()


def leave_out_invoke():
    """paramiko imports `invoke` (with asyncio, yaml and unittest.mock: 80 ms of a cold command)
    only to run `Match exec` lines of ~/.ssh/config; without such a line (or an Include, which
    might hold one) it is left out, and paramiko reads the config as before."""
    import re

    try:
        with open(os.path.join(os.path.expanduser("~"), ".ssh", "config"), errors="replace") as f:
            text = f.read()
    except OSError:
        text = ""
    if not re.search(r"^\s*(match\b.*\bexec\b|include\b)", text, re.I | re.M):
        sys.modules.setdefault("invoke", None)  # `import invoke` then raises ImportError, which paramiko expects


class Keeper:
    def __init__(self, listener, path):
        self.listener = listener
        self.path = path
        self.inode = os.stat(path).st_ino
        self.links = {}
        self.lock = threading.Lock()
        self.sessions = 0
        self.last_used = time.monotonic()
        self.ending = threading.Event()
        self.sources = sources_stamp()

    # -- the loop

    def serve(self):
        self.listener.settimeout(CHECK_S)
        checked = time.monotonic()
        while not self.ending.is_set():
            try:
                conn, _ = self.listener.accept()
                with self.lock:  # a command from the moment it is taken: check() never ends under it
                    self.sessions += 1
                threading.Thread(target=self.handle, args=(conn,), name="keeper-command", daemon=True).start()
            except socket.timeout:
                pass
            except OSError as exc:
                if not self.ending.is_set():
                    log.warning("link keeper: cannot accept on %s: %s", self.path, exc)
                return
            if time.monotonic() - checked >= CHECK_S:
                checked = time.monotonic()
                self.check()

    def check(self):
        """Close what has not been used for `[links] keep`; end when nothing is left to keep;
        follow the agent's sources (here, every CHECK_S, not in each command's wait)."""
        from ..config import link_keep_s

        if sources_stamp() != self.sources:  # the rebuild waits for links' locks: not in this loop
            threading.Thread(target=self.follow_sources, name="keeper-sources", daemon=True).start()

        keep_s = link_keep_s()
        now = time.monotonic()
        with self.lock:
            for key, link in list(self.links.items()):
                if link.sessions:
                    continue
                dead = link.transport is not None and not link.transport.is_active()
                if dead or now - link.last_used > keep_s:
                    del self.links[key]
                    threading.Thread(target=link.close, daemon=True).start()
            idle_s = now - self.last_used
            if not self.sessions and (idle_s > keep_s or (not self.links and idle_s > min(keep_s, EMPTY_GRACE_S))):
                self.ending.set()

    def stop(self):
        """End now: the socket goes at once (a command from now on starts another keeper), the
        loop within CHECK_S."""
        self.ending.set()
        self.unlink()

    def unlink(self):
        """Remove our socket, not a newer keeper's."""
        try:
            if os.stat(self.path).st_ino == self.inode:
                os.unlink(self.path)
        except OSError:
            pass

    def end(self):
        """Stop listening, remove our socket, close every link."""
        self.ending.set()
        self.unlink()
        self.listener.close()
        with self.lock:
            links, self.links = list(self.links.values()), {}
        for link in links:
            link.close()

    # -- one connection

    def handle(self, conn):
        try:
            uid = struct.unpack("3i", conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i")))[1]
            if uid != os.getuid():
                log.warning("link keeper: refused a connection from uid %d", uid)
                self.reply(conn, {"ok": False, "error": {"type": "ConnectError", "permanent": True,
                                                         "message": "refused: this link keeper serves uid %d only" % os.getuid()}})
                return
            # Before the request: a command hears within a moment that a keeper runs here (one
            # stopped with SIGSTOP never greets, and the command connects itself).
            self.reply(conn, {"keeper": "hello", "pid": os.getpid()})
            header = self.read_header(conn)
            op = header.get("op")
            if op == "link":
                self.serve_link(conn, header)
            elif op == "disconnect":
                self.reply(conn, self.disconnect(header.get("host")))
                with self.lock:  # the grace of a keeper left with no link counts from here: the next command finds it
                    self.last_used = time.monotonic()
                if self.ending.is_set():
                    conn.close()
                    self.end()
                    os._exit(0)  # now, not at the loop's next turn: a keeper started next waits for our lock
            elif op == "status":
                self.reply(conn, self.status())
            else:
                self.reply(conn, {"ok": False, "error": {"type": "ConnectError", "message": "unknown keeper request %r" % op}})
        except Exception as exc:  # a command that went away mid-request, a bug: this connection only
            log.warning("link keeper: a request failed: %s: %s", type(exc).__name__, exc)
        finally:
            conn.close()
            with self.lock:
                self.sessions -= 1

    @staticmethod
    def read_header(conn):
        conn.settimeout(HEADER_TIMEOUT_S)
        buffer = b""
        while b"\n" not in buffer:
            chunk = conn.recv(4096)
            if not chunk or len(buffer) > 65536:
                raise ConnectionError("no request line")
            buffer += chunk
        header = json.loads(buffer.partition(b"\n")[0])
        if not isinstance(header, dict):
            raise ValueError("the request is not an object")
        return header

    @staticmethod
    def reply(conn, message, head=b""):
        conn.sendall(json.dumps(message).encode() + b"\n" + head)

    def serve_link(self, conn, header):
        with self.lock:
            self.last_used = time.monotonic()  # a link's use keeps the keeper, a status request does not
        link = None
        done = threading.Event()  # this command's relay ended: its replacement may start
        try:
            try:
                link, spare = self.take(header, done)
            except Cold:
                self.reply(conn, {"ok": False, "cold": True})
                return
            except ConnectError as exc:
                self.reply(conn, {"ok": False, "error": error_fields(exc)})
                return
            try:
                self.reply(conn, {"ok": True}, spare.head)
            except OSError:
                spare.close()
                return
            splice(conn, spare.link)
        finally:
            done.set()
            now = time.monotonic()
            with self.lock:
                self.last_used = now
                if link is not None:
                    link.sessions -= 1
                    link.last_used = now

    def take(self, header, done):
        """(the host's link, a started relay for this command), connecting first if needed. The
        relays taken are replaced once `done` is set (the command ended) or REPLACE_AFTER_S
        after, whichever comes first: started at once, a replacement's channel and the host's new
        relay process would take the keeper's and the host's CPU from the command it was taken
        for, while that command's bytes flow."""
        from .openssh import resolve

        host = str(header.get("host") or "")
        python = str(header.get("python") or "python3")
        environment = header.get("environment")
        environment = {str(k): str(v) for k, v in environment.items()} if isinstance(environment, dict) else None
        dest = resolve(host, environment=environment)
        dest.environment_agent = str(header.get("agent_socket") or "")
        key = (host, str(dest))
        with self.lock:
            link = self.links.get(key)
            if link is None:
                if header.get("warm_only"):
                    raise Cold()
                link = self.links[key] = KeptLink(key, dest)
            link.sessions += 1  # held: not closed as idle meanwhile
        try:
            with link.lock:
                if header.get("warm_only") and not link.alive():
                    raise Cold()
                spare = link.started(dest, header, python)
        except BaseException:
            with self.lock:
                link.sessions -= 1
                if link.transport is None and self.links.get(key) is link:
                    del self.links[key]  # never connected: nothing to keep
            raise
        threading.Thread(target=self.replace_spares, args=(link, python, done), name="keeper-spare", daemon=True).start()
        return link, spare

    def replace_spares(self, link, python, done):
        done.wait(REPLACE_AFTER_S)
        link.prepare_spares(python, self.ending)

    def follow_sources(self):
        """A keeper lives for minutes: when this laptop's agent sources changed meanwhile (an
        upgrade in place, a developer's edit), the agent is built again and the spares of the
        old build are dropped, so a command (from CHECK_S after the change) runs the agent a
        fresh process would ship."""
        stamp = sources_stamp()
        if stamp == self.sources:
            return
        from remote.core import buildinfo

        from . import bootstrap

        self.sources = stamp
        bootstrap._built.clear()
        buildinfo._cached.clear()
        with self.lock:
            links = list(self.links.values())
        for link in links:
            with link.lock:
                spares, link.spares = [spare for kept in link.spares.values() for spare in kept], {}
            for spare in spares:
                spare.close()

    # -- ending links

    def disconnect(self, host):
        from .openssh import resolve

        if host:
            try:
                resolved = str(resolve(host))
            except ConnectError as exc:
                return {"ok": False, "error": error_fields(exc)}
            with self.lock:
                keys = [k for k in self.links if k[0] == host or k[1] == resolved]
                links = [self.links.pop(k) for k in keys]
        else:
            with self.lock:
                links, self.links = list(self.links.values()), {}
            self.ending.set()  # the loop stops once this answer is out (handle calls stop)
        for link in links:
            link.close()
        return {"ok": True, "closed": [{"host": l.key[0], "dest": l.key[1]} for l in links], "keeper_ended": not host,
                "pid": os.getpid()}

    def status(self):
        now = time.monotonic()
        with self.lock:
            links = [{"host": l.key[0], "dest": l.key[1], "alive": l.alive(), "sessions": l.sessions,
                      "idle_s": round(now - l.last_used, 1), "spares": {p: len(kept) for p, kept in l.spares.items() if kept},
                       "preparing": {p: n for p, n in l.preparing.items() if n}} for l in self.links.values()]
        return {"ok": True, "pid": os.getpid(), "links": links}


def sources_stamp():
    """A stamp of the agent's sources here: their names, sizes and mtimes (a stat each: ~1 ms)."""
    import remote

    from .agent_cache import stamp

    return stamp([os.path.dirname(os.path.abspath(remote.__file__))])


def error_fields(exc):
    """A ConnectError as the keeper's reply carries it (tui/transport/links.py error_from makes it again)."""
    fields = {"type": type(exc).__name__, "message": str(exc), "permanent": bool(exc.permanent)}
    host_key = getattr(exc, "host_key", None)
    if host_key is not None:
        fields["host_key"] = {"name": host_key.name, "key_type": host_key.key_type, "fingerprint": host_key.fingerprint}
        fields["notice"] = getattr(exc, "notice", "")
    return fields


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
