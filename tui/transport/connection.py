"""Links to a host's agent: over SSH (tui/transport/ssh_transport.py), through the link keeper that holds
SSH links warm between commands (tui/transport/links.py, tui/transport/keeper.py), or, for `local`, a subprocess on
this machine.

A dead link is noticed by the client's heartbeat and by TCP_USER_TIMEOUT on our socket
(paramiko's keepalive alone never notices).
"""

import os
import re
import socket
import sys

from remote.core.paths import package_argv

from .client import AgentClient, ConnectError

# While reconnecting, a TCP connect that hangs (packets dropped, not refused) is given up
# quickly and tried again, so that a SYN goes out at least every second: the link is used
# within a second of its return instead of after the kernel's next SYN retransmission.
RECONNECT_TCP_TIMEOUT_S = 1.0


def _last_line(lines):
    """The agent's last stderr line, a traceback's `remote.core.paths.UnsafeDirectory: ...` shown
    as `UnsafeDirectory: ...`: the module path says nothing to the user."""
    return re.sub(r"^(?:[A-Za-z_]\w*\.)+([A-Za-z_]\w*: )", r"\1", lines[-1])


class SSHLink:
    """The agent's stdin/stdout as an exec channel of an SSH transport.

    The channel runs the boot (tui/transport/bootstrap.py): until the first line that is not the boot's
    own, reading also answers the boot's request for the agent with its bytes, so the client
    above reads the hello as from any link. `owns_transport=False` (the keeper's links, which
    share one transport): closing closes the channel only.
    """

    def __init__(self, transport, python, agent_args=("relay",), owns_transport=True):
        from . import ssh_transport
        from .bootstrap import UPLOAD, boot_command

        command, self._agent = boot_command(python, agent_args)
        self._upload_line = UPLOAD
        self._preamble = b""
        self._booting = True
        self.transport = transport
        self.owns_transport = owns_transport
        self.channel = transport.open_session(timeout=ssh_transport.CONNECT_TIMEOUT_S)
        self.channel.exec_command(command)

    def settimeout(self, seconds):
        self.channel.settimeout(seconds)

    def read(self, n):
        if self._booting:
            return self._read_boot(n)
        return self.channel.recv(n)

    def _read_boot(self, n):
        while True:
            out = b""
            while self._booting and b"\n" in self._preamble:
                line, _, self._preamble = self._preamble.partition(b"\n")
                if line + b"\n" == self._upload_line:
                    self.channel.sendall(self._agent)
                    continue
                out += line + b"\n"  # a login banner's line, or the agent's first frame
                self._booting = not line.lstrip().startswith(b"{")
            if not self._booting:
                out, self._preamble = out + self._preamble, b""
            if out:
                return out
            chunk = self.channel.recv(n)
            if not chunk:
                out, self._preamble = self._preamble, b""
                return out
            self._preamble += chunk

    def write(self, data):
        self.channel.sendall(data)

    def close(self):
        try:
            self.channel.close()
        finally:
            if self.owns_transport:
                from .ssh_transport import close_transport

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
        # Here, not at the top: a command over SSH (most of them) never needs them.
        import selectors
        import subprocess

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
        import subprocess

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


def accept_all(host_key):
    """--accept-new: an unknown host key is accepted and remembered."""
    return True


def link_factory(host, python="python3", accept_new=refuse_unknown, keeper=None):
    """A function that makes a new link to `host` each time it is called (for reconnects).
    `accept_new(host_key)`: whether an unknown HostKey is accepted (no `typing` for the
    annotation: a warm command's start would import it for this line alone).

    `keeper`: None connects here, as always; "always" (headless commands) takes the link from
    the link keeper, starting one when none answers; "warm" (the console) takes the keeper's
    link only when it already holds a live link to `host`, else connects here (where the
    console's host-key dialog can ask). A keeper that cannot be started or reached is never an
    error: the link is then made here.
    """
    if host in (None, "", "local"):
        local_python = None if python in (None, "python3") else python
        return lambda reconnecting=False: LocalLink(local_python)
    if keeper not in (None, "warm", "always"):
        raise ValueError("keeper is None, 'warm' or 'always', not %r" % (keeper,))
    resolved = []

    def connect(reconnecting=False):
        if keeper:
            from . import links

            link = links.keeper_link(host, python, accept_new, warm_only=keeper == "warm", accept_any=accept_new is accept_all)
            if link is not None:
                return link
        if not resolved:
            from .openssh import resolve

            resolved.append(resolve(host))
        return connect_here(resolved[0], python, accept_new, reconnecting)

    return connect


def open_link_transport(dest, accept_new, reconnecting=False):
    """An authenticated transport to `dest`; whatever goes wrong is a ConnectError of one line."""
    from .ssh_transport import open_transport

    try:
        return open_transport(dest, accept_new, tcp_timeout=RECONNECT_TCP_TIMEOUT_S if reconnecting else None)
    except ConnectError:
        raise
    except Exception as exc:  # whatever paramiko raises beyond what we know: still one line
        raise ConnectError("could not connect to %s: %s" % (dest, exc or type(exc).__name__))


def start_agent(transport, dest, python, agent_args=("relay",), owns_transport=True):
    """An SSHLink running the agent on `transport`; a failure is a ConnectError of one line."""
    try:
        return SSHLink(transport, python, agent_args, owns_transport=owns_transport)
    except ConnectError:
        raise
    except Exception as exc:
        raise ConnectError("could not start the agent on %s: %s" % (dest, exc or type(exc).__name__))


def connect_here(dest, python, accept_new, reconnecting=False):
    """A link made by this process: an SSH transport of its own and the agent's boot on it."""
    from .ssh_transport import close_transport

    transport = open_link_transport(dest, accept_new, reconnecting)
    try:
        return start_agent(transport, dest, python)
    except BaseException:
        close_transport(transport)
        raise


def open_client(host, python="python3", accept_new=refuse_unknown, reconnect=False, on_state=None, keeper=None):
    """Connect to `host` (or `local`) and return a started AgentClient (`keeper`: see link_factory)."""
    return AgentClient(link_factory(host, python, accept_new, keeper=keeper), reconnect=reconnect, on_state=on_state).start()
