"""The daily digest: the report's text sent as one message, at a time of day (the host's local
clock), through every notification channel. Kept in the state directory's `report/digest.json`
(`{at: "08:00", set_at, last_day, last_sent_at, last_results: {channel: null | why not}}`), so
it survives the daemon's restarts.

The report covers the time since the last digest (at most a week; the first: a day). A digest
due while the daemon was down goes out when it starts, if that is within LATE_S of its time;
each channel gets one bounded try (notify/send.py), its result kept for `notify.list`."""

import os
import re
import time

from ..core.records import read_json, write_json
from ..core.services import Service
from ..notify.channels import ChannelStore
from ..notify.alert import make_alert
from ..notify.send import deliver
from . import build, presence, text

AT_PATTERN = re.compile(r"^([01]?\d|2[0-3]):([0-5]\d)(?::([0-5]\d))?$")
LATE_S = 3600.0
FIRST_WINDOW_S = 86400.0
MAX_WINDOW_S = 7 * 86400.0


def parse_at(at):
    """Seconds after local midnight of `08:00` (or `08:00:30`); ValueError with a sentence otherwise."""
    match = AT_PATTERN.match(str(at).strip())
    if not match:
        raise ValueError("a digest's time is HH:MM on the host's clock (e.g. 08:00), or off, not %r" % (at,))
    hours, mins, secs = (int(g or 0) for g in match.groups())
    return hours * 3600 + mins * 60 + secs


def due_today(at, now):
    """The epoch of today's `at` on the local clock."""
    local = time.localtime(now)
    return time.mktime((local.tm_year, local.tm_mon, local.tm_mday, 0, 0, 0, 0, 0, -1)) + parse_at(at)


class DigestStore:
    def __init__(self):
        self.path = os.path.join(presence.report_dir(), "digest.json")

    def get(self):
        value = read_json(self.path)
        if not isinstance(value, dict) or not isinstance(value.get("at"), str):
            return None
        try:
            parse_at(value["at"])
        except ValueError:
            return None
        return value

    def set(self, at, now):
        parse_at(at)
        entry = {"at": at.strip(), "set_at": now, "last_day": None, "last_sent_at": None, "last_results": {}}
        write_json(self.path, entry)
        return entry

    def remove(self):
        try:
            os.unlink(self.path)
            return True
        except FileNotFoundError:
            return False

    def sent(self, entry, day, now, results):
        write_json(self.path, dict(entry, last_day=day, last_sent_at=now, last_results=results))


def next_at(entry, now):
    """When the digest goes next (s since the epoch)."""
    today = due_today(entry["at"], now)
    if entry.get("last_day") == time.strftime("%Y-%m-%d", time.localtime(now)) or now >= today + LATE_S or today < entry["set_at"]:
        midnight = today - parse_at(entry["at"])
        return due_today(entry["at"], midnight + 86400 + 3600)  # tomorrow's (a day of 23 or 25 hours too)
    return today


def public(entry, now):
    return dict(entry, next_at=next_at(entry, now)) if entry else None


class DigestService(Service):
    name = "digest"
    interval_s = 1.0

    def __init__(self, daemon, clock=time.time):
        self.daemon = daemon
        self.clock = clock
        self.store = DigestStore()
        self.channels = ChannelStore()
        self.sent_count = 0

    def step(self):
        entry = self.store.get()
        now = self.clock()
        if entry is None:
            return
        today = due_today(entry["at"], now)
        day = time.strftime("%Y-%m-%d", time.localtime(now))
        if entry.get("last_day") == day or not today <= now < today + LATE_S or today < entry.get("set_at", 0):
            return
        since = max(entry.get("last_sent_at") or now - FIRST_WINDOW_S, now - MAX_WINDOW_S)
        self.send(entry, day, since, now)

    def send(self, entry, day, since, now):
        host = self.daemon.hello.get("hostname") or "host"
        body = text.render(build.build(self.daemon, since, now))
        alert = make_alert("digest:%s:%s" % (day, entry["at"]), "digest", ["digest"], host, "specdeck report %s" % host, body, now)
        results = {}
        for channel in self.channels.list():
            results[channel["id"]] = deliver(channel, [alert], host)
        self.store.sent(entry, day, now, results)
        self.sent_count += 1

    def detail(self):
        entry = self.store.get()
        return {"at": entry["at"] if entry else None, "sent": self.sent_count}
