"""SSH and the console, hardened: ports that never speak SSH, known_hosts read as OpenSSH reads
it, a host key that changes mid-session, reconnect backoff, private state directories, a
following command that says when it reconnects, and the CLI's errors, version and help.

Real parts: the loopback sshd (tests/sshd_fixtures.py) and a second one with another host
key, a TCP gate on loopback whose behaviour a test switches (silent, hang up, forward), a real
HTTP server, OpenSSH's own ssh-keygen as the reference for known_hosts matching, the agent as
a real subprocess. Waits are bounds on a hang, not speed assertions.
"""

import glob
import hashlib
import json
import os
import re
import shutil
import socket
import stat
import subprocess
import sys
import tempfile
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from remote import AGENT_VERSION
from remote.core.protocol import encode
from tests.helpers.cli import REPO_ROOT, run_cli, stop_daemon, use_home, ssh_config_env
from tests.helpers.waits import wait_for, wait_until
from tests.sshd_fixtures import _free_port, _start_sshd
from tui.app import SpecdeckApp
from tui.transport.client import AgentClient
from tui.transport.connection import link_factory, open_client
from tui.widgets.header import ConnectionHeader, describe_state

WAIT_S = 60


class Gate:
    """A loopback TCP port whose behaviour the test switches: `silent` (accepts, never speaks),
    `hangup` (accepts and closes at once) or `forward` (to the local port `target`)."""

    def __init__(self, mode="silent", target=None):
        self.mode, self.target = mode, target
        self.accepted = 0
        self._open = []
        self._lock = threading.Lock()
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        threading.Thread(target=self._accept_loop, daemon=True).start()

    def _accept_loop(self):
        while True:
            try:
                conn, _ = self.listener.accept()
            except OSError:
                return
            with self._lock:
                self.accepted += 1
                mode, target = self.mode, self.target
                if mode != "hangup":
                    self._open.append(conn)
            if mode == "hangup":
                conn.close()
            elif mode == "forward":
                try:
                    upstream = socket.create_connection(("127.0.0.1", target), timeout=5)
                except OSError:
                    conn.close()
                    continue
                upstream.settimeout(None)
                with self._lock:
                    self._open.append(upstream)
                for source, sink in ((conn, upstream), (upstream, conn)):
                    threading.Thread(target=self._pump, args=(source, sink), daemon=True).start()

    @staticmethod
    def _pump(source, sink):
        try:
            while True:
                data = source.recv(65536)
                if not data:
                    break
                sink.sendall(data)
        except OSError:
            pass
        for end in (source, sink):
            try:
                end.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def drop(self):
        """Cut every connection through the gate: the client sees its link close."""
        with self._lock:
            connections, self._open = self._open, []
        for conn in connections:
            try:
                conn.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            conn.close()

    def close(self):
        self.listener.close()
        self.drop()


@pytest.fixture
def gate():
    g = Gate()
    yield g
    g.close()


@pytest.fixture
def other_sshd(host_user, ssh_keys):
    """A second real sshd for the same user, with a host key of its own."""
    confdir = tempfile.mkdtemp(prefix="specdeck-sshd-other-")
    os.chmod(confdir, 0o755)
    server, log = _start_sshd(keys=ssh_keys, user=host_user, confdir=confdir, listen="127.0.0.1", port=_free_port())
    assert server is not None, log
    yield server
    server._stop()
    shutil.rmtree(confdir, ignore_errors=True)


def gated_home(tmp_path, sshd, port, extra=""):
    """A laptop HOME that reaches `sshd`'s user as `gated` at 127.0.0.1:port, sshd's key known there."""
    home = tmp_path / ("home-gated-%d" % port)
    ssh = home / ".ssh"
    ssh.mkdir(parents=True, mode=0o700)
    (ssh / "known_hosts").write_text("[127.0.0.1]:%d %s\n" % (port, sshd.host_key_pub))
    (ssh / "config").write_text(
        "Host gated\n    HostName 127.0.0.1\n    Port %d\n    User %s\n    IdentityFile %s\n    IdentitiesOnly yes\n"
        "    ConnectTimeout 2\n    UserKnownHostsFile %s\n%s" % (port, sshd.user, sshd.client_key, ssh / "known_hosts", extra)
    )
    return home


def one_line(result):
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("specdeck: ") and "Traceback" not in result.stderr, result.stderr
    return lines[0]


