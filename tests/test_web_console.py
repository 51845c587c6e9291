"""`specdeck web`: the console in a real (headless) chromium, behind its secret.

One server for the module, on two hosts: `local` (a private state directory) and `gpuhost`, a
real sshd whose host key this laptop has never seen (the page asks, as the terminal does; a click
refuses it, r asks again, a click accepts it); one browser, its notifications recorded as the page
makes them.
"""

import base64
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import urllib.error
import urllib.parse
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
from selenium.webdriver.common.actions import interaction  # noqa: E402
from selenium.webdriver.common.actions.action_builder import ActionBuilder  # noqa: E402
from selenium.webdriver.common.actions.pointer_input import PointerInput  # noqa: E402
from selenium.webdriver.common.by import By  # noqa: E402

CHROMEDRIVER = "/usr/bin/chromedriver"
# Each row's text as the terminal holds it, every space kept (innerText folds runs of spaces by
# the page's CSS, and a click's column is counted in cells).
ROWS_JS = """
const t = document.querySelector('.xterm-accessibility-tree');
return t ? Array.from(t.children, row => row.textContent.replace(/\\u00a0/g, ' ')).join('\\n') : '';
"""
# Where the terminal lies against the window, and whether the page itself would scroll.
FITS_JS = """
const box = document.querySelector('.xterm-screen').getBoundingClientRect();
const page = document.documentElement;
return box.right <= innerWidth && box.bottom <= innerHeight && page.scrollWidth <= innerWidth && page.scrollHeight <= innerHeight;
"""
# Before any page script: each notification the page shows, and each time it asks for them.
RECORD_NOTIFICATIONS_JS = """
window.__notes = [];
window.__asked = 0;
if (window.Notification) {
  const Native = window.Notification;
  window.Notification = class extends Native {
    constructor(title, options) { super(title, options); window.__notes.push([title, (options || {}).body]); }
  };
  // Counted, not put to the browser: its question is its own window, outside the page (and a
  // headless one left open holds back the page's clicks).
  window.Notification.requestPermission = function () { window.__asked += 1; return Promise.resolve(Native.permission); };
}
"""
# The main figure of each pane of an empty host (the Jobs pane's is its job, added by the test).
PANES = {"1": "CPU and memory % of the host", "3": "no downloads on this host yet: n starts one",
         "4": "No checkpoint open: o picks one on the host",
         "5": "no inference server on this host yet: start one with `specdeck serve`",
         "6": "no training run on this host yet: start one with `specdeck train`"}
TABS = ("0 Fleet", "1 GPUs", "2 Jobs", "3 Downloads", "4 Tensors", "5 Speculation", "6 Training")
PHONE_TABS = ("0 Fleet", "1 GPUs", "2 Jobs", "3 Down", "4 Tens", "5 Spec", "6 Train")  # a narrow terminal's


class Web:
    def __init__(self, root, sshd, host_python):
        self.root = root
        home = sshd.client_home(root, known_hosts=False)  # `gpuhost`, its key never seen
        self.known_hosts = home / ".ssh" / "known_hosts"
        self.host_key, self.fingerprint, self.host_spec = sshd.host_key_pub.split()[1], sshd.host_fingerprint, sshd.host_spec
        self.env = {
            "HOME": str(home), "SPECDECK_HOME": tempfile.mkdtemp(prefix="sd-web-"),
            "XDG_CONFIG_HOME": str(root / "config"), "XDG_RUNTIME_DIR": str(short_runtime_dir()),
            # ssh reads ~/.ssh from the passwd entry's home, not $HOME: the laptop's config named.
            "SPECDECK_SSH_CONFIG": str(home / ".ssh" / "config"),
        }
        self.port = free_port()
        self.out = open(root / "server.out", "w+")
        self.err = open(root / "server.err", "w+")
        env = {k: v for k, v in os.environ.items() if k != "SSH_AUTH_SOCK"}
        env.update(self.env, PYTHONPATH=str(REPO_ROOT))
        self.process = subprocess.Popen([sys.executable, "-m", "tui.cli", "web", "--python", host_python, "local", "gpuhost",
                                         "--port", str(self.port)],
                                        stdout=self.out, stderr=self.err, env=env, cwd=str(REPO_ROOT))
        self.url = wait_for(self._url, message="the URL line")
        self.key = urllib.parse.unquote(urllib.parse.urlsplit(self.url).password)
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
def web(tmp_path_factory, sshd, host_python):
    server = Web(tmp_path_factory.mktemp("web"), sshd, host_python)
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
    driver.execute_cdp_cmd("Page.addScriptToEvaluateOnNewDocument", {"source": RECORD_NOTIFICATIONS_JS})
    yield driver
    driver.quit()


def rows(driver):
    return driver.execute_script(ROWS_JS) or ""


def on_page(driver, predicate, message):
    """wait_for(predicate), and what the page showed when it was not met."""
    try:
        return wait_for(predicate, message=message)
    except AssertionError as exc:
        raise AssertionError("%s; the page shows:\n%s" % (exc, rows(driver))) from None


