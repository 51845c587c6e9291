"""The channels alerts go to, kept on the host in `notify/channels.json` of the state directory,
a file only its user can read (0600): a channel's URL is a secret (whoever has it can post), so it
is kept there and nowhere else, and every reply and log line shows it masked (`https://ntfy.sh/…`).

A channel: `{id: c1, format: ntfy|slack|discord|json|command, url | argv, on: [category...] or
["all"], quiet: "22:00-07:00" or null, created_at}`. Categories: failed, gpu, speculation,
training, downloads, stalled, slowdown, disks (an alert has one or more; a job whose submission asked to be told when it
ends reaches every channel).
"""

import json
import os
import re
import threading
import time
from urllib.parse import urlsplit

from ..core import paths
from ..core.records import replace_file

FORMATS = ("ntfy", "slack", "discord", "json", "command")
CATEGORIES = ("failed", "gpu", "speculation", "training", "downloads", "stalled", "slowdown", "disks")
FILE_NAME = "channels.json"
QUIET = re.compile(r"^([01]?\d|2[0-3]):([0-5]\d)-([01]?\d|2[0-3]):([0-5]\d)$")


def notify_dir():
    path = os.path.join(paths.state_dir(), "notify")
    os.makedirs(path, mode=0o700, exist_ok=True)
    return path


def mask_url(url):
    """What may be shown of a secret URL: its scheme and host, then an ellipsis."""
    try:
        parts = urlsplit(url)
        host = parts.hostname or "?"
        if parts.port:
            host += ":%d" % parts.port
        return "%s://%s/…" % (parts.scheme or "?", host)
    except ValueError:
        return "…"


def guess_format(url):
    """The format a URL's service speaks, when --format is not given: Slack and Mattermost
    incoming webhooks (`hooks.slack.com`, a `/hooks/` path) take slack, Discord webhooks discord,
    a host named ntfy ntfy; anything else gets the JSON webhook."""
    parts = urlsplit(url)
    host, path = (parts.hostname or "").lower(), parts.path
    if host.endswith("slack.com") or "/hooks/" in path:
        return "slack"
    if host.endswith(("discord.com", "discordapp.com")) and "/webhooks/" in path:
        return "discord"
    if "ntfy" in host:
        return "ntfy"
    return "json"


def check_url(url):
    """ValueError (never naming the URL: the message may be logged) unless it is http(s) with a host."""
    try:
        parts = urlsplit(url)
    except ValueError:
        raise ValueError("the channel's URL cannot be read as a URL")
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError("the channel's URL must be http:// or https:// with a host")


def parse_on(on):
    """The categories a channel takes, from a list or `failed,gpu` or `all`."""
    if on is None:
        return ["all"]
    words = on.split(",") if isinstance(on, str) else list(on)
    words = [w.strip().lower() for w in words if isinstance(w, str) and w.strip()]
    if not words or "all" in words:
        return ["all"]
    unknown = [w for w in words if w not in CATEGORIES]
    if unknown:
        raise ValueError("no alert category %s (there are: %s, or all)" % (", ".join(unknown), ", ".join(CATEGORIES)))
    return sorted(set(words), key=CATEGORIES.index)


def parse_quiet(quiet):
    """((start minute, end minute) of the day) from `22:00-07:00`, or None for none."""
    if quiet in (None, "", "off", "none"):
        return None
    match = QUIET.match(quiet.strip())
    if not match:
        raise ValueError("quiet hours are HH:MM-HH:MM, e.g. 22:00-07:00, not %r" % quiet)
    h1, m1, h2, m2 = (int(g) for g in match.groups())
    return h1 * 60 + m1, h2 * 60 + m2


def quiet_until(quiet, now):
    """When the quiet hours that hold at `now` (host's local time) end, or None when not quiet."""
    window = parse_quiet(quiet)
    if window is None:
        return None
    start, end = window
    local = time.localtime(now)
    minute = local.tm_hour * 60 + local.tm_min
    inside = (start <= minute < end) if start <= end else (minute >= start or minute < end)
    if not inside or start == end:
        return None
    left = (end - minute) % (24 * 60)
    return now - local.tm_sec + left * 60


def wants(channel, alert):
    """Whether this channel takes this alert: its categories meet the channel's, or the job's
    submission asked to be told (then every channel does)."""
    if alert.get("watched") or alert.get("kind") == "test":
        return True
    on = channel.get("on") or ["all"]
    return "all" in on or bool(set(on) & set(alert.get("categories") or ()))


def public(channel):
    """A channel as replies show it: the URL masked, never whole."""
    shown = {k: v for k, v in channel.items() if k != "url"}
    if "url" in channel:
        shown["url"] = mask_url(channel["url"])
    return shown


class ChannelStore:
    """channels.json, read at each use (a second daemon, or a hand edit, is seen) and written whole."""

    def __init__(self, directory=None):
        self.directory = directory or notify_dir()
        self.path = os.path.join(self.directory, FILE_NAME)
        self._lock = threading.Lock()

    def list(self):
        try:
            with open(self.path) as f:
                channels = json.load(f).get("channels")
        except (OSError, ValueError, AttributeError):
            return []
        return [c for c in channels or [] if isinstance(c, dict) and isinstance(c.get("id"), str)]

    def get(self, channel_id):
        return next((c for c in self.list() if c["id"] == channel_id), None)

    def add(self, url=None, argv=None, format=None, on=None, quiet=None):
        """A new channel (checked), saved; returns it (with its URL: callers show `public()`)."""
        if (url is None) == (argv is None):
            raise ValueError("a channel is a URL or a command, one of the two")
        channel = {"on": parse_on(on), "quiet": None, "created_at": time.time()}
        if quiet not in (None, ""):
            parse_quiet(quiet)
            channel["quiet"] = quiet.strip()
        if url is not None:
            check_url(url)
            fmt = format or guess_format(url)
            if fmt not in FORMATS or fmt == "command":
                raise ValueError("a URL's format is one of ntfy, slack, discord, json, not %r" % fmt)
            channel.update(format=fmt, url=url)
        else:
            if not argv or not all(isinstance(a, str) and a and "\0" not in a for a in argv):
                raise ValueError("a command channel needs an argv of non-empty strings")
            channel.update(format="command", argv=list(argv))
        with self._lock:
            channels = self.list()
            numbers = [int(c["id"][1:]) for c in channels if c["id"][1:].isdigit()]
            channel["id"] = "c%d" % (max(numbers + [0]) + 1)
            channels.append(channel)
            self._write(channels)
        return channel

    def update(self, channel_id, on=None, quiet=None):
        """Change a channel's categories or quiet hours (`quiet=""` clears them)."""
        with self._lock:
            channels = self.list()
            channel = next((c for c in channels if c["id"] == channel_id), None)
            if channel is None:
                return None
            if on is not None:
                channel["on"] = parse_on(on)
            if quiet is not None:
                parse_quiet(quiet)
                channel["quiet"] = quiet.strip() or None
            self._write(channels)
            return channel

    def remove(self, channel_id):
        with self._lock:
            channels = self.list()
            kept = [c for c in channels if c["id"] != channel_id]
            if len(kept) == len(channels):
                return False
            self._write(kept)
            return True

    def _write(self, channels):
        """Replace the file at once, created 0600 (never readable by anyone else, not even briefly)."""
        replace_file(self.path, json.dumps({"channels": channels}, indent=1), mode=0o600)