# ------------------------------------------------------------------ 1. a port that is not SSH


@pytest.mark.parametrize("service", ["silent", "http"])
def test_a_port_that_does_not_speak_ssh_is_one_line_and_exit_2(service, sshd, gate, tmp_path, host_python):
    server = None
    if service == "http":
        server = ThreadingHTTPServer(("127.0.0.1", 0), BaseHTTPRequestHandler)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        port = server.server_address[1]
    else:
        port = gate.port  # accepts, never says a word: a stuck sshd, a bastion
    try:
        result = run_cli("jobs", "gated", "--python", host_python, home=gated_home(tmp_path, sshd, port))
    finally:
        if server is not None:
            server.shutdown()
    assert result.returncode == 2, result.stderr
    line = one_line(result)
    assert "127.0.0.1 port %d" % port in line and "SSH greeting" in line, line
    if service == "silent":
        assert "within 2 s" in line, line  # ConnectTimeout from ~/.ssh/config bounds the wait


async def test_console_says_why_a_silent_port_failed_and_r_tries_again(sshd, gate, tmp_path, monkeypatch, host_python):
    use_home(monkeypatch, gated_home(tmp_path, sshd, gate.port))
    monkeypatch.delenv("SSH_AUTH_SOCK", raising=False)
    app = SpecdeckApp(host="gated", python=host_python)
    async with app.run_test(size=(110, 32)) as pilot:
        await wait_until(pilot, lambda: app.connection_state == "failed", timeout_s=30, message="the failure shown")
        text = app.query_one(ConnectionHeader).state_text
        assert text.startswith("✕ failed: no SSH greeting from 127.0.0.1 port %d" % gate.port), text
        gate.mode, gate.target = "forward", sshd.port  # the host is back
        await pilot.press("r")
        await wait_until(pilot, lambda: app.connection_state == "connected", message="connected after r")
        assert app.client.hello["user"] == sshd.user


# ------------------------------------------------------------------ 2. known_hosts as OpenSSH reads it


def _keygen(path):
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "test", "-f", str(path)], check=True, capture_output=True)
    return " ".join(Path(str(path) + ".pub").read_text().split()[:2])


def _openssh_finds(name, path):
    """(line number, marker) of every line `ssh-keygen -F name` reports, in order."""
    out = subprocess.run(["ssh-keygen", "-F", name, "-f", str(path)], capture_output=True, text=True).stdout
    markers = {"": None, "REVOKED": "@revoked", "CA": "@cert-authority"}
    found = []
    for line in out.splitlines():
        if line.startswith("# Host ") and " found: line " in line:
            rest = line.split(" found: line ", 1)[1].split()
            found.append((int(rest[0]), markers[rest[1] if len(rest) > 1 else ""]))
    return found


def test_known_hosts_lines_select_hosts_as_openssh_does(tmp_path):
    from tui.transport import known_hosts

    key = _keygen(tmp_path / "k")
    to_hash = tmp_path / "to_hash"
    to_hash.write_text("hashed-host %s\n[hashed-host]:2200 %s\n" % (key, key))
    subprocess.run(["ssh-keygen", "-H", "-f", str(to_hash)], check=True, capture_output=True)
    hashed = [l for l in to_hash.read_text().splitlines() if l.startswith("|1|")]
    assert len(hashed) == 2
    path = tmp_path / "known_hosts"
    path.write_text("\n".join([
        "# a comment",
        "[127.0.0.?]:2222,![127.0.0.9]:2222 " + key,
        "@revoked *.revoked.example " + key,
        "@cert-authority *.example.com,!bad.example.com " + key,
        "",
        "GpuHost " + key,
        "gpu0?,gpu1* " + key,
        "*.corp,!*.dmz.corp " + key,
        "@no-such-marker gpu01 " + key,
        "damaged-key ssh-ed25519 not!base64",
        *hashed,
    ]) + "\n")
    names = ["[127.0.0.1]:2222", "[127.0.0.9]:2222", "127.0.0.1", "[127.0.0.10]:2222", "gpuhost", "GPUHOST", "x.revoked.example",
             "a.example.com", "bad.example.com", "gpu01", "gpu012", "gpu1-b", "GPU1-B", "gpu2", "a.corp", "x.dmz.corp",
             "hashed-host", "[hashed-host]:2200", "hashed-host:2200", "nothing"]
    for name in names:
        ours = [(e.line_number, e.marker) for e in known_hosts.lookup(name, [str(path)])]
        assert ours == _openssh_finds(name, path), name
    # ssh-keygen -F lists a line whose key cannot be read; ssh skips it when checking, as we do.
    assert known_hosts.lookup("damaged-key", [str(path)]) == []