def shows(driver, *texts):
    return on_page(driver, lambda: all(t in rows(driver) for t in texts) and rows(driver), "%r on the page" % (texts,))


def reads(driver, *texts):
    """As `shows`, a text wrapped over rows read as one line (each row's spaces at its ends folded)."""
    def read():
        screen = rows(driver)
        return screen if all(t in screen or t in " ".join(screen.split()) for t in texts) else None
    return on_page(driver, read, "%r on the page, its rows joined" % (texts,))


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


def click_text(driver, text, touch=False):
    """Click the middle of `text` where the terminal shows it; with `touch`, a finger's tap."""
    lines = rows(driver).split("\n")
    row = next(i for i, line in enumerate(lines) if text in line)
    column = lines[row].index(text) + len(text) / 2
    screen = driver.find_element(By.CSS_SELECTOR, ".xterm-screen")
    width, height = screen.size["width"], screen.size["height"]
    count, columns = len(lines), max(len(line) for line in lines)  # every row holds the screen's width in cells
    cell_w = width / columns
    x, y = int(column * cell_w - width / 2), int((row + 0.5) * height / count - height / 2)
    if not touch:
        ActionChains(driver).move_to_element_with_offset(screen, x, y).click().perform()
        return
    actions = ActionBuilder(driver, mouse=PointerInput(interaction.POINTER_TOUCH, "finger"))
    actions.pointer_action.move_to(screen, x, y).pointer_down().pointer_up()
    actions.perform()


def window(driver, width, height, phone=False):
    """The page's window at `width` x `height` CSS pixels (a phone's: touch, at one pixel a pixel)."""
    if not phone:
        driver.execute_cdp_cmd("Emulation.clearDeviceMetricsOverride", {})
        driver.set_window_size(width, height)
        inner_w, inner_h = driver.execute_script("return [innerWidth, innerHeight]")
        driver.set_window_size(2 * width - inner_w, 2 * height - inner_h)  # the window's frame around it
        return
    driver.execute_cdp_cmd("Emulation.setDeviceMetricsOverride",
                           {"width": width, "height": height, "deviceScaleFactor": 1, "mobile": True})
    driver.execute_cdp_cmd("Emulation.setTouchEmulationEnabled", {"enabled": True, "maxTouchPoints": 5})


def notifications(driver, web, setting):
    driver.execute_cdp_cmd("Browser.setPermission", {"permission": {"name": "notifications"}, "setting": setting,
                                                     "origin": web.base.rstrip("/")})


def screenshot_size(driver):
    png = driver.get_screenshot_as_png()
    assert png[:8] == b"\x89PNG\r\n\x1a\n"
    return int.from_bytes(png[16:20], "big"), int.from_bytes(png[20:24], "big")


def fleet_row(driver, host):
    return next((line.split() for line in rows(driver).split("\n") if host in line.split()), [])


def refused(url, headers=None):
    try:
        urllib.request.urlopen(urllib.request.Request(url, headers=headers or {}), timeout=30)
    except urllib.error.HTTPError as exc:
        return exc.code
    return 200


def upgrade(port, path, origin=None, key=None):
    """The status line of a raw websocket Upgrade request."""
    lines = ["GET %s HTTP/1.1" % path, "Host: 127.0.0.1:%d" % port, "Upgrade: websocket", "Connection: Upgrade",
             "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==", "Sec-WebSocket-Version: 13"]
    if origin:
        lines.append("Origin: %s" % origin)
    if key:
        lines.append("Authorization: Basic %s" % base64.b64encode(("specdeck:" + key).encode()).decode())
    with socket.create_connection(("127.0.0.1", port), timeout=30) as sock:
        sock.sendall(("\r\n".join(lines) + "\r\n\r\n").encode())
        return sock.recv(4096).split(b"\r\n", 1)[0].decode()


def jobs(web):
    return json.loads(web.cli("jobs", "local", "--json").stdout)


def test_without_the_secret_nothing_is_served(web):
    for path in ("", "signin", "static/js/textual.js", "specdeck/textual.js", "static/css/xterm.css"):
        assert refused(web.base + path) == 401, path
    assert refused(web.base, {"Authorization": "Basic " + base64.b64encode(b"specdeck:" + b"x" * len(web.key)).decode()}) == 401
    assert refused(web.base + "?key=" + web.key) == 401  # a key in a query (kept in the history) opens nothing
    assert " 401 " in upgrade(web.port, "/ws") + " "
    assert " 401 " in upgrade(web.port, "/ws", key="wrong" * 8) + " "
    assert " 403 " in upgrade(web.port, "/ws", origin="http://elsewhere.example", key=web.key) + " "
    assert " 101 " in upgrade(web.port, "/ws", origin=web.base.rstrip("/"), key=web.key) + " "


