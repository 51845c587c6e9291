"""Training records out of a training job's log, as it was actually written.

Three forms are read, line by line (feed() one line at a time, take records as they complete):
- speculators: one `key=value, key=value, ...` message per step (`train/loss_0=2.303,
  train/full_acc_0=0.023, ..., global_step=7`) or per validation epoch (`val/..._epoch`), printed
  through rich's logging handler: a time column `[17:03:01]` only when the second changes (blank
  otherwise), the level, the message wrapped over several lines at the console's width, and the
  source (`trainer.py:587`) right-aligned on the first line. A record's lines are joined back
  whatever the width was; numbers come as `0.023`, `1.69e+03`, `8.33e-04`, `nan`.
- SpecForge 0.2: `step N: {'acc_0': ..., 'loss': ..., 'lr': ...}` per logged step and `step N:
  {'eval/avg_loss': ..., 'eval/simulated_acc_len': ...}` per evaluation (specforge_log.py).
- SpecForge before 0.2: `Train Epoch [1/10], position 0,  Acc: 0.52` and `..., pLoss: 2.31` (and `Eval
  Epoch ...`), one line per position, gathered into one record per epoch.
- generic: a JSON object per line, or a line of `key=value` pairs, for anyone's script.
A line that is none of these is left alone (no record comes of it). A SpecForge or generic line
may begin with a logging time stamp (`2025-07-07 13:50:09,939 INFO ...`, `[2025-07-07T13:50:09]`,
what Python's logging and most trainers' loggers print): it is the record's time, and a
SpecForge line is looked for after it and the logger's words (level, name) that follow it.

A hostile log cannot stall or crash the reader: every pattern's quantifiers are bounded (a match
attempt costs a constant, so a line costs time linear in its length, whatever its shape), a
JSON line nested deeper than MAX_DEPTH is refused by a linear pre-scan before json.loads could
recurse, numbers longer than a float's worth of digits are not converted (int('9' * 60000) is
quadratic on the Pythons that have no digit limit), a record keeps at most MAX_KEYS values, and
a rich record whose lines add up to more than MAX_RECORD_CHARS is dropped.

A record: {"kind": "step" | "validation", "source", "step", "epoch", "epochs_total", "loss",
"loss_k": [...], "full_acc": [...], "cond_acc": [...], "acc": [...], "lr", "step_ms",
"tokens_per_s", "time" (from rich's column or a logging stamp, else None), "time_within_s" (the
line was written within [time, time + it): its stamp's precision), "values": {every key read},
"offset" (where its first line starts in the log, when feed() was told)}.
"""

import json
import re
import time as time_module

from . import specforge_log
from .record_values import record_from_values
from .scan import finditer_pieces

LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")
MAX_DEPTH = 64  # JSON nesting refused beyond this (a metrics line is two or three deep)
MAX_KEYS = 1000  # values kept per record (speculators prints ~30)
MAX_RECORD_CHARS = 1 << 20  # a rich record longer than this (over all its lines) is dropped
MAX_NUMBER_CHARS = 64
MAX_JSON_CHARS = 256 << 10  # json.loads is one call holding the GIL: a longer JSON line is not a metrics line
# rich: optional "[time]" column, the level padded to 8, the message, the source on the right.
# Bounded quantifiers, and no two adjacent ones that can trade characters: a failed attempt at
# one position costs a constant, so a scan over any line is linear in its length.
_RICH_FIRST = re.compile(r"^(?P<lead>(?:\[(?P<time>[^\]]{1,40})\])?[ \t]{0,64})(?P<level>DEBUG|INFO|WARNING|ERROR|CRITICAL)(?P<gap>\s+)(?P<rest>.*)$")
_RICH_SOURCE = re.compile(r"[\w.\-]{1,200}\.py:\d{1,9}")
NUMBER = r"[-+]?(?:\d{1,40}(?:\.\d{0,40})?(?:[eE][-+]?\d{1,4})?|\.\d{1,40}(?:[eE][-+]?\d{1,4})?|nan|inf|NaN|Inf)"
_PAIR = re.compile(r"(?:^|(?<=[\s,;|(\[{]))(?P<key>[A-Za-z_][\w./\-]{0,200})=(?P<value>%s)(?=$|[\s,;|)\]}])" % NUMBER)
_SPECFORGE = re.compile(r"(?P<phase>Train|Eval) Epoch \[(?P<epoch>\d{1,9})/(?P<total>\d{1,9})\], position (?P<position>\d{1,4}),[ \t]{1,16}(?P<what>Acc|pLoss): (?P<value>%s)" % NUMBER)
# A logging time stamp opening a line: date, time, an optional fraction (`,939` or `.939123`).
_STAMP = re.compile(r"\[?(?P<date>\d{4}-\d{2}-\d{2})[ T](?P<time>\d{2}:\d{2}:\d{2})(?:[.,](?P<fraction>\d{1,9}))?\]?")
STAMP_PREFIX_CHARS = 120  # how far after a stamp a SpecForge line may begin (the logger's name and level)
_JSON_SPECIAL = re.compile(r'[\[\]{}"\\]')


