"""What the console remembers per host, in ~/.config/specdeck/config.toml ($XDG_CONFIG_HOME
honoured), so that an interpreter is typed once:

    [hosts."me@gpu01"]
    agent_python = "/usr/bin/python3"           # runs the agent (standard library only)
    ml_python = "/home/me/venv/bin/python"      # has huggingface_hub, torch, ...: runs downloads
    download_dir = "/data/models"
    checkpoint_dir = "/data/checkpoints"
    hub_endpoint = "https://hub.example.org"    # a hub mirror for this host's downloads
    stall_after = "30m"                         # train, run, serve: the stall limit (or "off")
    slowdown = "0.5/10m/1h"                     # train: under half its hour's median for 10 min (or "off")

    [hosts."me@gpu01".alerts]                   # kept as written, for later

    [hosts."me@gpu01".slurm]                    # what --slurm asks of Slurm unless told otherwise
    partition = "gpu"
    account = "proj42"
    time = "4:00:00"
    nodes = 1
    gpus_per_node = 8
    sbatch_args = ["--qos=high"]

    [fleet]
    hosts = ["me@gpu01", "me@gpu02", "trainer"]  # `specdeck` and `specdeck fleet` with no host

    [links]
    keep = "10m"                                # how long a headless command's SSH link stays warm

A host is named as the user types it (`me@gpu01`, an ~/.ssh/config alias, `local`). Also the
hub token the user has now, from this process's environment.

The file is the user's to edit, so reading it never fails with a traceback: anything wrong in
it (not TOML, not UTF-8, a value of the wrong type, a NUL byte, nesting or size no config file
has) is a ConfigError of one line naming the file and the key.
"""

import os
import re
import sys

from remote.core.records import replace_file
from remote.core.windows import parse_duration

from .places import config_path



def toml_reader():
    """The TOML reader, imported when a config file is there to read (10 ms of every command's
    start otherwise)."""
    if sys.version_info >= (3, 11):
        import tomllib
    else:  # pragma: no cover - older Pythons get tomli from the package's dependencies
        import tomli as tomllib
    return tomllib


HOST_KEYS = ("agent_python", "ml_python", "download_dir", "checkpoint_dir", "hub_endpoint", "stall_after", "slowdown")  # strings
HOST_TABLES = ("alerts", "slurm")
# [hosts."x".slurm]: the Slurm options of --slurm (tui/cli/slurm_options.py), by type.
SLURM_KEYS = {"partition": str, "account": str, "time": str, "nodes": int, "gpus_per_node": int, "sbatch_args": list}
DEFAULT_KEEP_S = 600.0  # a warm link's life after its last use, unless [links] keep says otherwise
LOCAL = "local"
MAX_BYTES = 1 << 20
MAX_DEPTH = 16  # tables and lists within each other; ours go 3 deep
# The TOML reader's memory grows with the square of a dotted key's length (10,000 parts take
# 400 MB): a key of more parts than this is refused before the reader sees it.
MAX_KEY_PARTS = 16
_KEY_PART = r"""(?:[A-Za-z0-9_-]+|"(?:[^"\\\n]|\\.)*"|'[^'\n]*')"""
# (Starting only where a word starts keeps the search linear on a long word.)
LONG_DOTTED_KEY = re.compile(r"(?<![A-Za-z0-9_-])(?:%s[ \t]*\.[ \t]*){%d,}" % (_KEY_PART, MAX_KEY_PARTS))


class ConfigError(Exception):
    """The config file exists but cannot be used: one line naming the file (and the key)."""


def shown_path(path):
    """The path as the user knows it: ~/... under the home directory."""
    home = os.path.expanduser("~")
    absolute = os.path.abspath(path)
    if home not in ("", "/") and absolute.startswith(home.rstrip("/") + "/"):
        return "~" + absolute[len(home.rstrip("/")):]
    return absolute


