"""SGLang's speculation figures: windows of its decode log lines, its gauges as the latest value,
and the speculative settings its /get_server_info says are active.

The decode line, as SGLang's scheduler writes it (python/sglang/srt/managers/
scheduler_metrics_mixin.py, `log_decode_stats`, sgl-project/sglang at commit 01bb3c80), through
its logger's `[%Y-%m-%d %H:%M:%S TP0] ` prefix, once per `--decode-log-interval` batches:

    [2025-10-02 09:14:07 TP0] Decode batch, #running-req: 8, #token: 5120, token usage: 0.04,
    accept len: 3.12, accept rate: 0.53, cuda graph: True, gen throughput (token/s): 1432.71, #queue-req: 0,

(one line; `accept len`/`accept rate` only when speculation is on; older versions write `Decode
batch.`). accept len is accepted drafts + the bonus token per forward over that interval, so it
is already an average: a window's accept length is the mean of its lines' (each interval is the
same number of batches). The gauges (python/sglang/srt/metrics/collector.py:
sglang:spec_accept_length, sglang:spec_accept_rate, sglang:gen_throughput, sglang:num_running_reqs,
sglang:num_queue_reqs, sglang:token_usage) hold the last interval's value: shown as the latest
value with its age, never as a window.

Hostile input: a line longer than MAX_LINE_CHARS is not read, its fields are found by str.find
and split (linear), at most MAX_FIELDS of them, numbers longer than MAX_NUMBER_CHARS are refused;
windows kept are at most MAX_WINDOWS (the oldest go first); /get_server_info is read within the
caller's budget (scrape.get) and at most MAX_INFO_BYTES.
"""

import calendar
import collections
import json
import math
import os
import re
import time

from ..core.feed_source import SourceError

MAX_LINE_CHARS = 8192  # a decode line is ~250 characters
MAX_FIELDS = 32
MAX_NUMBER_CHARS = 32
MAX_WINDOWS = 720  # an hour of 5-second windows
MAX_INFO_BYTES = 1 << 20
INFO_PATHS = ("/get_server_info", "/server_info")  # the older name first: newer servers keep both
_PREFIX = re.compile(r"\[(?P<time>\d{4}-\d\d-\d\d \d\d:\d\d:\d\d)(?P<rank>[^\]]{0,40})\] ")
FIELDS = {
    "#running-req": ("running", int), "#token": ("tokens", int), "token usage": ("kv_cache_usage", float),
    "accept len": ("accept_length", float), "accept rate": ("accept_rate", float),
    "gen throughput (token/s)": ("generation_tps", float), "#queue-req": ("waiting", int),
    "cuda graph": ("cuda_graph", None), "cpu graph": ("cuda_graph", None),
}
SETTINGS = ("speculative_algorithm", "speculative_draft_model_path", "speculative_num_steps",
            "speculative_eagle_topk", "speculative_num_draft_tokens")


def parse_decode_line(line):
    """{time (seconds since the epoch, UTC as written, else None), rank, running, tokens,
    kv_cache_usage, accept_length, accept_rate, generation_tps, waiting, cuda_graph} of one decode
    line, or None for any other line (a decode line without speculation has no accept_length)."""
    if len(line) > MAX_LINE_CHARS:
        return None
    at = line.find("Decode batch")
    if at < 0:
        return None
    rest = line[at + len("Decode batch"):]
    if rest[:1] not in (",", ".", " "):
        return None
    figures = {"time": None, "rank": None}
    prefix = _PREFIX.match(line) if at > 0 else None
    if prefix:
        figures["time"] = float(calendar.timegm(time.strptime(prefix.group("time"), "%Y-%m-%d %H:%M:%S")))
        figures["rank"] = prefix.group("rank").strip() or None
    for part in rest.lstrip(",. ").split(", ", MAX_FIELDS)[:MAX_FIELDS]:
        key, _, value = part.partition(": ")
        field = FIELDS.get(key.strip())
        if field is None:
            continue
        name, kind = field
        value = value.strip().rstrip(",").strip()
        if kind is None:
            figures[name] = value == "True"
        elif len(value) <= MAX_NUMBER_CHARS:
            try:
                number = kind(value)
            except ValueError:
                continue
            if math.isfinite(number):
                figures[name] = number
    return figures if "generation_tps" in figures or "accept_length" in figures else None