def number(text):
    try:
        return float(text)
    except ValueError:
        return None


def pairs(text):
    """{key: float} of every `key=number` in the text, in order (the first MAX_KEYS keys)."""
    found = {}
    if "=" not in text:
        return found
    for count, m in enumerate(finditer_pieces(_PAIR, text), 1):
        found[m.group("key")] = float(m.group("value"))
        if count >= MAX_KEYS:
            break
    return found


def source_column(rest):
    """(start of the blank before rich's source column, start of the source) in a record's first
    line, or None: the last word when it looks like `trainer.py:587`. Found by splitting at the
    last blank rather than by a search, which costs quadratic time on a line of blanks."""
    stripped = rest.rstrip()
    cut = max(stripped.rfind(" "), stripped.rfind("\t"))
    if cut < 0 or not _RICH_SOURCE.fullmatch(stripped, cut + 1):
        return None
    return len(stripped[:cut].rstrip()), cut + 1


def json_depth_ok(text, limit=MAX_DEPTH):
    """Whether JSON text nests no deeper than `limit`: one linear pass over its brackets, quotes
    and backslashes (brackets inside strings do not count), stopping once too deep."""
    if text.count("[") + text.count("{") <= limit:
        return True
    depth, in_string, escaped_at = 0, False, -1
    for match in _JSON_SPECIAL.finditer(text):
        char, at = match.group(), match.start()
        if in_string:
            if at == escaped_at:
                continue  # the character a backslash escapes
            if char == "\\":
                escaped_at = at + 1
            elif char == '"':
                in_string = False
        elif char == '"':
            in_string = True
        elif char in "[{":
            depth += 1
            if depth > limit:
                return False
        elif char in "]}":
            depth -= 1
    return True


def _bounded_number(text):
    """json's parse_int/parse_float: a float, or None for a number too long to be a metric."""
    return float(text) if len(text) <= MAX_NUMBER_CHARS else None