def host_key(host):
    """The name a host is remembered under: as typed, `local` for this machine."""
    return LOCAL if host in (None, "", LOCAL) else host


def load(path=None):
    """The file's tables ({} when there is no file), checked; ConfigError when it cannot be used."""
    path = path or config_path()
    try:
        with open(path, "rb") as f:
            raw = f.read(MAX_BYTES + 1)
    except FileNotFoundError:
        return {}
    except OSError as exc:
        raise ConfigError("%s: cannot read it: %s" % (shown_path(path), exc.strerror or exc))
    data = parse(raw, shown_path(path))
    check(data, shown_path(path))
    return data


def problem(path=None):
    """The one line saying what is wrong with the config file, or None when it is usable (or absent)."""
    try:
        load(path)
    except ConfigError as exc:
        return str(exc)
    return None


def parse(raw, shown):
    """TOML bytes to tables; ConfigError (one line) for what the reader refuses or cannot bear."""
    if len(raw) > MAX_BYTES:
        raise ConfigError("%s: larger than %d KiB, too large for a config file" % (shown, MAX_BYTES >> 10))
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = raw.count(b"\n", 0, exc.start) + 1
        raise ConfigError("%s: not UTF-8 text (byte 0x%02x on line %d)" % (shown, raw[exc.start], line))
    deep = LONG_DOTTED_KEY.search(text)
    if deep:
        line = text.count("\n", 0, deep.start()) + 1
        raise ConfigError("%s: a key of more than %d dotted parts on line %d" % (shown, MAX_KEY_PARTS, line))
    tomllib = toml_reader()
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError("%s: not valid TOML: %s" % (shown, _one_line(exc)))
    except RecursionError:
        raise ConfigError("%s: values nested too deeply" % shown)
    except ValueError as exc:  # what the reader lets through from int() (a 5,000-digit number)
        raise ConfigError("%s: not valid TOML: %s" % (shown, _one_line(exc)))


def _one_line(exc):
    return " ".join(str(exc).split())


def _kind(value):
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, (int, float)):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "a list"
    if isinstance(value, dict):
        return "a table"
    return "a date or time"


def _dotted(keys):
    return ".".join(_key(k) if isinstance(k, str) else "[%d]" % k for k in keys).replace(".[", "[")