@pytest.mark.parametrize(
    "case", ["cert_authority_elsewhere", "revoked", "alias", "wildcard", "negated", "hashed", "cert_authority_only",
             "type_word", "revoked_file", "strict_yes"]
)
def test_known_hosts_over_ssh(case, sshd, tmp_path, host_python):
    home = sshd.client_home(tmp_path)
    known = home / ".ssh" / "known_hosts"
    other = _keygen(tmp_path / "other")
    good = sshd.known_hosts_line
    spec, port = sshd.host_spec, sshd.port
    expected_code, expected = 0, None
    if case == "cert_authority_elsewhere":  # today a traceback for every host
        known.write_text("@cert-authority *.example.com %s\n%s\n" % (other, good))
    elif case == "revoked":
        known.write_text("%s\n@revoked * %s\n" % (good, sshd.host_key_pub))
        expected_code, expected = 2, "is revoked in %s line 2" % known
    elif case == "alias":
        with open(home / ".ssh" / "config", "a") as config:
            config.write("    HostKeyAlias GPU-Box\n")
        known.write_text("gpu-box %s\n" % sshd.host_key_pub)
    elif case == "wildcard":
        known.write_text("[127.0.0.?]:%d %s\n" % (port, sshd.host_key_pub))
    elif case == "negated":
        known.write_text("[127.0.0.*]:%d,!%s %s\n" % (port, spec, sshd.host_key_pub))
        expected_code, expected = 2, "unknown host key for %s" % spec
    elif case == "hashed":
        known.write_text(good + "\n")
        subprocess.run(["ssh-keygen", "-H", "-f", str(known)], check=True, capture_output=True)
        assert spec not in known.read_text()
    elif case == "type_word":  # the host's ed25519 key under another type's word: OpenSSH skips the line
        known.write_text("%s ssh-rsa %s\n" % (spec, sshd.host_key_pub.split()[1]))
        expected_code, expected = 2, "unknown host key for %s" % spec
    elif case in ("revoked_file", "strict_yes"):
        with open(home / ".ssh" / "config", "a") as config:
            if case == "revoked_file":
                (tmp_path / "revoked.pub").write_text("# revoked keys\n%s\n" % sshd.host_key_pub)
                config.write("    RevokedHostKeys %s\n" % (tmp_path / "revoked.pub"))
                expected_code, expected = 2, "is revoked in %s line 2" % (tmp_path / "revoked.pub")
            else:
                known.write_text("")
                config.write("    StrictHostKeyChecking yes\n")
                expected_code, expected = 2, "StrictHostKeyChecking yes"
    else:
        known.write_text("@cert-authority %s %s\n" % (spec, other))
        expected_code, expected = 2, "line 1 names a certificate authority for this host"
    accept = ["--accept-new"] if case == "strict_yes" else []  # strict: refused all the same
    result = run_cli("jobs", "gpuhost", "--python", host_python, *accept, home=home)
    assert result.returncode == expected_code, result.stderr
    if expected:
        assert expected in one_line(result)


# ------------------------------------------------------------------ 3. a host key that changes, backoff


def test_a_host_key_that_changes_mid_session_fails_once_and_stops(sshd, other_sshd, gate, tmp_path, monkeypatch, host_python):
    home = gated_home(tmp_path, sshd, gate.port)
    use_home(monkeypatch, home)
    monkeypatch.delenv("SSH_AUTH_SOCK", raising=False)
    gate.mode, gate.target = "forward", sshd.port
    states = []
    client = AgentClient(link_factory("gated", python=host_python), reconnect=True, on_state=lambda s, d: states.append((s, dict(d))))
    client.start()
    try:
        assert client.call("ping") is not None
        gate.target = other_sshd.port  # the same address now answers with another host key
        gate.drop()
        wait_for(lambda: client.state == "failed", 30, message="the failure")
        error = client.state_detail["error"]
        assert "HOST KEY CHANGED for [127.0.0.1]:%d" % gate.port in error and other_sshd.host_fingerprint in error
        assert describe_state(client.state, client.state_detail).startswith("✕ failed: HOST KEY CHANGED")
        tries = gate.accepted
        time.sleep(3)  # long enough for several retries, had there been any
        assert gate.accepted == tries
        assert sum(1 for s, _ in states if s == "reconnecting") == 1
        assert other_sshd.host_key_pub.split()[1] not in (home / ".ssh" / "known_hosts").read_text()
    finally:
        client.close()


