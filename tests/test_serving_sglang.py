"""SGLang's figures, from test data written in the exact format of SGLang's own source (its
scheduler's decode log line, its metrics collector's gauge names, its /get_server_info reply;
SGLang itself cannot run here): decode lines gathered into windows with their accept length,
accept rate and throughput; the gauges as the latest value with its age; the active speculative
settings read from a real HTTP server through the bounded scrape, falling back to /server_info."""

import calendar
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from remote.core.feed_source import Budget, SourceError
from remote.serving import metrics, scrape, sglang

DATA = Path(__file__).parent / "data" / "sglang"


def at(text):
    return float(calendar.timegm(time.strptime(text, "%Y-%m-%d %H:%M:%S")))


def test_decode_lines_become_windows_with_accept_length_and_throughput():
    windows = sglang.Windows(window_s=5.0)
    fed = [windows.feed(line) for line in (DATA / "decode.log").read_text().splitlines()]
    assert fed.count(True) == 6  # the prefill and the access line are not decode lines
    got = windows.windows()
    assert [w["start"] for w in got] == [at("2025-10-02 09:14:00"), at("2025-10-02 09:14:05"), at("2025-10-02 09:14:10")]
    assert [w["lines"] for w in got] == [3, 2, 1]
    assert got[0]["accept_length"] == pytest.approx((2.84 + 3.12 + 3.00) / 3)
    assert got[0]["accept_rate"] == pytest.approx((0.46 + 0.53 + 0.50) / 3)
    assert got[0]["generation_tps"] == pytest.approx((1211.40 + 1432.71 + 1380.02) / 3)
    assert (got[0]["running"], got[0]["waiting"], got[0]["kv_cache_usage"]) == (8, 2, 0.02)  # its last line's
    assert got[2]["accept_length"] == 3.40 and got[2]["generation_tps"] == 802.15

    line = sglang.parse_decode_line((DATA / "decode.log").read_text().splitlines()[-1])
    assert line["rank"] == "TP0" and line["cuda_graph"] is False and line["tokens"] == 3200


def test_hostile_decode_lines_are_refused_or_read_within_bounds():
    assert sglang.parse_decode_line("Decode batch, " * 100000) is None  # longer than any decode line
    assert sglang.parse_decode_line("Decode batch, accept len: " + "9" * 500) is None  # no number that long
    assert sglang.parse_decode_line("Decode batch, accept len: nan, gen throughput (token/s): inf") is None
    many = "Decode batch, " + "#running-req: 1, " * 400 + "accept len: 2.00"
    assert "accept_length" not in (sglang.parse_decode_line(many) or {})  # past the fields a line has
    windows = sglang.Windows(window_s=1.0)
    for second in range(sglang.MAX_WINDOWS + 50):
        windows.feed("[2025-10-02 09:%02d:%02d TP0] Decode batch, accept len: 2.00, gen throughput (token/s): 1.00, "
                     % (second // 60 % 60, second % 60))
    assert len(windows.windows()) == sglang.MAX_WINDOWS


def test_gauges_are_the_latest_value_with_its_age():
    snapshot = metrics.parse((DATA / "metrics.txt").read_text(), 1000.0)
    latest = sglang.latest_gauges(snapshot, now=1012.5)
    assert latest == {"accept_length": 3.4, "accept_rate": 0.6, "generation_tps": 802.15, "running": 4.0,
                      "waiting": 0.0, "kv_cache_usage": None, "age_s": 12.5}


class InfoServer(BaseHTTPRequestHandler):
    def do_GET(self):
        if self.path != "/server_info":  # a server that has only the newer name
            self.send_error(404)
            return
        body = (DATA / "server_info.json").read_bytes()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


def test_server_info_gives_the_active_speculative_settings():
    server = ThreadingHTTPServer(("127.0.0.1", 0), InfoServer)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        url = "http://127.0.0.1:%d" % server.server_address[1]
        settings = sglang.read_server_info(url, Budget(5.0, 1 << 20), scrape.get)
        assert settings == {"algorithm": "EAGLE3", "draft_model_path": "jamesliu1/sglang-EAGLE3-Llama-3.1-Instruct-8B",
                            "num_steps": 5, "eagle_topk": 8, "num_draft_tokens": 32, "avg_accept_length": 2.93,
                            "version": "0.5.3rc2"}
        with pytest.raises(SourceError, match="404"):
            sglang.read_server_info(url + "/nothing", Budget(5.0, 1 << 20), scrape.get)
    finally:
        server.shutdown()
        server.server_close()


def test_a_followed_log_gives_windows_on_its_own_clock_and_refuses_overlong_lines(tmp_path):
    log = tmp_path / "server.log"
    # Stamped hours away from this machine's clock (a host in another time zone): still windowed.
    log.write_text("[2025-10-02 03:00:01 TP0] Decode batch, accept len: 2.00, gen throughput (token/s): 10.00, \n")
    follower = sglang.LogWindows(str(log))
    follower.read()
    with log.open("a") as f:
        f.write("x" * (sglang.MAX_LINE_CHARS + 10))  # an unfinished line already too long ...
    follower.read()
    with log.open("a") as f:  # ... whose end plants a decode line: refused with it
        f.write("Decode batch, accept len: 9.00, gen throughput (token/s): 1.00, \n")
        f.write("[2025-10-02 03:00:02 TP0] Decode batch, accept len: 3.00, gen throughput (token/s): 20.00, \n")
    follower.read()
    figures = follower.over(10.0)
    assert figures["lines"] == 2 and figures["accept_length"] == 2.5 and figures["generation_tps"] == 15.0
    assert figures["log_age_s"] < 60 and [w["lines"] for w in figures["windows"]] == [2]