def check(data, shown):
    """ConfigError for the first value of the wrong type, string with a NUL byte or nesting deeper
    than MAX_DEPTH; keys we do not know are kept as written."""

    def wrong(keys, what):
        raise ConfigError("%s: %s: %s" % (shown, _dotted(keys), what))

    hosts = data.get("hosts", {})
    if not isinstance(hosts, dict):
        wrong(["hosts"], "expected a table of hosts, got %s" % _kind(hosts))
    for host, table in hosts.items():
        if not isinstance(table, dict):
            wrong(["hosts", host], "expected a table, got %s" % _kind(table))
        for key in HOST_KEYS:
            if key in table and not isinstance(table[key], str):
                wrong(["hosts", host, key], "expected a string, got %s" % _kind(table[key]))
        if isinstance(table.get("stall_after"), str):
            try:
                stall_after_s(table["stall_after"])
            except ValueError as exc:
                wrong(["hosts", host, "stall_after"], str(exc))
        if isinstance(table.get("slowdown"), str):
            try:
                slowdown_limits(table["slowdown"])
            except ValueError as exc:
                wrong(["hosts", host, "slowdown"], str(exc))
        for key in HOST_TABLES:
            if key in table and not isinstance(table[key], dict):
                wrong(["hosts", host, key], "expected a table, got %s" % _kind(table[key]))
        for key, kind in SLURM_KEYS.items():
            value = table.get("slurm", {}).get(key)
            if value is None:
                continue
            keys = ["hosts", host, "slurm", key]
            if kind is int and (not isinstance(value, int) or isinstance(value, bool) or value < 1):
                wrong(keys, "expected a whole number of at least 1, got %s" % (value if isinstance(value, int) and not isinstance(value, bool) else _kind(value)))
            if kind is str and (not isinstance(value, str) or not value.strip()):
                wrong(keys, "expected a non-empty string, got %s" % ("an empty string" if isinstance(value, str) else _kind(value)))
            if kind is list and (not isinstance(value, list) or not all(isinstance(a, str) and a for a in value)):
                wrong(keys, "expected a list of sbatch arguments (strings), got %s" % _kind(value))
    fleet = data.get("fleet", {})
    if not isinstance(fleet, dict):
        wrong(["fleet"], "expected a table, got %s" % _kind(fleet))
    if "hosts" in fleet:
        if not isinstance(fleet["hosts"], list):
            wrong(["fleet", "hosts"], "expected a list of hosts, got %s" % _kind(fleet["hosts"]))
        for index, host in enumerate(fleet["hosts"]):
            if not isinstance(host, str) or not host.strip():
                wrong(["fleet", "hosts", index], "expected a host name, got %s" % (
                    "an empty string" if isinstance(host, str) else _kind(host)))
    links = data.get("links", {})
    if not isinstance(links, dict):
        wrong(["links"], "expected a table, got %s" % _kind(links))
    if "keep" in links:
        from remote.core.windows import parse_duration

        if not isinstance(links["keep"], (str, int, float)) or isinstance(links["keep"], bool):
            wrong(["links", "keep"], "expected a duration such as \"10m\", got %s" % _kind(links["keep"]))
        try:
            parse_duration(links["keep"])
        except ValueError as exc:
            wrong(["links", "keep"], str(exc))
    # Everything, known or not: no NUL (it cannot be in a path or an argument), bounded nesting.
    pending = [([], data)]
    while pending:
        keys, value = pending.pop()
        if len(keys) > MAX_DEPTH:
            wrong(keys, "nested more than %d levels deep" % MAX_DEPTH)
        if isinstance(value, str) and "\0" in value:
            wrong(keys, "contains a NUL byte")
        elif isinstance(value, dict):
            pending += [(keys + [k], v) for k, v in value.items()]
        elif isinstance(value, list):
            pending += [(keys + [i], v) for i, v in enumerate(value)]


def host_settings(host, path=None):
    """The host's table ({} when none), or {} when the file cannot be read (a broken file must
    not stop a download; `specdeck config` says what is wrong with it)."""
    try:
        hosts = load(path).get("hosts") or {}
    except ConfigError:
        return {}
    return hosts.get(host_key(host)) or {}


def fleet_hosts(path=None):
    """The hosts `[fleet] hosts` lists, in order, each once ([] without the table); ConfigError
    when the file cannot be used (the console and `fleet` say so rather than open no host)."""
    hosts = (load(path).get("fleet") or {}).get("hosts") or []
    return list(dict.fromkeys(h.strip() for h in hosts))


def link_keep_s(path=None):
    """Seconds a warm link stays after its last use: `[links] keep`, else DEFAULT_KEEP_S (also
    when the file cannot be read: the keeper must not die of a typo)."""
    from remote.core.windows import parse_duration

    try:
        keep = (load(path).get("links") or {}).get("keep")
        return parse_duration(keep) if keep is not None else DEFAULT_KEEP_S
    except (ConfigError, ValueError):
        return DEFAULT_KEEP_S


def stall_after_s(text):
    """Seconds of a stall limit as `--stall-after` takes it (`30s`, `10m`, `2h`, the durations
    of `gpus --since`), 0 for `off`; ValueError with a sentence otherwise."""
    if text.strip().lower() == "off":
        return 0.0
    try:
        return parse_duration(text)
    except ValueError as exc:
        raise ValueError("%s, or off" % exc)


