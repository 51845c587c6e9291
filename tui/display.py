"""How the console writes things for people, in one place: sizes in both decimal and binary
units, rates, durations, ages, times, tensor shapes, and the colour of each state."""

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
