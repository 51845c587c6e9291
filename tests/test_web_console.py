"""`specdeck web`: the console in a real (headless) chromium, behind its secret.

One server for the module, on the `local` host of a private state directory; one browser.
"""

import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
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
from selenium.webdriver.common.action_chains import ActionChains  # noqa: E402
from selenium.webdriver.common.by import By  # noqa: E402

CHROMEDRIVER = "/usr/bin/chromedriver"
ROWS_JS = "const t = document.querySelector('.xterm-accessibility-tree'); return t ? t.innerText : '';"
# The width of one cell: the terminal's font, measured as xterm measures it; and the rows.
MEASURE_JS = """
const terminal = document.querySelector('.xterm');
const context = document.createElement('canvas').getContext('2d');
context.font = getComputedStyle(terminal.querySelector('.xterm-helper-textarea') || terminal).fontSize + " 'Roboto Mono'";
return [context.measureText('W').width, document.querySelector('.xterm-accessibility-tree').children.length];
"""


class Web:
    def __init__(self, root):
        self.root = root
        self.env = {
            "HOME": str(root / "home"), "SPECDECK_HOME": tempfile.mkdtemp(prefix="sd-web-"),
            "XDG_CONFIG_HOME": str(root / "config"), "XDG_RUNTIME_DIR": str(short_runtime_dir()),
        }
        os.makedirs(self.env["HOME"], exist_ok=True)
        self.port = free_port()
        self.out = open(root / "server.out", "w+")
        self.err = open(root / "server.err", "w+")
        env = {k: v for k, v in os.environ.items() if k != "SSH_AUTH_SOCK"}
        env.update(self.env, PYTHONPATH=str(REPO_ROOT))
        self.process = subprocess.Popen([sys.executable, "-m", "tui.cli", "web", "local", "--port", str(self.port)],
                                        stdout=self.out, stderr=self.err, env=env, cwd=str(REPO_ROOT))
        self.url = wait_for(self._url, message="the URL line")
        self.key = self.url.split("key=", 1)[1]
        self.base = "http://127.0.0.1:%d/" % self.port

    def _url(self):
        assert self.process.poll() is None, Path(self.err.name).read_text()
        line = Path(self.out.name).read_text()
        return line.split("the console is at ", 1)[1].split()[0] if "\n" in line else None

    def cli(self, *args, check=0):
        return run_cli(*args, home=self.env["HOME"], env=self.env, check=check)

    def close(self):
        self.process.terminate()
        self.process.wait(30)
        stop_daemon(self.env["SPECDECK_HOME"])
        end_keepers(Path(self.env["XDG_RUNTIME_DIR"]))


@pytest.fixture(scope="module")
def web(tmp_path_factory):
    server = Web(tmp_path_factory.mktemp("web"))
    yield server
    server.close()
    shutil.rmtree(server.env["SPECDECK_HOME"], ignore_errors=True)


@pytest.fixture(scope="module")
def browser():
    options = Options()
    for flag in ("--headless", "--no-sandbox", "--disable-gpu", "--window-size=1280,900"):
        options.add_argument(flag)
    options.binary_location = shutil.which("chromium") or "/usr/bin/chromium"
    driver = webdriver.Chrome(service=Service(CHROMEDRIVER), options=options)
    yield driver
    driver.quit()


def rows(driver):
    return driver.execute_script(ROWS_JS) or ""


def shows(driver, *texts):
    return wait_for(lambda: all(t in rows(driver) for t in texts) and rows(driver), message="%r on the page" % (texts,))


def press(driver, keys):
    box = driver.find_element(By.CSS_SELECTOR, ".xterm-helper-textarea")
    box.send_keys(keys)


def jobs_pane(driver, *texts):
    """Open the Jobs pane (2) once the console answers keys, and wait for `texts` in it."""
    shows(driver, "1 GPUs")

    def opened():
        press(driver, "2")
        return all(t in rows(driver) for t in texts)

    wait_for(opened, interval_s=0.5, message="%r in the Jobs pane" % (texts,))


def click_text(driver, text):
    """Click the middle of `text` where the terminal shows it (a tap on a phone is the same click)."""
    lines = rows(driver).split("\n")
    row = next(i for i, line in enumerate(lines) if text in line)
    column = lines[row].index(text) + len(text) / 2
    screen = driver.find_element(By.CSS_SELECTOR, ".xterm-screen")
    measured, count = driver.execute_script(MEASURE_JS)
    width, height = screen.size["width"], screen.size["height"]
    cell_w = width / round(width / measured)  # the screen is a whole number of cells wide
    ActionChains(driver).move_to_element_with_offset(
        screen, int(column * cell_w - width / 2), int((row + 0.5) * height / count - height / 2)).click().perform()


