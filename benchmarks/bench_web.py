"""The console in a browser (`specdeck web`) against the console in a terminal, side by side.

  python benchmarks/bench_web.py [--idle-seconds 30] [--rounds 10]

Both on the local agent, one quiet job whose log is open. The terminal console runs in a
pseudo-terminal (110x32) as in bench_console.py; the page in headless chromium (1280x900) over
loopback.
- first paint: from opening the URL (the terminal: starting the process) until the console's tab
  row ("Jobs") is text on the page (the terminal: bytes on the pseudo-terminal).
- keys: bench_console.py's keys (f follow, 3 another pane, ? help); in the page, from the key's
  keydown until its answer is text in the page's DOM (the terminal's accessibility tree), timed
  in the page itself.
- memory per open tab: the RSS of the tab's console process, and what a second tab adds to the
  browser's renderers.
- idle: CPU of the tab's console process, of the server and of the browser's renderers over the
  window, the page open on the GPUs pane; the terminal console's alongside in the same window.
"""

import argparse
import os
import select
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from benchmarks.bench_console import KEYS, Terminal, measure, stop_everything  # noqa: E402

TICK = os.sysconf("SC_CLK_TCK")
PAGE_SIZE = os.sysconf("SC_PAGE_SIZE")
ROWS_JS = "const t = document.querySelector('.xterm-accessibility-tree'); return t ? t.innerText : '';"
# From the key's keydown in the page until the websocket brings the bytes that answer it (as the
# terminal's time runs until the pseudo-terminal has them), and until that answer is text in the
# page's DOM (the terminal's accessibility tree, which xterm refreshes after its screen).
SOCKET_JS = """
const Native = window.WebSocket;
window.WebSocket = class extends Native {
  constructor(url, protocols) {
    super(url, protocols);
    const decoder = new TextDecoder();
    this.addEventListener('message', function (event) {
      if (typeof event.data === 'string' || window.__keydown == null || window.__received != null) return;
      window.__seen = (window.__seen + decoder.decode(event.data)).slice(-65536);
      if (window.__seen.includes(window.__answer)) window.__received = performance.now() - window.__keydown;
    });
  }
};
"""
ARM_JS = """
const answer = arguments[0];
window.__answer = answer;
window.__seen = '';
window.__received = null;
window.__answered = null;
window.__keydown = null;
document.addEventListener('keydown', function down() {
  window.__keydown = performance.now();
  document.removeEventListener('keydown', down, true);
}, true);
const tree = document.querySelector('.xterm-accessibility-tree');
const observer = new MutationObserver(function () {
  if (window.__keydown !== null && tree.innerText.includes(answer)) {
    window.__answered = performance.now() - window.__keydown;
    observer.disconnect();
  }
});
observer.observe(tree, {childList: true, subtree: true, characterData: true});
"""


def wait(predicate, timeout_s=60.0, what="the page"):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.005)
    raise SystemExit("timed out waiting for %s" % what)


def children(pid):
    try:
        with open("/proc/%d/task/%d/children" % (pid, pid)) as f:
            return [int(p) for p in f.read().split()]
    except OSError:
        return []


def cpu_ticks(pid):
    try:
        with open("/proc/%d/stat" % pid) as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return int(fields[11]) + int(fields[12])
    except OSError:
        return 0


def rss(pid):
    try:
        with open("/proc/%d/statm" % pid) as f:
            return int(f.read().split()[1]) * PAGE_SIZE
    except OSError:
        return 0


def renderers():
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open("/proc/%s/cmdline" % entry, "rb") as f:
                    if b"--type=renderer" in f.read():
                        found.append(int(entry))
            except OSError:
                pass
    return found


