"""The daily digest: the report's text sent as one message, at a time of day (the host's local
clock), through every notification channel. Kept in the state directory's `report/digest.json`
(`{at: "08:00", set_at, last_day, last_sent_at, last_results: {channel: null | why not},
last_delivered_at, tries, retry_at}`), so it survives the daemon's restarts.

The report covers the time since the last digest a channel took (at most a week; the first: a
day). A digest due while the daemon was down goes out when it starts, if that is within LATE_S
of its time; each channel gets one bounded try (notify/send.py), its result kept for
`notify.list`. When every channel refused it, the day's digest is tried again after RETRY_S
(1 min, 2, 5, 10, 15, 30, then hourly) until one takes it or the day ends: `tries` counts the
day's tries and `retry_at` says when the next goes (null: none today)."""

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
RETRY_S = (60.0, 120.0, 300.0, 600.0, 900.0, 1800.0, 3600.0)


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
        entry = {"at": at.strip(), "set_at": now, "last_day": None, "last_sent_at": None, "last_results": {},
                 "last_delivered_at": None, "tries": 0, "retry_at": None}
        write_json(self.path, entry)
        return entry

    def remove(self):
        try:
            os.unlink(self.path)
            return True
        except FileNotFoundError:
            return False

    def sent(self, entry, day, now, results):
        """Keep a try's results; when every channel refused, when the day's next try goes."""
        tries = ((entry.get("tries") or 0) if entry.get("last_day") == day else 0) + 1
        refused = bool(results) and all(error is not None for error in results.values())
        delivered = any(error is None for error in results.values())
        kept = dict(entry, last_day=day, last_sent_at=now, last_results=results, tries=tries,
                    retry_at=retry_at(entry, day, now) if refused else None,
                    last_delivered_at=now if delivered else entry.get("last_delivered_at", entry.get("last_sent_at")))
        write_json(self.path, kept)
        return kept


def tomorrow(at, now):
    """The epoch of tomorrow's `at` on the local clock (a day of 23 or 25 hours too)."""
    return due_today(at, due_today("00:00", now) + 86400 + 3600)


def retry_at(entry, day, now):
    """When today's digest, refused by every channel at `now`, is tried again: None when that
    would be tomorrow (tomorrow's digest covers the time)."""
    tries = (entry.get("tries") or 0) if entry.get("last_day") == day else 0
    after = now + RETRY_S[min(tries, len(RETRY_S) - 1)]
    return after if after < tomorrow("00:00", now) else None


def pending_retry(entry, now):
    """Today's retry time, or None (delivered, given up, or a retry left from another day)."""
    if entry.get("last_day") != time.strftime("%Y-%m-%d", time.localtime(now)):
        return None
    retry = entry.get("retry_at")
    return retry if isinstance(retry, (int, float)) else None


def next_at(entry, now):
    """When the digest goes next (s since the epoch): today's retry if one is due, else its time."""
    retry = pending_retry(entry, now)
    if retry is not None:
        return retry
    today = due_today(entry["at"], now)
    if entry.get("last_day") == time.strftime("%Y-%m-%d", time.localtime(now)) or now >= today + LATE_S or today < entry["set_at"]:
        return tomorrow(entry["at"], now)
    return today


def public(entry, now):
    if not entry:
        return None
    return dict(entry, tries=entry.get("tries") or 0, retry_at=pending_retry(entry, now), next_at=next_at(entry, now))


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
        retry = pending_retry(entry, now)
        if retry is not None:
            if now < retry:
                return
        elif entry.get("last_day") == day or not today <= now < today + LATE_S or today < entry.get("set_at", 0):
            return
        # Since the last digest a channel took: a retry covers the refused try's time too.
        last = entry.get("last_delivered_at") if "last_delivered_at" in entry else entry.get("last_sent_at")
        since = max(last or today - FIRST_WINDOW_S, now - MAX_WINDOW_S)
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
        shown = public(entry, self.clock()) or {}
        return {"at": shown.get("at"), "sent": self.sent_count, "tries": shown.get("tries", 0), "retry_at": shown.get("retry_at")}