def test_reconnect_backs_off_and_says_when_it_tries_next(sshd, gate, tmp_path, monkeypatch, host_python):
    use_home(monkeypatch, gated_home(tmp_path, sshd, gate.port))
    monkeypatch.delenv("SSH_AUTH_SOCK", raising=False)
    gate.mode, gate.target = "forward", sshd.port
    waits = []
    client = AgentClient(
        link_factory("gated", python=host_python),
        reconnect=True,
        on_state=lambda s, d: waits.append((d["attempt"], d["next_try_at"] - time.time())) if s == "reconnecting" else None,
    )
    client.start()
    try:
        gate.mode = "hangup"  # the host is away: every try fails at once
        gate.drop()
        wait_for(lambda: waits and waits[-1][0] >= 12, 60, message="twelve tries")
        announced = [round(w, 2) for _, w in waits]
        assert max(announced[:10]) <= 0.5, announced  # the first tries come quickly
        assert all(b >= a - 0.2 for a, b in zip(announced, announced[1:])), announced  # then slower and slower
        assert announced[-1] >= 1.5 and max(announced) <= 15, announced
        header = describe_state(client.state, client.state_detail)
        assert re.match(r"○ reconnecting, next try in [12] s, attempt 12 \(.*SSH greeting", header), header
        gate.mode = "forward"  # back
        wait_for(lambda: client.state == "connected", 30, message="reconnected")
        assert client.call("ping") is not None
    finally:
        client.close()


# ------------------------------------------------------------------ 4. private state directories


@pytest.mark.parametrize("mode", [0o1777, 0o755, 0o700])
def test_an_existing_specdeck_home_keeps_its_mode(mode, tmp_path, monkeypatch):
    home = Path(tempfile.mkdtemp(prefix="sd-chosen-"))  # short: its socket stays inside it, where the test looks
    os.chmod(home, mode)
    monkeypatch.setenv("SPECDECK_HOME", str(home))
    expected = home if mode == 0o700 else home / ("specdeck-%d" % os.getuid())
    client = open_client("local")
    try:
        state = client.call("daemon.info")["state_dir"]
        job = client.call("jobs.submit", {"argv": ["true"]})
    finally:
        client.close()
        stop_daemon(expected)
    assert stat.S_IMODE(home.stat().st_mode) == mode  # never chmodded
    assert state == str(expected)
    assert stat.S_IMODE(expected.stat().st_mode) == 0o700
    assert (expected / "daemon.sock").exists() and (expected / "jobs" / job["id"]).is_dir()
    shutil.rmtree(home, ignore_errors=True)


def test_a_squatted_state_directory_is_one_line(tmp_path, monkeypatch):
    shared = tmp_path / "shared"
    shared.mkdir()
    os.chmod(shared, 0o1777)
    squatted = shared / ("specdeck-%d" % os.getuid())
    squatted.mkdir()
    os.chown(squatted, 65534, 65534)  # someone else got there first
    monkeypatch.setenv("SPECDECK_HOME", str(shared))
    result = run_cli("jobs", "local")
    assert result.returncode == 2
    line = one_line(result)
    assert "%s cannot hold specdeck's state: it belongs to uid 65534" % squatted in line, line
    assert not (squatted / "jobs").exists() and stat.S_IMODE(shared.stat().st_mode) == 0o1777


