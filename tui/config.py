"""What the console remembers per host, in ~/.config/specdeck/config.toml ($XDG_CONFIG_HOME
honoured), so that an interpreter is typed once:

    [hosts."me@gpu01"]
    agent_python = "/usr/bin/python3"           # runs the agent (standard library only)
    ml_python = "/home/me/venv/bin/python"      # has huggingface_hub, torch, ...: runs downloads
    download_dir = "/data/models"
    checkpoint_dir = "/data/checkpoints"

    [hosts."me@gpu01".alerts]                   # kept as written, for later

A host is named as the user types it (`me@gpu01`, an ~/.ssh/config alias, `local`). Also the
hub token the user has now, from this process's environment.
"""

import os
import re
import sys

from remote.core.records import replace_file

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - older Pythons get tomli from the package's dependencies
    import tomli as tomllib

HOST_KEYS = ("agent_python", "ml_python", "download_dir", "checkpoint_dir")
LOCAL = "local"


class ConfigError(Exception):
    """The config file exists but cannot be read as TOML: one line naming the file."""


def config_path():
    base = os.environ.get("XDG_CONFIG_HOME") or os.path.join(os.path.expanduser("~"), ".config")
    return os.path.join(base, "specdeck", "config.toml")


def host_key(host):
    """The name a host is remembered under: as typed, `local` for this machine."""
    return LOCAL if host in (None, "", LOCAL) else host


def load(path=None):
    path = path or config_path()
    try:
        with open(path, "rb") as f:
            return tomllib.load(f)
    except FileNotFoundError:
        return {}
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise ConfigError("cannot read %s: %s" % (path, exc))


def host_settings(host, path=None):
    """The host's table ({} when none), or {} when the file cannot be read (a broken file must
    not stop a download; `specdeck config` says what is wrong with it)."""
    try:
        hosts = load(path).get("hosts") or {}
    except ConfigError:
        return {}
    settings = hosts.get(host_key(host))
    return settings if isinstance(settings, dict) else {}


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
