"""How the console feels from a terminal: time to first paint, and time to answer a key, idle
and while a job's log streams at thousands of lines a second (the local agent).

  python benchmarks/bench_console.py

The console runs in a pseudo-terminal (110x32) driven by this script, as a terminal emulator
would drive it. A key's time runs from writing the key until the terminal receives the text
that answers it (the help screen's first section; the Downloads pane's status line; the log
title's follow marker). The baseline beside each figure is the same key with nothing
streaming: the ratio is what streaming costs. Targets: paint within 1 s, a key within 50 ms.
"""

import fcntl
import json
import os
import pty
import select
import shutil
import signal
import statistics
import struct
import subprocess
import sys
import tempfile
import termios
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from tests.helpers.cli import daemon_pid  # noqa: E402 (after the path that finds it)
STREAM = "import time\nfor i in range(10**7):\n    print('step %d loss 1.23 acc 0.71' % i, flush=True)\n    time.sleep(0.0003)\n"
# key, the bytes that show it was answered, the key that undoes it and what shows that
KEYS = [
    ("f", b"paused", "f", b"following"),
    ("3", b"no downloads on this host yet", "2", b"log j"),
    ("?", b"Anywhere", "?", b"log j"),
]


class Terminal:
    def __init__(self, argv, env):
        self.pid, self.fd = pty.fork()
        if self.pid == 0:
            os.chdir(ROOT)
            os.execvpe(argv[0], argv, env)
        fcntl.ioctl(self.fd, termios.TIOCSWINSZ, struct.pack("HHHH", 32, 110, 0, 0))

    def read_until(self, needle, timeout_s=30.0):
        """Seconds until `needle` arrives (reading everything the app writes meanwhile)."""
        t0 = time.perf_counter()
        seen = b""
        while time.perf_counter() - t0 < timeout_s:
            ready, _, _ = select.select([self.fd], [], [], 0.5)
            if ready:
                seen = (seen + os.read(self.fd, 1 << 16))[-(1 << 16):]
                if needle in seen:
                    return time.perf_counter() - t0
        raise SystemExit("timed out waiting for %r" % needle)

    def drain(self, quiet_s=0.05):
        while select.select([self.fd], [], [], quiet_s)[0]:
            os.read(self.fd, 1 << 16)

    def close(self):
        """Quit the console (q), and make sure its process is gone."""
        try:
            os.write(self.fd, b"q")
        except OSError:
            pass
        deadline = time.monotonic() + 5
        while not os.waitpid(self.pid, os.WNOHANG)[0]:
            if time.monotonic() > deadline:
                os.kill(self.pid, signal.SIGKILL)
                os.waitpid(self.pid, 0)
                break
            try:
                self.drain()  # a console blocked writing to a full terminal would never get to exit
            except OSError:  # the terminal's other end is closed: it is exiting
                time.sleep(0.05)
        os.close(self.fd)

    def key(self, key, answer):
        self.drain()
        t0 = time.perf_counter()
        os.write(self.fd, key.encode())
        self.read_until(answer)
        return time.perf_counter() - t0


def measure(terminal, rounds):
    times = {key: [] for key, _, _, _ in KEYS}
    for _ in range(rounds):
        for key, answer, undo, undone in KEYS:
            times[key].append(terminal.key(key, answer))
            terminal.key(undo, undone)
            time.sleep(0.02)
    return times


def stop_everything(cli, env, home, terminal):
    """Quit the console, stop every job still running and the daemon, wait for it, remove its home:
    nothing of the run is left behind, whether it finished or failed half-way."""
    if terminal is not None:
        terminal.close()
    listed = subprocess.run(cli + ["jobs", "local", "--json"], env=env, capture_output=True, text=True, timeout=60)
    running = [j["id"] for j in json.loads(listed.stdout or "[]") if j.get("process_state") in ("running", "starting")]
    for job_id in running:
        subprocess.run(cli + ["stop", "local", job_id, "--grace", "1", "--wait"], env=env, capture_output=True, timeout=60)
    pid = daemon_pid(home)
    if pid:
        os.kill(pid, signal.SIGTERM)
        deadline = time.monotonic() + 30
        while os.path.exists("/proc/%d" % pid) and time.monotonic() < deadline:
            time.sleep(0.1)
        if os.path.exists("/proc/%d" % pid):
            os.kill(pid, signal.SIGKILL)
    shutil.rmtree(home, ignore_errors=True)


def main():
    home = tempfile.mkdtemp()
    env = dict(os.environ, SPECDECK_HOME=home, PYTHONPATH=ROOT, TERM="xterm-256color")
    cli = [sys.executable, "-m", "tui.cli"]
    terminal = None
    try:
        # A quiet running job whose log is open gives the idle case; the streaming job replaces it.
        subprocess.run(cli + ["run", "local", "--", "bash", "-c", "echo idle; sleep 600"], env=env, check=True, capture_output=True)
        t0 = time.perf_counter()
        terminal = Terminal(cli + ["local"], env)
        paint_s = terminal.read_until(b"Jobs")
        terminal.read_until(b"connected")
        connected_s = time.perf_counter() - t0
        os.write(terminal.fd, b"2")  # the console opens on the GPUs pane; 2 is Jobs
        terminal.read_until(b"j1")
        time.sleep(1.5)
        terminal.key("\r", b"log j1")
        idle = measure(terminal, 10)
        subprocess.run(cli + ["run", "local", "--name", "stream", "--", sys.executable, "-c", STREAM], env=env, check=True, capture_output=True)
        terminal.read_until(b"stream")
        time.sleep(1.2)
        os.write(terminal.fd, b"\x1b[B")  # down to the streaming job
        time.sleep(0.3)
        terminal.key("\r", b"step ")
        time.sleep(1.0)
        streaming = measure(terminal, 10)
        jobs = subprocess.run(cli + ["jobs", "local", "--json"], env=env, capture_output=True, text=True).stdout
        stream_job = next(j for j in json.loads(jobs) if j["name"] == "stream")
        lines_per_s = stream_job["log_bytes"] / 28.0 / max(1.0, time.time() - stream_job["started_at"])
    finally:
        stop_everything(cli, env, home, terminal)

    print("console in a 110x32 pseudo-terminal, local agent:")
    print("  first paint      %6.0f ms   (target < 1000 ms; Python start-up and imports included)" % (paint_s * 1e3))
    print("  connected        %6.0f ms" % (connected_s * 1e3))
    print("  key answered (median / max over 10), while ~%d log lines/s stream; target < 50 ms:" % lines_per_s)
    names = {"f": "f   follow on/off", "3": "3   switch pane", "?": "?   help screen"}
    for key, _, _, _ in KEYS:
        quiet, busy = idle[key], streaming[key]
        print("    %-18s streaming %5.1f / %5.1f ms   idle %5.1f / %5.1f ms   %.2fx"
              % (names[key], statistics.median(busy) * 1e3, max(busy) * 1e3,
                 statistics.median(quiet) * 1e3, max(quiet) * 1e3, statistics.median(busy) / statistics.median(quiet)))


if __name__ == "__main__":
    main()