def refused(url, headers=None):
    try:
        urllib.request.urlopen(urllib.request.Request(url, headers=headers or {}), timeout=30)
    except urllib.error.HTTPError as exc:
        return exc.code
    return 200


def upgrade(port, path, origin=None, cookie=None):
    """The status line of a raw websocket Upgrade request."""
    lines = ["GET %s HTTP/1.1" % path, "Host: 127.0.0.1:%d" % port, "Upgrade: websocket", "Connection: Upgrade",
             "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==", "Sec-WebSocket-Version: 13"]
    if origin:
        lines.append("Origin: %s" % origin)
    if cookie:
        lines.append("Cookie: specdeck_web=%s" % cookie)
    with socket.create_connection(("127.0.0.1", port), timeout=30) as sock:
        sock.sendall(("\r\n".join(lines) + "\r\n\r\n").encode())
        return sock.recv(4096).split(b"\r\n", 1)[0].decode()


def jobs(web):
    return json.loads(web.cli("jobs", "local", "--json").stdout)


def test_without_the_secret_nothing_is_served(web):
    for path in ("", "static/js/textual.js", "specdeck/textual.js", "static/css/xterm.css"):
        assert refused(web.base + path) == 403, path
    assert refused(web.base + "?key=" + "x" * len(web.key)) == 403
    assert " 403 " in upgrade(web.port, "/ws") + " "
    assert " 403 " in upgrade(web.port, "/ws?key=wrong") + " "
    assert " 403 " in upgrade(web.port, "/ws?key=" + web.key, origin="http://elsewhere.example") + " "
    assert " 403 " in upgrade(web.port, "/ws", origin="http://elsewhere.example", cookie=web.key) + " "
    assert " 101 " in upgrade(web.port, "/ws", origin=web.base.rstrip("/"), cookie=web.key) + " "


def test_the_console_in_the_page(web, browser):
    cli_job = web.cli("run", "local", "--name", "from the cli", "--", "sleep", "600").stdout.strip()
    browser.get(web.url)
    assert "key=" not in browser.current_url  # the key left the address bar for a cookie
    shows(browser, "GPUs", "Jobs")
    # The page asked nothing of elsewhere.
    loaded = browser.execute_script("return performance.getEntriesByType('resource').map(e => e.name)")
    assert loaded and all(url.startswith(web.base) or url.startswith("ws://127.0.0.1") for url in loaded), loaded
    jobs_pane(browser, cli_job)
    click_text(browser, "3 Downloads")
    wait_for(lambda: cli_job not in rows(browser), message="the Downloads pane")
    click_text(browser, "2 Jobs")
    shows(browser, cli_job)
    # A job from the page's form is the host's: the CLI sees it.
    press(browser, "n")
    shows(browser, "command")
    press(browser, "sleep 601\n")
    page_job = wait_for(lambda: next((j["id"] for j in jobs(web) if "sleep 601" in json.dumps(j)), None),
                        message="the page's job on the host (the page shows %r)" % rows(browser))
    shows(browser, page_job)
    # A reload and a second tab: the same jobs, each tab a console of its own.
    browser.refresh()
    jobs_pane(browser, cli_job, page_job)
    first = browser.current_window_handle
    browser.switch_to.new_window("tab")
    browser.get(web.base)
    jobs_pane(browser, cli_job, page_job)
    # An alert: a job that fails. Headless chromium refuses notifications: the title tells.
    failed = web.cli("run", "local", "--", "sh", "-c", "exit 3").stdout.strip()
    wait_for(lambda: failed in browser.title and "failed" in browser.title, message="the alert in the title")
    browser.switch_to.window(first)
    shows(browser, cli_job)  # the first tab still works
    # A phone: 390x844 CSS pixels.
    browser.set_window_size(390, 844)
    browser.refresh()
    jobs_pane(browser, cli_job, "quit", "help")
    for job in (cli_job, page_job):
        web.cli("stop", "local", job)


def test_the_secret_is_in_no_log_line(web):
    said = Path(web.out.name).read_text() + Path(web.err.name).read_text()
    assert said.count(web.key) == 1 and web.url in said.splitlines()[0]
    for root in (web.env["SPECDECK_HOME"], web.env["HOME"], web.env["XDG_CONFIG_HOME"]):
        for path in Path(root).rglob("*"):
            if path.is_file() and not path.is_socket():
                assert web.key.encode() not in path.read_bytes(), path