def page_keys(driver, rounds):
    from selenium.webdriver.common.by import By

    box = driver.find_element(By.CSS_SELECTOR, ".xterm-helper-textarea")
    received, shown = ({key: [] for key, _, _, _ in KEYS} for _ in range(2))
    for _ in range(rounds):
        for key, answer, undo, undone in KEYS:
            for k, a in ((key, answer), (undo, undone)):
                driver.execute_script(ARM_JS, a.decode())
                box.send_keys(k)
                took = wait(lambda: driver.execute_script("return window.__answered"), what=repr(a))
                if k == key:
                    shown[key].append(took / 1e3)
                    received[key].append((driver.execute_script("return window.__received") or took) / 1e3)
            time.sleep(0.02)
    return received, shown


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--idle-seconds", type=float, default=30.0)
    parser.add_argument("--rounds", type=int, default=10)
    args = parser.parse_args()

    from selenium import webdriver
    from selenium.webdriver.chrome.options import Options
    from selenium.webdriver.chrome.service import Service

    home = tempfile.mkdtemp()
    env = dict(os.environ, SPECDECK_HOME=home, PYTHONPATH=ROOT, TERM="xterm-256color")
    cli = [sys.executable, "-m", "tui.cli"]
    terminal = server = driver = None
    try:
        subprocess.run(cli + ["run", "local", "--", "bash", "-c", "echo idle; sleep 600"], env=env, check=True, capture_output=True)
        # The terminal console.
        t0 = time.perf_counter()
        terminal = Terminal(cli + ["local"], env)
        term_paint_s = terminal.read_until(b"Jobs")
        terminal.read_until(b"connected")
        os.write(terminal.fd, b"2")
        terminal.read_until(b"j1")
        time.sleep(1.5)
        terminal.key("\r", b"log j1")
        term_keys = measure(terminal, args.rounds)
        # The page.
        port = free_port()
        server = subprocess.Popen(cli + ["web", "local", "--port", str(port)], env=env, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        url = server.stdout.readline().split("the console is at ", 1)[1].split()[0]
        options = Options()
        for flag in ("--headless", "--no-sandbox", "--disable-gpu", "--window-size=1280,900"):
            options.add_argument(flag)
        options.binary_location = shutil.which("chromium") or "/usr/bin/chromium"
        driver = webdriver.Chrome(service=Service(shutil.which("chromedriver") or "/usr/bin/chromedriver"), options=options)
        driver.execute_cdp_cmd("Page.addScriptToEvaluateOnNewDocument", {"source": SOCKET_JS})
        driver.get("about:blank")
        t0 = time.perf_counter()
        driver.get(url)
        wait(lambda: "Jobs" in (driver.execute_script(ROWS_JS) or ""), what="the first paint")
        page_paint_s = time.perf_counter() - t0
        wait(lambda: "connected" in driver.execute_script(ROWS_JS), what="connected")
        box = driver.find_element("css selector", ".xterm-helper-textarea")
        wait(lambda: box.send_keys("2") or "j1" in driver.execute_script(ROWS_JS), what="the Jobs pane")
        time.sleep(1.5)
        box.send_keys("\n")
        wait(lambda: "log j1" in driver.execute_script(ROWS_JS), what="the log")
        page_keys_s, page_dom_s = page_keys(driver, args.rounds)
        # Memory: one tab's console, and what a second tab adds to the renderers.
        consoles = children(server.pid)
        console_rss = [rss(pid) for pid in consoles]
        before = sum(rss(pid) for pid in renderers())
        first = driver.current_window_handle
        driver.switch_to.new_window("tab")
        driver.get(url)
        wait(lambda: "Jobs" in (driver.execute_script(ROWS_JS) or ""), what="the second tab")
        time.sleep(2)
        renderer_added = sum(rss(pid) for pid in renderers()) - before
        second_console = [rss(pid) for pid in children(server.pid) if pid not in consoles]
        driver.close()
        driver.switch_to.window(first)
        # Idle: the page and the terminal on the GPUs pane, the same window.
        driver.find_element("css selector", ".xterm-helper-textarea").send_keys("1")
        os.write(terminal.fd, b"1")
        time.sleep(3)
        watched = {"web console": children(server.pid), "web server": [server.pid], "renderers": renderers(),
                   "terminal console": [terminal.pid]}
        start = {name: sum(cpu_ticks(p) for p in pids) for name, pids in watched.items()}
        began = time.monotonic()
        until = began + args.idle_seconds
        while time.monotonic() < until:  # the terminal read as a terminal reads (a full one would stall it)
            # One bounded read at a time: drain() returns only after a quiet spell, which a
            # console redrawing its clock may never give, and the window would run on unmeasured.
            if select.select([terminal.fd], [], [], min(0.2, max(0.0, until - time.monotonic())))[0]:
                os.read(terminal.fd, 1 << 16)
        window_s = time.monotonic() - began
        idle = {name: (sum(cpu_ticks(p) for p in pids) - start[name]) / TICK / window_s * 100
                for name, pids in watched.items()}
    finally:
        if driver is not None:
            driver.quit()
        if server is not None:
            server.terminate()
            server.wait(30)
        stop_everything(cli, env, home, terminal)

    print("specdeck web against the terminal console, local agent, loopback:")
    print("  first paint        page %6.0f ms   terminal %6.0f ms   %.2fx" % (page_paint_s * 1e3, term_paint_s * 1e3, page_paint_s / term_paint_s))
    print("  key answered (median / max over %d), a job's log open; page: its bytes on the websocket"
          " (in the DOM's text)" % args.rounds)
    names = {"f": "f   follow on/off", "3": "3   switch pane", "?": "?   help screen"}
    for key, _, _, _ in KEYS:
        page, term, dom = page_keys_s[key], term_keys[key], page_dom_s[key]
        print("    %-18s page %5.1f / %5.1f ms (%5.1f / %5.1f)   terminal %5.1f / %5.1f ms   %.2fx" % (
            names[key], statistics.median(page) * 1e3, max(page) * 1e3, statistics.median(dom) * 1e3, max(dom) * 1e3,
            statistics.median(term) * 1e3, max(term) * 1e3, statistics.median(page) / statistics.median(term)))
    mib = 1024 * 1024
    print("  memory per open tab: console process %.0f MiB (second tab %.0f MiB), browser renderers +%.0f MiB" % (
        sum(console_rss) / mib, sum(second_console) / mib, renderer_added / mib))
    print("  idle CPU over %.0f s (share of one core), GPUs pane:" % args.idle_seconds)
    for name, share in idle.items():
        print("    %-18s %5.1f %%" % (name, share))


if __name__ == "__main__":
    main()
