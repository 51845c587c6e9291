"""`specdeck web`: where its key goes and how long its consoles last, with real (headless)
chromiums and real servers on 127.0.0.1.

One server for the module, on the `local` host (a private state directory). A chromium with its
own profile visits the printed URL once, and the test then reads what that browser kept (its
history and its cache) and what a server on another port was sent; a second chromium is killed
outright mid-session; a server of its own is killed outright; the last test ends the module's
server with SIGTERM.
"""

import base64
import http.server
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from tests.helpers.cli import REPO_ROOT, run_cli, stop_daemon
from tests.helpers.keepers import end_keepers, short_runtime_dir
from tests.helpers.vllm import free_port
from tests.helpers.waits import wait_for

webdriver = pytest.importorskip("selenium.webdriver")
from selenium.webdriver.chrome.options import Options  # noqa: E402
from selenium.webdriver.chrome.service import Service  # noqa: E402

CHROMEDRIVER = "/usr/bin/chromedriver"
ROWS_JS = """
const t = document.querySelector('.xterm-accessibility-tree');
return t ? t.textContent : '';
"""


class Web:
    """`specdeck web local` as a user starts it, and the consoles it runs (its tabs')."""

    def __init__(self, root):
        self.env = {"HOME": str(root / "home"), "SPECDECK_HOME": tempfile.mkdtemp(prefix="sd-web-"),
                    "XDG_CONFIG_HOME": str(root / "config"), "XDG_RUNTIME_DIR": str(short_runtime_dir())}
        Path(self.env["HOME"]).mkdir()
        self.port = free_port()
        self.out = root / "server.out"
        env = {k: v for k, v in os.environ.items() if k != "SSH_AUTH_SOCK"}
        env.update(self.env, PYTHONPATH=str(REPO_ROOT))
        with open(self.out, "w") as out:
            self.process = subprocess.Popen([sys.executable, "-m", "tui.cli", "web", "local", "--port", str(self.port)],
                                            stdout=out, stderr=subprocess.STDOUT, env=env, cwd=str(REPO_ROOT))
        self.url = wait_for(self._url, message="the URL line")
        self.key = self.url.split("://", 1)[1].split("@", 1)[0].split(":", 1)[1]
        self.base = "http://127.0.0.1:%d/" % self.port

    def _url(self):
        said = self.out.read_text()
        assert self.process.poll() is None, said
        return said.split("the console is at ", 1)[1].split()[0] if "\n" in said else None

    def consoles(self):
        """The pids of the consoles this server started that are still running (zombies are
        not): `python -m tui.cli` with this server's state directory, other than the server."""
        mine = ("SPECDECK_HOME=%s" % self.env["SPECDECK_HOME"]).encode()
        pids = set()
        for entry in os.listdir("/proc"):
            if not entry.isdigit() or int(entry) == self.process.pid:
                continue
            try:
                argv = Path("/proc", entry, "cmdline").read_bytes().split(b"\0")
                state = Path("/proc", entry, "stat").read_text().rsplit(")", 1)[1].split()[0]
                environ = Path("/proc", entry, "environ").read_bytes().split(b"\0")
            except OSError:
                continue
            if state != "Z" and argv[1:3] == [b"-m", b"tui.cli"] and b"web" not in argv and mine in environ:
                pids.add(int(entry))
        return pids

    def close(self):
        if self.process.poll() is None:
            self.process.terminate()
            self.process.wait(60)
        for pid in self.consoles():  # left by a failed test: ended so that they outlive nothing
            os.kill(pid, signal.SIGKILL)
        stop_daemon(self.env["SPECDECK_HOME"])
        end_keepers(Path(self.env["XDG_RUNTIME_DIR"]))
        shutil.rmtree(self.env["SPECDECK_HOME"], ignore_errors=True)


@pytest.fixture(scope="module")
def web(tmp_path_factory):
    server = Web(tmp_path_factory.mktemp("web"))
    yield server
    server.close()


def chromium(profile):
    options = Options()
    for flag in ("--headless", "--no-sandbox", "--disable-gpu", "--window-size=1280,900", "--user-data-dir=%s" % profile):
        options.add_argument(flag)
    options.binary_location = shutil.which("chromium") or "/usr/bin/chromium"
    return webdriver.Chrome(service=Service(CHROMEDRIVER), options=options)


def console_shown(driver):
    wait_for(lambda: "GPUs" in (driver.execute_script(ROWS_JS) or ""), message="the console in the page")


class Recorder(http.server.ThreadingHTTPServer):
    """A server on another port of 127.0.0.1 (another user's, say) that keeps the credentials
    each request brings: its cookies and its Authorization header."""

    def __init__(self):
        self.seen = []
        recorder = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self):
                recorder.seen.append({name: self.headers[name] for name in ("Cookie", "Authorization") if self.headers[name]})
                body = b"<html><body>another server</body></html>"
                self.send_response(200)
                self.send_header("Content-Type", "text/html")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args):
                pass

        super().__init__(("127.0.0.1", 0), Handler)
        self.port = self.server_address[1]
        threading.Thread(target=self.serve_forever, daemon=True).start()


