"""How the console writes things for people, in one place: sizes in both decimal and binary
units, rates, durations, ages, times, tensor shapes, the colour of each state, and a host's text
(names, paths, error lines, logs) with its control characters as visible escapes (safe_text),
and text cut to a width with "…" where it was cut (cut)."""

import functools
import re
import time


def format_bytes(n, exact=False):
    """`2.38 GB (2.22 GiB)`; with exact, `2,382,319,104 bytes (2.38 GB, 2.22 GiB)`.

    Both units are shown because GB and GiB differ by 7% at this size, and notes that
    used one or the other have disagreed over the same file.
    """
    if n is None:
        return "-"
    decimal = _scaled(n, 1000, ("bytes", "kB", "MB", "GB", "TB", "PB"))
    binary = _scaled(n, 1024, ("bytes", "KiB", "MiB", "GiB", "TiB", "PiB"))
    units = [decimal] if n < 1024 else [decimal, binary]  # 1000-1023 bytes: no binary unit yet
    if exact:
        return "{:,} bytes".format(n) if n < 1000 else "{:,} bytes ({})".format(n, ", ".join(units))
    return decimal if len(units) == 1 else "%s (%s)" % (decimal, binary)


def format_decimal_bytes(n):
    """`2.38 GB`: one unit, decimal as the hub shows sizes, for a table's size column."""
    return "-" if n is None else _scaled(n, 1000, ("bytes", "kB", "MB", "GB", "TB", "PB"))


def _scaled(n, base, units):
    value = float(n)
    for unit in units:
        if abs(value) < base or unit == units[-1]:
            return "%d %s" % (n, unit) if unit == units[0] else "%.2f %s" % (value, unit)
        value /= base
    return str(n)


def format_rate(bytes_per_s):
    if not bytes_per_s:
        return "-"
    return "%s/s" % _scaled(bytes_per_s, 1000, ("B", "kB", "MB", "GB", "TB"))