@pytest.mark.parametrize("squat", ["owned_by_someone_else", "not_private"])
def test_a_squatted_socket_directory_is_one_line_and_avoided(squat, host_user, host_python):
    # The host user's state directory is too deep for a socket path, so the socket goes to
    # /tmp/specdeck-UID.HASH (of that user and that state directory), which someone has taken.
    state_home = host_user.home / ("deep-" + "d" * 100)
    usual = Path("/tmp/specdeck-%d.%s" % (host_user.uid, hashlib.sha256(str(state_home).encode()).hexdigest()[:12]))
    aside = None
    if usual.exists() or usual.is_symlink():
        aside = usual.with_name(usual.name + ".aside-%d" % os.getpid())
        usual.rename(aside)
    before = set(glob.glob("/tmp/specdeck-%d-*" % host_user.uid))
    host_user.run(["mkdir", "-p", "-m", "700", str(state_home)])
    usual.mkdir()
    if squat == "owned_by_someone_else":
        os.chmod(usual, 0o755)  # root's
    else:
        os.chown(usual, host_user.uid, host_user.gid)
        os.chmod(usual, 0o777)
    relay = subprocess.Popen(
        [host_python, "-m", "remote", "relay"], user=host_user.uid, group=host_user.gid, extra_groups=[],
        env=host_user.env(SPECDECK_HOME=str(state_home), PYTHONPATH=str(REPO_ROOT)), cwd=str(host_user.home),
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
    )
    daemon_pid = None
    try:
        hello_line = relay.stdout.readline()
        hello = json.loads(hello_line) if hello_line else {}
        daemon_pid = hello.get("daemon_pid")
        relay.stdin.write(encode({"id": 1, "method": "ping", "params": {}}))
        relay.stdin.flush()
        reply = json.loads(relay.stdout.readline() or b"{}")
        relay.stdin.close()
        stderr = relay.stderr.read().decode()
        relay.wait(timeout=30)
        assert hello.get("type") == "hello" and reply.get("ok"), stderr
        assert "Traceback" not in stderr and len(stderr.strip().splitlines()) == 1, stderr
        assert "not using %s" % usual in stderr
        assert not (usual / "daemon.sock").exists()
        fresh = set(glob.glob("/tmp/specdeck-%d-*" % host_user.uid)) - before
        assert len(fresh) == 1, fresh
        place = Path(fresh.pop())
        assert place.stat().st_uid == host_user.uid and stat.S_IMODE(place.stat().st_mode) == 0o700
        assert (place / "daemon.sock").exists()
    finally:
        if relay.poll() is None:
            relay.kill()
        if daemon_pid:
            os.kill(daemon_pid, 15)
            wait_for(lambda: not os.path.exists("/proc/%d" % daemon_pid) or open("/proc/%d/stat" % daemon_pid).read().split()[2] == "Z", 30)
        shutil.rmtree(usual, ignore_errors=True)
        for made in set(glob.glob("/tmp/specdeck-%d-*" % host_user.uid)) - before:
            shutil.rmtree(made, ignore_errors=True)
        shutil.rmtree(state_home, ignore_errors=True)
        if aside is not None:
            aside.rename(usual)


# ------------------------------------------------------------------ 5. logs -f


def test_logs_follow_says_when_it_reconnects_and_loses_nothing(sshd, gate, tmp_path, monkeypatch, host_python):
    home = gated_home(tmp_path, sshd, gate.port)
    use_home(monkeypatch, home)
    monkeypatch.delenv("SSH_AUTH_SOCK", raising=False)
    gate.mode, gate.target = "forward", sshd.port
    client = AgentClient(link_factory("gated", python=host_python)).start()
    job = client.call("jobs.submit", {"argv": ["bash", "-c", "for i in $(seq 1 40); do echo line $i; sleep 0.1; done"]})
    client.close()
    env = {k: v for k, v in os.environ.items() if k != "SSH_AUTH_SOCK"}
    env.update(ssh_config_env(home))
    env.update(PYTHONPATH=str(REPO_ROOT))
    follow = subprocess.Popen(
        [sys.executable, "-m", "tui.cli", "logs", "gated", job["id"], "-f", "--python", host_python],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, cwd=str(REPO_ROOT),
    )
    lines = []
    reader = threading.Thread(target=lambda: lines.extend(follow.stdout), daemon=True)
    reader.start()
    try:
        wait_for(lambda: len(lines) >= 5, WAIT_S, message="the first lines")
        gate.drop()
        follow.wait(timeout=WAIT_S)
    finally:
        if follow.poll() is None:
            follow.kill()
    reader.join(10)
    stderr = follow.stderr.read()
    assert follow.returncode == 0, stderr
    assert lines == ["line %d\n" % i for i in range(1, 41)]
    notices = stderr.splitlines()
    assert notices[0].startswith("specdeck: reconnecting to gated: ") and notices[0].endswith(")"), stderr
    assert notices[-1] == "specdeck: reconnected to gated", stderr