def status(url, headers):
    try:
        with urllib.request.urlopen(urllib.request.Request(url, headers=headers), timeout=30) as reply:
            return reply.status
    except urllib.error.HTTPError as exc:
        return exc.code


def upgrade(port, headers):
    """A websocket Upgrade to the console's /ws with `headers`: the socket and its status line."""
    lines = ["GET /ws HTTP/1.1", "Host: 127.0.0.1:%d" % port, "Upgrade: websocket", "Connection: Upgrade",
             "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==", "Sec-WebSocket-Version: 13"]
    lines += ["%s: %s" % item for item in headers.items()]
    sock = socket.create_connection(("127.0.0.1", port), timeout=30)
    sock.sendall(("\r\n".join(lines) + "\r\n\r\n").encode())
    return sock, sock.recv(4096).split(b"\r\n", 1)[0].decode()


def signed_in(key):
    return {"Authorization": "Basic " + base64.b64encode(("anyone:" + key).encode()).decode()}


def test_a_taken_port_prints_no_url(tmp_path):
    """With --token-file the key lasts: a URL printed for a port someone else holds hands it to them."""
    token_file = tmp_path / "key"
    token_file.write_text("a-lasting-key-0123456789\n")
    token_file.chmod(0o600)
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        port = holder.getsockname()[1]
        result = run_cli("web", "--port", port, "--token-file", token_file, home=tmp_path,
                         env={"SPECDECK_HOME": str(tmp_path / "sd"), "XDG_RUNTIME_DIR": str(short_runtime_dir())})
    said = result.stdout + result.stderr
    assert result.returncode != 0
    assert said.count("\n") == 1 and "port %d" % port in said and "in use" in said, said
    assert "a-lasting-key" not in said and "http" not in said, said


def test_the_key_stays_out_of_the_browser_and_other_ports(web, tmp_path):
    profile = tmp_path / "profile"
    recorder = Recorder()
    driver = chromium(profile)
    try:
        driver.get(web.url)
        console_shown(driver)
        assert web.key not in driver.current_url  # nothing of it in the address bar
        # Another server of 127.0.0.1, visited from the same browser, at the paths the console uses.
        for path in ("", "ws", "static/js/textual.js"):
            driver.get("http://127.0.0.1:%d/%s" % (recorder.port, path))
            wait_for(lambda: "another server" in driver.page_source, message="the other server's page")
    finally:
        driver.quit()  # as a user closes it: what the browser keeps is on disk
        recorder.shutdown()
    assert len(recorder.seen) >= 3
    credential = base64.b64encode(("specdeck:" + web.key).encode())
    for headers in recorder.seen:
        assert web.key not in repr(headers), headers
        # What it was sent does not open the console, as a page or as a websocket.
        assert status(web.base, headers) == 401, headers
        sock, line = upgrade(web.port, dict(headers, Origin=web.base.rstrip("/")))
        sock.close()
        assert " 401 " in line + " ", (headers, line)
    # The browser's history and its HTTP cache hold no trace of the key.
    kept = [path for path in profile.rglob("*") if path.is_file() and ("History" in path.name or "Cache" in str(path))]
    assert any(path.name == "History" for path in kept), kept
    assert [path for path in kept if web.key.encode() in path.read_bytes() or credential in path.read_bytes()] == []


def test_a_killed_browser_ends_its_console(web, tmp_path):
    before = web.consoles()
    driver = chromium(tmp_path / "profile")
    driver.get(web.url)
    console_shown(driver)
    tab = wait_for(lambda: web.consoles() - before, message="the tab's console")
    # The browser killed outright, every process of it: no close frame, no goodbye.
    browser = [pid for pid in descendants(driver.service.process.pid)]
    for pid in browser:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    driver.service.stop()
    wait_for(lambda: not (web.consoles() & tab), message="the killed tab's console to end")


def test_a_killed_server_leaves_no_console(tmp_path):
    """A server killed outright says nothing to its consoles: each quits when its stdin closes."""
    server = Web(tmp_path)
    try:
        sock, line = upgrade(server.port, signed_in(server.key))
        assert " 101 " in line + " ", line
        screen = bytearray()
        wait_for(lambda: screen.extend(sock.recv(65536)) or b"GPUs" in screen, message="the console on the tab's websocket")
        assert server.consoles()
        server.process.kill()
        server.process.wait()
        wait_for(lambda: not server.consoles(), message="the console of a killed server to end")
        sock.close()
    finally:
        server.close()


def test_the_servers_end_ends_every_console(web):
    before = web.consoles()
    tabs = [upgrade(web.port, signed_in(web.key)) for _ in range(2)]
    assert all(" 101 " in line + " " for _, line in tabs), tabs
    wait_for(lambda: len(web.consoles() - before) == 2, message="two consoles")
    web.process.send_signal(signal.SIGTERM)
    assert web.process.wait(60) == 0
    assert web.consoles() == set()  # none left behind, spinning or reconnecting to the host
    for sock, _ in tabs:
        sock.close()


def descendants(pid):
    """Every process under `pid`."""
    children = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                parent = int(Path("/proc", entry, "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            children.setdefault(parent, []).append(int(entry))
    found, todo = [], list(children.get(pid, []))
    while todo:
        child = todo.pop()
        found.append(child)
        todo.extend(children.get(child, []))
    return found