class Assembler:
    """Feed lines, take records. Holds at most one unfinished rich record (its lines so far) and
    one unfinished SpecForge epoch; `flush()` ends them (the job ended)."""

    def __init__(self, clock=time_module.time):
        self.clock = clock
        self._rich = None  # {"column": message column, "parts": [...], "time": str|None}
        self._last_time_text = None
        self._specforge = None  # {"key": (phase, epoch), "values": {...}}
        self._out = []

    # -- rich

    def _start_rich(self, match, at):
        rest = match.group("rest")
        column = len(match.group("lead")) + len(match.group("level")) + len(match.group("gap"))
        source = source_column(rest)
        # The message column's width: up to the gap before the source column. A part that
        # fills it was folded mid-token (a token longer than the column) and joins without a space.
        width = None
        if source:
            width = source[1] - 1
            rest = rest[: source[0]]
        time_text = match.group("time")
        if time_text:
            self._last_time_text = time_text
        self._rich = {"column": column, "parts": [rest.rstrip()], "time": self._last_time_text, "width": width,
                      "chars": len(rest), "at": at}

    def _continues_rich(self, line):
        rich = self._rich
        if rich is None:
            return False
        column = rich["column"]
        if len(line) > column and not line.strip():
            return True  # rich pads every row to the width, an empty one too (a wrap left nothing on it)
        if len(line) <= column or line[:column].strip() or line[column] == " ":
            return False
        return True

    def _end_rich(self):
        rich, self._rich = self._rich, None
        if rich is None or rich["chars"] > MAX_RECORD_CHARS:
            return
        text, width = "", rich["width"]
        previous = None
        for part in rich["parts"]:
            if not part:
                continue
            if previous is not None and not (width and len(previous) >= width):
                text += " "  # rich broke the line at a space, which it dropped
            text += part
            previous = part
        values = pairs(text)
        if values:
            record = record_from_values(values, "speculators" if any("/" in k for k in values) else "generic",
                                        time=self._resolve_time(rich["time"]))
            if record is not None:
                record["time_within_s"] = 1.0 if record["time"] is not None else None  # rich prints whole seconds
                record["offset"] = rich["at"]
                self._out.append(record)

    def _resolve_time(self, text):
        """rich's `[%X]` column as seconds since the epoch: the last such moment at or before now."""
        if not text:
            return None
        for pattern in ("%H:%M:%S", "%I:%M:%S %p", "%x %X", "%m/%d/%y %H:%M:%S"):
            try:
                parsed = time_module.strptime(text.strip(), pattern)
            except ValueError:
                continue
            now = self.clock()
            if pattern.startswith("%x") or pattern.startswith("%m"):
                return time_module.mktime(parsed)
            local = time_module.localtime(now)
            moment = time_module.mktime((local.tm_year, local.tm_mon, local.tm_mday, parsed.tm_hour, parsed.tm_min,
                                         parsed.tm_sec, 0, 0, -1))
            if moment > now + 60:
                moment -= 86400  # written before midnight, read after
            return moment
        return None

    # -- SpecForge

    def _specforge_line(self, match, at):
        key = (match.group("phase"), int(match.group("epoch")))
        if self._specforge is not None and self._specforge["key"] != key:
            self._end_specforge()
        if self._specforge is None:
            self._specforge = {"key": key, "total": int(match.group("total")), "acc": {}, "ploss": {}, "at": at}
        target = self._specforge["acc" if match.group("what") == "Acc" else "ploss"]
        target[int(match.group("position"))] = float(match.group("value"))

    def _end_specforge(self):
        pending, self._specforge = self._specforge, None
        if pending is None:
            return
        (phase, epoch), acc, ploss = pending["key"], pending["acc"], pending["ploss"]
        values = {}
        prefix = "train/" if phase == "Train" else "eval/"
        for i, v in sorted(acc.items()):
            values["%sacc_%d" % (prefix, i)] = v
        for i, v in sorted(ploss.items()):
            values["%sploss_%d" % (prefix, i)] = v
        loss_k = [ploss[i] for i in sorted(ploss)]
        self._out.append({
            "kind": "step" if phase == "Train" else "validation", "source": "specforge", "step": None,
            "epoch": epoch - 1, "epochs_total": pending["total"], "loss": sum(loss_k) if loss_k else None,
            "loss_k": loss_k, "full_acc": [], "cond_acc": [], "acc": [acc[i] for i in sorted(acc)], "lr": None,
            "step_ms": None, "tokens_per_s": None, "time": None, "values": values, "epoch_summary": True, "offset": pending["at"],
        })

    # -- lines

    def feed(self, line, at=None):
        """One line of the log (without its newline); `at`: where it starts in the log, which a
        record gets as its `offset` when this is its first line."""
        line = line.rstrip("\n")
        if self._continues_rich(line):
            # The source column is printed on a record's first line only.
            part = line[self._rich["column"]:].rstrip()
            self._rich["chars"] += len(part)
            if self._rich["chars"] <= MAX_RECORD_CHARS:
                self._rich["parts"].append(part)
            return
        self._end_rich()
        rich = _RICH_FIRST.match(line)
        if rich:
            if self._specforge is not None:
                self._end_specforge()
            self._start_rich(rich, at)
            return
        specforge = next(finditer_pieces(_SPECFORGE, line), None) if "Epoch [" in line else None
        if specforge:
            self._specforge_line(specforge, at)
            return
        self._end_specforge()
        stamp = _STAMP.match(line) if line[:1] in "[0123456789" else None
        stamped_at = within = None
        if stamp is not None:
            stamped_at, within = stamp_time(stamp)
            line = line[stamp.end():]
            begins = line.find("step ", 0, STAMP_PREFIX_CHARS)
            record = specforge_record(line[begins:]) if begins >= 0 else None
        else:
            record = specforge_record(line) if line.startswith("step ") else None
        if record is None:
            record = generic_record(line)
        if record is not None:
            record["offset"] = at
            if stamped_at is not None:
                record["time"], record["time_within_s"] = stamped_at, within
            self._out.append(record)

    def flush(self):
        self._end_rich()
        self._end_specforge()

    def pending(self):
        """Whether a record is still open (more of its lines may follow)."""
        return self._rich is not None or self._specforge is not None

    def open_at(self):
        """Where the oldest record still open starts in the log (None: none is open)."""
        starts = [part["at"] for part in (self._rich, self._specforge) if part is not None and part["at"] is not None]
        return min(starts) if starts else None

    def take(self):
        out, self._out = self._out, []
        return out