def slowdown_limits(text):
    """`{fraction, for_s?, median_s?}` of `FRACTION/DURATION/SPAN` as `--slowdown` takes it
    (`0.5/10m/1h`; the later parts may be left out), `{fraction: 0}` for `off`; ValueError with a
    sentence otherwise."""
    if text.strip().lower() == "off":
        return {"fraction": 0.0}
    parts = text.strip().split("/")
    if len(parts) > 3:
        raise ValueError("give FRACTION/DURATION/SPAN (e.g. 0.5/10m/1h), or off")
    try:
        fraction = float(parts[0])
    except ValueError:
        raise ValueError("the fraction is a number from 0 to 1 (e.g. 0.5/10m/1h), not %r" % parts[0])
    if not 0 <= fraction <= 1:
        raise ValueError("the fraction is a number from 0 to 1 (e.g. 0.5/10m/1h), not %r" % parts[0])
    limits = {"fraction": fraction}
    for name, part in zip(("for_s", "median_s"), parts[1:]):
        limits[name] = parse_duration(part)
    if limits.get("median_s") == 0:
        raise ValueError("the span of the median is at least 1 s")
    return limits


def remembered(host, key, path=None):
    value = host_settings(host, path).get(key)
    return value if isinstance(value, str) and value else None


def remember(host, values, path=None):
    """Set (or, with None, remove) keys of the host's table; returns the table as written."""
    path = path or config_path()
    data = load(path)
    hosts = data.setdefault("hosts", {})
    table = hosts.setdefault(host_key(host), {})
    for key, value in values.items():
        if value is None:
            table.pop(key, None)
        else:
            table[key] = value
    save(data, path)
    return table


def save(data, path=None):
    """Write atomically, 0600 (a file of the user's, like ~/.ssh/config)."""
    path = path or config_path()
    directory = os.path.dirname(path)
    os.makedirs(directory, mode=0o700, exist_ok=True)
    replace_file(path, dumps(data), mode=0o600)  # it may name hosts and paths: the user's alone


# ---------------------------------------------------------------- a TOML writer for our tables


BARE_KEY = re.compile(r"[A-Za-z0-9_-]+\Z")


def _key(name):
    return name if BARE_KEY.match(name) else _string(name)


def _string(text):
    escaped = []
    for char in text:
        if char in '"\\':
            escaped.append("\\" + char)
        elif char == "\n":
            escaped.append("\\n")
        elif char == "\t":
            escaped.append("\\t")
        elif ord(char) < 0x20 or ord(char) == 0x7F:
            escaped.append("\\u%04x" % ord(char))
        else:
            escaped.append(char)
    return '"%s"' % "".join(escaped)


def _value(value):
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value)
    if isinstance(value, str):
        return _string(value)
    if isinstance(value, (list, tuple)):
        return "[%s]" % ", ".join(_value(v) for v in value)
    raise TypeError("cannot write %r to TOML" % (value,))


def dumps(data, prefix=()):
    """TOML for nested tables of strings, numbers, booleans and lists of them (what we store)."""
    scalars = [(k, v) for k, v in data.items() if not isinstance(v, dict)]
    tables = [(k, v) for k, v in data.items() if isinstance(v, dict)]
    lines = []
    if prefix and (scalars or not tables):
        lines.append("[%s]" % ".".join(_key(k) for k in prefix))
    lines += ["%s = %s" % (_key(k), _value(v)) for k, v in scalars]
    out = "\n".join(lines) + ("\n" if lines else "")
    for name, table in tables:
        part = dumps(table, prefix + (name,))
        out += ("\n" if out and part else "") + part
    return out


def name_host(message, host):
    """The agent's hint `specdeck config HOST ...` with the host named as the user names it."""
    return message.replace("specdeck config HOST ", "specdeck config %s " % host_key(host))


# ---------------------------------------------------------------- the hub token


def hub_token():
    """The hub token the user has now in this process's environment, or None (then the host's
    own login, as huggingface_hub finds it there, is used)."""
    for name in ("HF_TOKEN", "HUGGING_FACE_HUB_TOKEN"):
        value = (os.environ.get(name) or "").strip()
        if value:
            return value
    return None
