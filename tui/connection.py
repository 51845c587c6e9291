"""Links to a host's agent: over SSH (tui/ssh_transport.py) or, for `local`, a subprocess on
this machine.

A dead link is noticed by the client's heartbeat and by TCP_USER_TIMEOUT on our socket
(paramiko's keepalive alone never notices).
"""

import os
import re
import selectors
import shlex
import socket
import subprocess
import sys
from typing import Callable

from remote.core.paths import package_argv

from .client import AgentClient, ConnectError
from .ssh_transport import (  # noqa: F401 (the errors and HostKey are part of this module's face)
    CONNECT_TIMEOUT_S,
    AuthenticationRefused,
    HostKey,
    HostKeyChanged,
    HostKeyRevoked,
    HostKeyUnknown,
    close_transport,
    open_transport,
    parse_destination,
)

# While reconnecting, a TCP connect that hangs (packets dropped, not refused) is given up
# quickly and tried again, so that a SYN goes out at least every second: the link is used
# within a second of its return instead of after the kernel's next SYN retransmission.
RECONNECT_TCP_TIMEOUT_S = 1.0


def _last_line(lines):
    """The agent's last stderr line, a traceback's `remote.core.paths.UnsafeDirectory: ...` shown
    as `UnsafeDirectory: ...`: the module path says nothing to the user."""
    return re.sub(r"^(?:[A-Za-z_]\w*\.)+([A-Za-z_]\w*: )", r"\1", lines[-1])


class SSHLink:
    """The agent's stdin/stdout as an exec channel of an SSH transport."""

    def __init__(self, transport, command):
        self.transport = transport
        self.channel = transport.open_session(timeout=CONNECT_TIMEOUT_S)
        self.channel.exec_command(command)

    def settimeout(self, seconds):
        self.channel.settimeout(seconds)

    def read(self, n):
        return self.channel.recv(n)

    def write(self, data):
        self.channel.sendall(data)

    def close(self):
        try:
            self.channel.close()
        finally:
            close_transport(self.transport)

    def failure(self):
        """Why the agent did not start, from its stderr and exit status."""
        # stdout's end can come before the exit status: wait for the status (bounded).
        self.channel.status_event.wait(5)
        err = b""
        try:
            self.channel.settimeout(2)
            while True:
                chunk = self.channel.recv_stderr(65536)
                if not chunk:
                    break
                err += chunk
        except Exception:
            pass  # what came is enough
        status = self.channel.exit_status if self.channel.exit_status_ready() else None
        lines = [l for l in err.decode("utf-8", "replace").splitlines() if l.strip()]
        if status == 127:
            return "the interpreter was not found on the host (%s)" % (lines[-1] if lines else "exit 127")
        if lines:
            return "the agent failed to start on the host: %s" % _last_line(lines)
        return "the agent exited with status %s before its handshake" % status if status is not None else ""


class LocalLink:
    """The agent as a subprocess of this machine: the embedded default, no SSH."""

    def __init__(self, python=None, env=None):
        """`env`: the agent's environment (default: this process's); benchmarks and tests run
        several local agents, each with its own SPECDECK_HOME, as hosts of one console."""
        try:
            # Isolated, the package found where it is: never a remote/ of the current directory.
            self.process = subprocess.Popen(
                package_argv(python or sys.executable) + ["relay"],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                env=env,
            )
        except OSError as exc:
            raise ConnectError("cannot start the local agent with %s: %s" % (python or sys.executable, exc.strerror or exc))
        self._timeout = None
        self._selector = selectors.DefaultSelector()
        self._selector.register(self.process.stdout, selectors.EVENT_READ)

    def settimeout(self, seconds):
        self._timeout = seconds

    def read(self, n):
        if self._timeout is not None and not self._selector.select(self._timeout):
            raise socket.timeout("timed out")
        return os.read(self.process.stdout.fileno(), n)

    def write(self, data):
        self.process.stdin.write(data)
        self.process.stdin.flush()

    def close(self):
        try:
            self.process.stdin.close()
        except OSError:
            pass
        try:
            self.process.wait(timeout=2)
        except subprocess.TimeoutExpired:
            self.process.kill()

    def failure(self):
        try:
            err = self.process.stderr.read().decode("utf-8", "replace").strip().splitlines()
        except OSError:
            err = []
        return "the local agent failed: %s" % _last_line(err) if err else ""


def refuse_unknown(host_key):
    return False


def link_factory(host, python="python3", accept_new: Callable[[HostKey], bool] = refuse_unknown):
    """A function that makes a new link to `host` each time it is called (for reconnects)."""
    if host in (None, "", "local"):
        local_python = None if python in (None, "python3") else python
        return lambda reconnecting=False: LocalLink(local_python)
    dest = parse_destination(host)

    def connect(reconnecting=False):
        from . import bootstrap

        try:
            transport = open_transport(dest, accept_new, tcp_timeout=RECONNECT_TCP_TIMEOUT_S if reconnecting else None)
        except ConnectError:
            raise
        except Exception as exc:  # whatever paramiko raises beyond what we know: still one line
            raise ConnectError("could not connect to %s: %s" % (dest, exc or type(exc).__name__))
        try:
            remote_path = bootstrap.ensure_agent(transport)
            return SSHLink(transport, shlex.join([python, remote_path, "relay"]))
        except Exception as exc:
            close_transport(transport)
            if isinstance(exc, ConnectError):
                raise
            raise ConnectError("could not start the agent on %s: %s" % (dest, exc or type(exc).__name__))

    return connect


def open_client(host, python="python3", accept_new=refuse_unknown, reconnect=False, on_state=None):
    """Connect to `host` (or `local`) and return a started AgentClient."""
    return AgentClient(link_factory(host, python, accept_new), reconnect=reconnect, on_state=on_state).start()