def stamp_time(match):
    """(seconds since the epoch, precision in seconds) of a logging stamp (_STAMP's match) on the
    local clock, or (None, None) for a date that is none."""
    try:
        parsed = time_module.strptime(match.group("date") + " " + match.group("time"), "%Y-%m-%d %H:%M:%S")
    except ValueError:
        return None, None
    fraction = match.group("fraction")
    moment = time_module.mktime(parsed)
    if not fraction:
        return moment, 1.0
    return moment + int(fraction) / 10.0 ** len(fraction), 10.0 ** -len(fraction)


def specforge_record(line):
    """A record from SpecForge's `step N: {...}` line (specforge_log.py), or None."""
    found = specforge_log.values_of(line)
    return specforge_log.record(*found) if found else None


def generic_record(line):
    """A record from a JSON object line or a line of key=value pairs; None for any other line."""
    stripped = line.strip()
    if stripped.startswith("{") and stripped.endswith("}"):
        if len(stripped) > MAX_JSON_CHARS or not json_depth_ok(stripped):
            return None
        try:
            value = json.loads(stripped, parse_int=_bounded_number, parse_float=_bounded_number)
        except (ValueError, RecursionError):
            return None
        if not isinstance(value, dict):
            return None
        flat = {}
        _flatten(value, "", flat)
        return record_from_values(flat, "generic")
    values = pairs(stripped)
    if len(values) < 2:
        return None
    return record_from_values(values, "speculators" if any(k.startswith(("train/", "val/")) for k in values) else "generic")


def _flatten(value, prefix, out):
    for key, item in value.items():
        if len(out) >= MAX_KEYS:
            return
        name = prefix + str(key)
        if isinstance(item, dict):
            _flatten(item, name + "/", out)
        elif isinstance(item, bool):
            continue
        elif isinstance(item, float):
            out[name] = item
        elif isinstance(item, str) and len(item) < 16 and item.strip().lower() in ("nan", "inf", "-inf"):
            out[name] = float(item)


def parse_text(text):
    """Every record in a whole log text (tests, and reading a log from the start)."""
    assembler = Assembler()
    for line in split_lines(text):
        assembler.feed(line)
    assembler.flush()
    return assembler.take()


def split_lines(text):
    """Lines split at \\n, \\r\\n and a lone \\r (progress bars redraw with \\r)."""
    return re.split(r"\r\n|\r|\n", text)