class Windows:
    """Decode lines fed one at a time, gathered into windows of `window_s` seconds by their own
    time (a line without one counts at `clock()` when fed). `windows()`: oldest first, each
    {start, end, lines, accept_length, accept_rate, generation_tps (means over its lines; None
    when no line had it), running, waiting, kv_cache_usage (its last line's)}."""

    def __init__(self, window_s=5.0, clock=time.time):
        self.window_s = window_s
        self.clock = clock
        self._windows = collections.OrderedDict()  # start -> running sums

    def feed(self, line):
        figures = parse_decode_line(line)
        if figures is None:
            return False
        moment = figures["time"] if figures["time"] is not None else self.clock()
        start = math.floor(moment / self.window_s) * self.window_s
        window = self._windows.get(start)
        if window is None:
            window = self._windows[start] = {"lines": 0, "sums": {}, "counts": {}, "last": {}}
            while len(self._windows) > MAX_WINDOWS:
                self._windows.popitem(last=False)
        window["lines"] += 1
        for name in ("accept_length", "accept_rate", "generation_tps"):
            if name in figures:
                window["sums"][name] = window["sums"].get(name, 0.0) + figures[name]
                window["counts"][name] = window["counts"].get(name, 0) + 1
        for name in ("running", "waiting", "kv_cache_usage"):
            if name in figures:
                window["last"][name] = figures[name]
        return True

    def windows(self):
        out = []
        for start in sorted(self._windows):
            window = self._windows[start]
            entry = {"start": start, "end": start + self.window_s, "lines": window["lines"]}
            for name in ("accept_length", "accept_rate", "generation_tps"):
                count = window["counts"].get(name)
                entry[name] = window["sums"][name] / count if count else None
            for name in ("running", "waiting", "kv_cache_usage"):
                entry[name] = window["last"].get(name)
            out.append(entry)
        return out


def latest_gauges(snapshot, now=None):
    """SGLang's gauges (a metrics.parse snapshot) as the latest values: {accept_length,
    accept_rate, generation_tps, running, waiting, kv_cache_usage, age_s}, each None when absent."""
    now = time.time() if now is None else now
    gauges = snapshot.get("gauges", {})
    out = {name: gauges.get(name) for name in ("accept_length", "accept_rate", "generation_tps", "running", "waiting", "kv_cache_usage")}
    out["age_s"] = max(0.0, now - snapshot["time"]) if snapshot.get("time") is not None else None
    return out


def speculative_settings(info):
    """The active speculative settings in a /get_server_info reply (a dict): {algorithm,
    draft_model_path, num_steps, eagle_topk, num_draft_tokens, avg_accept_length (the server's
    lifetime average, from internal_states[0]), version}; algorithm None when speculation is off."""
    if not isinstance(info, dict):
        raise SourceError("server info is not a JSON object")
    out = {name[len("speculative_"):]: _plain(info.get(name)) for name in SETTINGS}
    states = info.get("internal_states")
    first = states[0] if isinstance(states, list) and states and isinstance(states[0], dict) else {}
    average = first.get("avg_spec_accept_length")
    out["avg_accept_length"] = average if isinstance(average, (int, float)) and not isinstance(average, bool) else None
    out["version"] = _plain(info.get("version"))
    return out


def _plain(value):
    """A setting's value if it is a short string or a number, else None (text from a host)."""
    if isinstance(value, bool) or value is None:
        return value
    if isinstance(value, (int, float)):
        return value
    if isinstance(value, str) and len(value) <= 4096:
        return value
    return None


def read_server_info(base_url, budget, get):
    """speculative_settings of the server at base_url: /get_server_info, else /server_info, each
    read by `get(url, budget)` (scrape.get's form). A SourceError says why neither answered."""
    errors = []
    for path in INFO_PATHS:
        try:
            body = get(base_url.rstrip("/") + path, budget)
        except SourceError as exc:
            errors.append(str(exc))
            continue
        if len(body) > MAX_INFO_BYTES:
            raise SourceError("%s%s: %d bytes, more than server info is" % (base_url, path, len(body)))
        try:
            return speculative_settings(json.loads(body))
        except (ValueError, RecursionError) as exc:
            raise SourceError("%s%s: not JSON (%s)" % (base_url, path, exc))
    raise SourceError("; ".join(errors))


