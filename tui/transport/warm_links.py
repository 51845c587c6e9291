"""One host's warm link in the link keeper (tui/transport/keeper.py): its paramiko transport and,
beside it, spares (SPARES of them per interpreter): exec channels already running the agent's
relay with its hello read. A command is handed a spare at once; the keeper writes the hello it
read and from then on copies bytes both ways between the command's Unix socket and that channel
(`splice`), and opens the next spare in the background. Each command has its own relay (its own
streams, cancelled when it leaves), so nothing of the wire is rewritten here. A spare runs
`relay --if-running`: it never starts or replaces the host's daemon (a spare opened just after
`specdeck daemon stop` must not bring the daemon back); when none runs, the next command gets a
plain relay, which starts one. A spare or a transport found dead is replaced before the command
sees it.
"""

import logging
import socket
import threading
import time

from .client import HELLO_TIMEOUT_S, ConnectError

log = logging.getLogger("tui.keeper")

CHUNK_BYTES = 65536
# Relays kept started per host and interpreter, each an idle process on the host: two let two
# commands back to back each find one ready (a script's `run` then `logs`).
SPARES = 2


class Spare:
    """An exec channel running the relay, its hello read: what a command is handed."""

    def __init__(self, link, head):
        self.link = link  # tui.transport.connection.SSHLink
        self.head = head

    def usable(self):
        channel = self.link.channel
        return self.link.transport.is_active() and not (channel.closed or channel.eof_received or channel.exit_status_ready())

    def close(self):
        try:
            self.link.close()
        except Exception:
            pass


class KeptLink:
    """One host's transport, its spares (up to SPARES per interpreter) and who is using it."""

    def __init__(self, key, dest):
        self.key = key
        self.dest = dest
        self.transport = None
        self.spares = {}  # interpreter -> [Spare]
        self.preparing = {}  # interpreter -> how many spares are on their way
        self.sessions = 0
        self.last_used = time.monotonic()
        self.lock = threading.Lock()
        self.spare_ready = threading.Condition(self.lock)  # a spare's preparation ended

    def alive(self):
        return self.transport is not None and self.transport.is_active()

    def close(self):
        from .ssh_transport import close_transport

        for spares in self.spares.values():
            for spare in spares:
                spare.close()
        self.spares.clear()
        if self.transport is not None:
            close_transport(self.transport)

    def started(self, dest, header, python):
        """The spare if it is alive, else a relay started now; a dead transport is replaced once."""
        from .connection import open_link_transport

        accept_new = bool(header.get("accept_new"))
        fingerprint = header.get("accept_fingerprint")
        for attempt in (1, 2):
            if not self.alive():
                if self.transport is not None:
                    self.close()
                    log.info("link keeper: the link to %s was dead; connecting again", self.key[1])
                self.transport = None
                self.dest = dest
                self.transport = open_link_transport(dest, lambda host_key: accept_new or host_key.fingerprint == fingerprint)
            # A spare on its way is nearer than a new channel: back-to-back commands wait for it.
            self.spare_ready.wait_for(lambda: self.spares.get(python) or not self.preparing.get(python), HELLO_TIMEOUT_S)
            spares = self.spares.get(python) or []
            while spares:
                spare = spares.pop(0)
                if spare.usable():
                    return spare
                spare.close()
            try:
                return start_relay(self, python, ("relay",))
            except ConnectError:
                if attempt == 2 or self.alive():
                    raise  # the agent failed to start (no such interpreter, ...): the command's error
        raise AssertionError("unreachable")

    def prepare_spares(self, python, ending):
        """Start relays until SPARES of them wait for the next commands (two commands back to
        back each find one ready; a third waits for the one on its way)."""
        while True:
            with self.lock:
                on_hand = len(self.spares.get(python) or ()) + self.preparing.get(python, 0)
                if on_hand >= SPARES or not self.alive() or ending.is_set():
                    return
                self.preparing[python] = self.preparing.get(python, 0) + 1
            if not self._prepare_one(python, ending):
                return

    def _prepare_one(self, python, ending):
        spare = None
        try:
            spare = start_relay(self, python, ("relay", "--if-running"))
        except ConnectError as exc:
            log.info("link keeper: no spare relay on %s: %s", self.key[1], exc)
        except Exception as exc:
            log.info("link keeper: no spare relay on %s: %s: %s", self.key[1], type(exc).__name__, exc)
        with self.lock:
            self.preparing[python] -= 1
            kept = self.spares.setdefault(python, [])
            if spare is not None:
                if len(kept) >= SPARES or not self.alive() or ending.is_set():
                    spare.close()
                    spare = None
                else:
                    kept.append(spare)
            self.spare_ready.notify_all()
        return spare is not None


class Cold(Exception):
    """A warm-only request for a host the keeper holds no live link to."""


def start_relay(link, python, agent_args):
    """A Spare: the agent's relay started on the link's transport, its hello read."""
    from remote.core.protocol import decode

    from .connection import start_agent

    agent = start_agent(link.transport, link.dest, python, agent_args, owns_transport=False)
    try:
        agent.settimeout(HELLO_TIMEOUT_S)
        buffer = b""
        while True:
            while b"\n" in buffer:
                line, _, rest = buffer.partition(b"\n")
                try:
                    frame = decode(line)
                except ValueError:
                    frame = None
                if isinstance(frame, dict) and frame.get("type") == "hello":
                    agent.settimeout(None)
                    return Spare(agent, line + b"\n" + rest)
                log.info("link keeper: skipped a line before the agent's hello on %s (a login banner?)", link.key[1])
                buffer = rest
            chunk = agent.read(CHUNK_BYTES)
            if not chunk:
                raise ConnectError(agent.failure() or "the agent exited before its handshake")
            buffer += chunk
    except ConnectError:
        agent.close()
        raise
    except (OSError, EOFError) as exc:
        reason = agent.failure() or "the agent did not answer: %s" % (exc or type(exc).__name__)
        agent.close()
        raise ConnectError(reason)
    except BaseException:
        agent.close()
        raise


def splice(conn, agent):
    """Copy both ways between the command's socket and the agent's channel until either ends;
    then end both (the relay on the host sees its channel close, as when a command exits)."""
    channel = agent.channel
    conn.settimeout(None)
    channel.settimeout(None)

    def up():
        try:
            while True:
                data = conn.recv(CHUNK_BYTES)
                if not data:
                    break
                channel.sendall(data)
        except Exception:
            pass
        try:
            agent.close()
        except Exception:
            pass

    sender = threading.Thread(target=up, name="keeper-up", daemon=True)
    sender.start()
    try:
        while True:
            data = channel.recv(CHUNK_BYTES)
            if not data:
                break
            conn.sendall(data)
    except Exception:
        pass
    try:
        conn.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass
    sender.join()