def format_duration(seconds):
    if seconds is None:
        return "-"
    seconds = int(max(0, seconds))
    hours, rest = divmod(seconds, 3600)
    return "%d:%02d:%02d" % (hours, rest // 60, rest % 60)


def format_time(epoch):
    if not epoch:
        return "-"
    local = time.localtime(epoch)
    if time.strftime("%Y-%m-%d", local) == time.strftime("%Y-%m-%d"):
        return time.strftime("%H:%M:%S", local)
    return time.strftime("%Y-%m-%d %H:%M", local)


def format_age(seconds):
    """How long ago, compactly, for chart axes: `now`, `45s`, `10m`, `2h`, `3d`."""
    seconds = abs(seconds)
    if seconds < 1:
        return "now"
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            value = seconds / size
            return ("%d%s" if value >= 10 or value == int(value) else "%.1f%s") % (value, unit)
    return "%ds" % seconds


def format_shape(shape):
    """`[7168, 21504]`; `?` when the shape is unknown."""
    if shape is None:
        return "?"
    return "[" + ", ".join(str(d) for d in shape) + "]"


# The agent's next step when an interpreter lacks huggingface_hub, as the CLI takes it.
_ML_PYTHON_STEP = re.compile(
    r"remember (?P<what>one|it|an interpreter that has it)(?: for this host)? with "
    r"`specdeck config HOST --ml-python (?P<path>\S+)`"
    r"(?: \((?:or pass --host-python once|--host-python PATH for once)\))?"
)


def console_next_step(message, in_download_form=False):
    """An agent's line with the CLI's next step (`specdeck config HOST --ml-python PATH`, flags
    the console has no use for) in console terms: the download form's host python field, whose
    remember box keeps the interpreter for the host."""

    def step(match):
        path = match.group("path")
        what = "one that has it" if match.group("what") == "an interpreter that has it" else (
            "its path" if path == "PATH" else path)
        where = "host python above" if in_download_form else "the host python field of the form n opens"
        return "put %s in %s (remember keeps it for this host)" % (what, where)

    return _ML_PYTHON_STEP.sub(step, message)


# The colour of every state a job (or a download file) can be in, so all panes agree.
STATE_STYLES = {
    "running": "green",
    "starting": "cyan",
    "stopping": "yellow",
    "succeeded": "",
    "verified": "bold green",
    "failed": "bold red",
    "mismatch": "bold red",
    "corrupt": "bold red",
    "lost": "bold red",
    "stopped": "yellow",
    "downloading": "cyan",
    "verifying": "cyan",
    "resolving": "cyan",
    "queued": "dim",
}


# Characters a terminal acts on instead of showing: C0 (newline and tab included), DEL, C1,
# and the bidirectional marks, embeddings, overrides and isolates that reorder what follows.
_BIDI = (0x061C, 0x200E, 0x200F, *range(0x202A, 0x202F), *range(0x2066, 0x206A))
_VISIBLE = {code: "\\x%02x" % code for code in (*range(0x20), *range(0x7F, 0xA0))}
_VISIBLE.update({code: "\\u%04x" % code for code in _BIDI})
_VISIBLE.update({0x09: "\\t", 0x0A: "\\n", 0x0D: "\\r"})
CONTROLS = frozenset(_VISIBLE)  # their code points


def cut(text, width):
    """`text` in at most `width` cells (a wide letter counts two): whole when it fits, else cut
    with "…" as its last cell, so a reader sees that more was there."""
    from rich.cells import cell_len, set_cell_size  # here: headless commands that print no cut text never import rich

    text = text or ""
    if cell_len(text) <= width:
        return text
    if width <= 0:
        return ""
    return set_cell_size(text, width - 1).rstrip(" ") + "…"


def safe_text(text, keep=""):
    """Text from a host or a server as a terminal may show it: every control character (C0,
    DEL, C1, ESC, the bidirectional controls) as a visible escape (`\\x1b`, `\\u202e`, `\\n`),
    so a name can neither drive the terminal nor split a line. Ordinary text, non-ASCII letters
    included, stays as it is. `keep`: characters left alone (the CLI's own newlines)."""
    if text is None:
        return ""
    text = text if isinstance(text, str) else str(text)
    if text.isprintable():  # no Cc, no Cf (the bidirectional controls are Cf): nothing to do
        return text
    return text.translate(_table(keep) if keep else _VISIBLE)


@functools.lru_cache(maxsize=8)
def _table(keep):
    return {code: visible for code, visible in _VISIBLE.items() if chr(code) not in keep}


# A colour or other CSI sequence in a log line: what a terminal would not show as text.
_ANSI = re.compile(r"\x1b\[[0-9;?]*[ -/]*[@-~]")
_CSI_BEGUN = re.compile(r"\x1b(?:\[[0-9;?]*[ -/]*)?")  # one that the text ends before its last byte


def log_text(text):
    """A piece of a job's log as `specdeck logs` writes it: colours (CSI sequences) dropped, its
    own newlines, tabs and the \\r of a progress bar's redraw kept, every other control (a title
    or clipboard sequence, C1, bidi) a visible escape. Returns (shown, held): an escape sequence
    cut at the piece's end is held for the next piece (pass it back in front of it)."""
    held = ""
    cut = text.rfind("\x1b", max(0, len(text) - 64))
    if cut >= 0 and _CSI_BEGUN.fullmatch(text, cut):
        text, held = text[:cut], text[cut:]
    return safe_text(_ANSI.sub("", text) if "\x1b" in text else text, keep="\n\r\t"), held


class LogFeed:
    """Turns a job's log text into whole display lines, in order, each byte range once.

    Used by one thread at a time: the worker that reads the tail, then the client's reader
    thread that delivers the follow stream. A partial last line waits for its newline.
    """

    def __init__(self, next_offset):
        self.next_offset = next_offset
        self.partial = ""

    def lines(self, text, next_offset=None):
        """Whole lines of `text` (None when the range up to next_offset was already seen). The
        unfinished last line waits in `partial`, kept to its last redraw (what follows its last
        \\r), so a progress bar that never ends its line stays one short line."""
        if next_offset is not None:
            if next_offset <= self.next_offset:
                return None
            self.next_offset = next_offset
        parts = (self.partial + text).split("\n")
        self.partial = _last_redraw(parts.pop())
        return self.clean(parts)

    def shown_partial(self):
        """The unfinished last line as a terminal would show it now."""
        return self.clean([self.partial])[0] if self.partial else ""

    def finish(self):
        rest, self.partial = self.partial, ""
        return self.clean([rest]) if rest else []

    @staticmethod
    def clean(lines):
        """What a terminal would show: colours dropped, a bar redrawn with \\r at its last state,
        tabs expanded, and every other control (a title or clipboard sequence, C1, bidi) an escape."""
        if all(line.isprintable() for line in lines):
            return lines
        cleaned = []
        for line in lines:
            line = _ANSI.sub("", line)
            if "\r" in line:
                line = line.rstrip("\r").rsplit("\r", 1)[-1]
            cleaned.append(safe_text(line.expandtabs()))
        return cleaned


def _last_redraw(line):
    """What follows the last \r of an unfinished line (a \r at its very end may be the first
    half of \r\n, so the redraw before it is kept with it)."""
    if "\r" not in line:
        return line
    body, ends_with_cr = (line[:-1], True) if line.endswith("\r") else (line, False)
    return body.rpartition("\r")[2] + ("\r" if ends_with_cr else "")