def test_the_fleet_and_a_host_key_asked_in_the_page(web, browser):
    notifications(browser, web, "prompt")  # the browser has not been told yet: the page may ask
    window(browser, 1280, 800)
    browser.get(web.url)
    assert web.key not in browser.current_url  # the key left the address bar (the browser keeps it for this origin)
    # Two hosts: the Fleet pane, and the question about gpuhost's key, asked in the page.
    shows(browser, "Unknown host key for " + web.host_spec, web.fingerprint, "Accept (y)", "Refuse (n)")
    assert browser.execute_script("return window.__asked") == 0  # not before a gesture
    on_page(browser, lambda: "up" in fleet_row(browser, "local"), "local up while the question waits")
    known = web.known_hosts.read_text()
    assert web.host_key not in known
    # Refused, by a click on its button: gpuhost's row says the key is unknown, its line under the
    # table how to be asked again; nothing is remembered.
    click_text(browser, "Refuse (n)")
    on_page(browser, lambda: "failed" in fleet_row(browser, "gpuhost") and "unknown host key" in " ".join(fleet_row(browser, "gpuhost"))
            and "Refuse (n)" not in rows(browser), "gpuhost's row: its key refused")
    click_text(browser, "gpuhost")  # its row, highlighted: its whole reason below
    reads(browser, "gpuhost: unknown host key for " + web.host_spec, web.fingerprint, "not accepted: press r to be asked again")
    assert web.known_hosts.read_text() == known
    # Asked again (r on its row) and accepted, by a click: it connects, its key remembered.
    press(browser, "r")
    shows(browser, "Unknown host key for " + web.host_spec, web.fingerprint, "Accept (y)")
    click_text(browser, "Accept (y)")
    on_page(browser, lambda: "up" in fleet_row(browser, "gpuhost"), "gpuhost connected once its key was accepted")
    assert web.host_key in web.known_hosts.read_text()  # remembered: no other tab asks again
    press(browser, "0")
    assert browser.execute_script("return window.__asked") == 1  # asked once, at the first gesture
    notifications(browser, web, "denied")  # the user said no
    # A screenshot at 1280x800: the whole console in it, nothing of it past the window.
    assert screenshot_size(browser) == (1280, 800) and browser.execute_script(FITS_JS)
    shows(browser, *TABS, "? help")


def test_the_console_in_the_page(web, browser):
    cli_job = web.cli("run", "local", "--name", "from the cli", "--", "sleep", "600").stdout.strip()
    browser.get(web.base)
    shows(browser, "GPUs", "Jobs")
    assert "Unknown host key" not in rows(browser)
    # The page asked nothing of elsewhere.
    loaded = browser.execute_script("return performance.getEntriesByType('resource').map(e => e.name)")
    assert loaded and all(url.startswith(web.base) or url.startswith("ws://127.0.0.1") for url in loaded), loaded
    jobs_pane(browser, cli_job)
    click_text(browser, "3 Downloads")
    on_page(browser, lambda: "no downloads on this host yet" in rows(browser), "the Downloads pane")
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
    # An alert: a job that fails. Notifications not allowed: the title tells.
    failed = web.cli("run", "local", "--", "sh", "-c", "exit 3").stdout.strip()
    wait_for(lambda: failed in browser.title and "failed" in browser.title, message="the alert in the title")
    browser.close()
    browser.switch_to.window(first)
    shows(browser, cli_job)  # the first tab still works
    web.cli("stop", "local", page_job)


def test_every_pane_at_phone_size(web, browser):
    """390x844 CSS pixels, taps: every pane's main figure on the screen, the tabs and key bar too;
    notifications allowed: an alert is one."""
    cli_job = next(j["id"] for j in jobs(web) if j.get("name") == "from the cli")
    notifications(browser, web, "granted")
    window(browser, 390, 844, phone=True)
    browser.get(web.base)
    jobs_pane(browser, cli_job)
    assert browser.execute_script(FITS_JS) and browser.execute_script("return Notification.permission") == "granted"
    # Type a phone can read: the page's font gives ~64 columns (not the ~97 of a font for 80),
    # and the tabs, short there, all on their row.
    columns = max(len(line) for line in rows(browser).split("\n"))
    assert 60 <= columns <= 66, columns
    for number, figure in [("2", cli_job)] + list(PANES.items()) + [("0", "gpuhost")]:
        click_text(browser, next(tab for tab in PHONE_TABS if tab.split()[0] == number), touch=True)
        reads(browser, figure, *PHONE_TABS, "? help")
    assert screenshot_size(browser) == (390, 844) and browser.execute_script(FITS_JS)
    failed = web.cli("run", "local", "--name", "to fail", "--", "sh", "-c", "exit 4").stdout.strip()
    notes = wait_for(lambda: [n for n in browser.execute_script("return window.__notes") if failed in json.dumps(n)],
                     message="the failed job as a notification")
    assert "failed" in json.dumps(notes) and failed not in browser.title
    web.cli("stop", "local", cli_job)


def test_the_secret_is_in_no_log_line(web):
    said = Path(web.out.name).read_text() + Path(web.err.name).read_text()
    assert said.count(web.key) == 1 and web.url in said.splitlines()[0]
    for root in (web.env["SPECDECK_HOME"], web.env["HOME"], web.env["XDG_CONFIG_HOME"]):
        for path in Path(root).rglob("*"):
            if path.is_file() and not path.is_socket():
                assert web.key.encode() not in path.read_bytes(), path