def test_logs_tail_starts_on_a_whole_line_with_and_without_follow(agent_home):
    client = open_client("local")
    job = client.call("jobs.submit", {"argv": ["printf", "aaaa\\nbbbb\\ncccc\\n"]})
    wait_for(lambda: client.call("jobs.get", {"id": job["id"]})["exit_code"] is not None, 30)
    client.close()
    for follow in ([], ["-f"]):
        result = run_cli("logs", "local", job["id"], "--tail", "7", *follow)
        assert result.returncode == 0, result.stderr
        assert result.stdout == "cccc\n", follow


# ------------------------------------------------------------------ 6. --json errors, --version, --help


def test_json_errors_are_json_on_stderr_with_the_same_exit_codes(agent_home):
    cases = [
        (("stop", "local", "j999999"), 1, "NotFound", "no job j999999"),
        (("jobs", "no-such-host.invalid"), 2, "ConnectError", "cannot resolve host 'no-such-host.invalid'"),
        (("logs", "local"), 2, "UsageError", "the following arguments are required: job"),
    ]
    for argv, code, error_type, message in cases:
        plain = run_cli(*argv)
        as_json = run_cli(*argv, "--json")
        assert plain.returncode == as_json.returncode == code, (argv, plain.stderr, as_json.stderr)
        error = json.loads(as_json.stderr)["error"]
        assert error["type"] == error_type and message in error["message"], error
        assert as_json.stdout == ""


def test_version_and_help():
    version = run_cli("--version")
    assert version.returncode == 0 and version.stdout == "specdeck %s\n" % AGENT_VERSION
    shown = run_cli("--help")
    assert shown.returncode == 0
    assert "specdeck [HOST ...]" in shown.stdout and "open the console on HOST" in shown.stdout
    for command, summary in [("run", "start a detached job"), ("jobs", "list the host's jobs"), ("logs", "print a job's log"),
                             ("inspect", "list and check"), ("download", "download from the Hugging Face Hub")]:
        assert any(l.split()[:1] == [command] and summary in l for l in shown.stdout.splitlines()), command


# ------------------------------------------------------------------ 7. a malformed frame is logged


def test_a_line_that_is_not_a_frame_is_logged_not_dropped_silently(agent_home, tmp_path):
    # A host whose login prints a line into the channel after the agent's hello.
    wrapper = tmp_path / "python-with-noise"
    wrapper.write_text(
        "#!/bin/sh\n%s \"$@\" | { IFS= read -r hello; printf '%%s\\n' \"$hello\"; echo 'Welcome to gpu01 (not a frame)'; exec cat; }\n"
        % sys.executable
    )
    wrapper.chmod(0o755)
    state = tmp_path / "state"
    quiet = run_cli("jobs", "local", "--python", wrapper, env={"XDG_STATE_HOME": str(state)})
    assert quiet.returncode == 0 and quiet.stderr == "", quiet.stderr
    assert "skipped a malformed frame from the agent: frame is not JSON" in (state / "specdeck" / "specdeck.log").read_text()
    verbose = run_cli("jobs", "local", "--python", wrapper, "-v", env={"XDG_STATE_HOME": str(state)})
    assert verbose.returncode == 0
    assert "specdeck: tui.client: skipped a malformed frame from the agent: frame is not JSON" in verbose.stderr


def test_the_relay_itself_says_one_line_for_a_squatted_state_directory(tmp_path):
    shared = tmp_path / "shared"
    shared.mkdir()
    os.chmod(shared, 0o1777)
    squatted = shared / ("specdeck-%d" % os.getuid())
    squatted.mkdir()
    os.chown(squatted, 65534, 65534)
    env = dict(os.environ, SPECDECK_HOME=str(shared), PYTHONPATH=str(Path(__file__).resolve().parent.parent))
    result = subprocess.run([sys.executable, "-m", "remote", "relay"], stdin=subprocess.DEVNULL, capture_output=True, text=True, env=env, timeout=30)
    assert result.returncode == 1 and result.stdout == ""
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("specdeck relay: %s cannot hold specdeck's state: it belongs to uid 65534" % squatted), lines