class LogWindows:
    """A server's log followed from where it was last read (at most MAX_TAIL_BYTES a read, the
    newest whole lines when more was written; a log that shrank is read again from its start),
    its decode lines fed into Windows. `fed_at`: when a decode line last came (this clock, not the log's)."""

    MAX_TAIL_BYTES = 65536

    def __init__(self, path, window_s=5.0):
        self.path = path
        self.windows = Windows(window_s)
        self.offset = None
        self.partial = b""
        self.fed_at = None
        self.newest_line_time = None

    def read(self):
        try:
            with open(self.path, "rb") as f:
                size = os.fstat(f.fileno()).st_size
                if self.offset is None or size < self.offset or size - self.offset > self.MAX_TAIL_BYTES:
                    # First read, a log that shrank, or a flood: the newest only, from its first whole line.
                    self.offset = max(0, size - self.MAX_TAIL_BYTES) if self.offset is None or size >= self.offset else 0
                    self.partial = b"" if self.offset == 0 else b"\0" * (MAX_LINE_CHARS + 1)
                f.seek(self.offset)
                data = f.read(size - self.offset)
        except OSError:
            return
        self.offset += len(data)
        lines = (self.partial + data).split(b"\n")
        # An unfinished line waits for its end; one already too long is kept too long (refused
        # when it ends) but no longer: memory stays bounded, and its tail is never read as a line.
        self.partial = lines.pop()[: MAX_LINE_CHARS + 1]
        for raw in lines:
            line = raw.decode("utf-8", "replace")
            if self.windows.feed(line):
                self.fed_at = time.time()
                moment = (parse_decode_line(line) or {}).get("time")
                self.newest_line_time = moment if moment is not None else self.fed_at

    def over(self, window_s=None):
        """The figures of the decode lines within `window_s` of the newest one's moment now
        (reckoned on the log's own clock: the time since the newest line came is added to its
        stamp, so a log written in another time zone is windowed right): {accept_length,
        draft_acceptance_rate, generation_tps (means over the lines), lines, window_s, running,
        waiting, kv_cache_usage (the newest window's), windows (at most MAX_WINDOWS_SHOWN),
        log_age_s (since the newest line came)}, or None when no decode line is in the window."""
        if self.fed_at is None:
            return None
        now = time.time()
        log_now = self.newest_line_time + (now - self.fed_at)
        chosen = [w for w in self.windows.windows() if window_s is None or w["end"] > log_now - window_s]
        if not chosen:
            return None
        out = {"lines": sum(w["lines"] for w in chosen), "log_age_s": round(max(0.0, now - self.fed_at), 3)}
        for name, key in (("accept_length", "accept_length"), ("accept_rate", "draft_acceptance_rate"), ("generation_tps", "generation_tps")):
            weighted = [(w[name], w["lines"]) for w in chosen if w[name] is not None]
            out[key] = sum(v * n for v, n in weighted) / sum(n for _, n in weighted) if weighted else None
        out["window_s"] = window_s if window_s is not None else chosen[-1]["end"] - chosen[0]["start"]
        for name in ("running", "waiting", "kv_cache_usage"):
            out[name] = chosen[-1][name]
        out["windows"] = chosen[-MAX_WINDOWS_SHOWN:]
        return out


MAX_WINDOWS_SHOWN = 60


SETTINGS_RETRY_S = 30.0  # /get_server_info asked again this often until it answers


class Server:
    """What the sampler keeps of one SGLang server: its log's windows (when it has a log) and the
    speculative settings its /get_server_info gave (asked at its first read, again every
    SETTINGS_RETRY_S while that fails)."""

    def __init__(self, url, log_path=None):
        self.url = url
        self.log_windows = LogWindows(log_path) if log_path else None
        self.settings = None
        self.settings_error = None
        self._asked = None

    def read(self, budget, get):
        """Its new decode lines, and its settings while they are not known, within what is left
        of this read's budget (`get`: scrape.get): a server slow to say them delays its own next
        figures, no other server's."""
        if self.log_windows is not None:
            self.log_windows.read()
        now = time.monotonic()
        if self.settings is None and (self._asked is None or now - self._asked >= SETTINGS_RETRY_S):
            self._asked = now
            try:
                self.settings, self.settings_error = read_server_info(self.url, budget, get), None
            except SourceError as exc:
                self.settings_error = "its speculative settings could not be read: %s" % exc

    def figures(self, base, snapshot, window_s=None):
        """The server's figures, from `base` (metrics.window's keys, computed from its gauges):
        with decode lines in the window, those lines' windows (`reading: window`, source `log
        windows`); else its gauges, each the latest value (`reading: latest`, source `gauges`,
        `window_s` None). Always `gauges` (latest_gauges, with their age), `engine: sglang` and
        `speculative` (speculative_settings; None until /get_server_info answered, a note says why)."""
        out = dict(base, engine="sglang", speculative=self.settings, gauges=latest_gauges(snapshot))
        windowed = self.log_windows.over(window_s) if self.log_windows is not None else None
        if windowed is not None:
            out.update(windowed, reading="window", source="log windows")
        else:
            out.update(reading="latest", source="gauges", window_s=None)
        if self.settings is None and self.settings_error:
            out["notes"] = list(out.get("notes") or ()) + [self.settings_error]
        return out
