"""The link keepers tests start (tui/transport/keeper.py): found by the runtime directory their socket is
in, and ended. Every test has a runtime directory of its own (tests/conftest.py), so its keepers
are its own and never outlive it."""

import os
import signal
import tempfile
import time
from pathlib import Path


def short_runtime_dir():
    """A new XDG_RUNTIME_DIR short enough for a socket path (a path of one holds ~107 bytes)."""
    return Path(tempfile.mkdtemp(prefix="sd-rt-"))


def keeper_pids(runtime_dir):
    """Live keeper processes serving sockets under `runtime_dir`."""
    pids = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            cmdline = Path("/proc", entry, "cmdline").read_bytes().split(b"\0")
            state = Path("/proc", entry, "stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if state != "Z" and any(b"tui.transport.keeper" in part for part in cmdline) and any(
                part.startswith(str(runtime_dir).encode()) for part in cmdline):
            pids.append(int(entry))
    return pids


def end_keepers(runtime_dir, timeout_s=10.0):
    """TERM every keeper of `runtime_dir` and wait until they are gone (KILL after `timeout_s`)."""
    for pid in keeper_pids(runtime_dir):
        try:
            os.kill(pid, signal.SIGTERM)
        except ProcessLookupError:
            pass
    deadline = time.monotonic() + timeout_s
    while keeper_pids(runtime_dir):
        if time.monotonic() > deadline:
            for pid in keeper_pids(runtime_dir):
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            break
        time.sleep(0.02)
