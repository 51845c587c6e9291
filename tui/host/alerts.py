"""The host's alerts as the console holds them: AlertRecords, newest first, bounded. They come
from the one `notify.list` asked when the console starts following a client (the alerts raised
before it) and from `notify.follow` after; the two overlap after a reconnect, so an alert is
kept once, by its id. Views (the Notifications screen) read them here instead of asking."""

from collections import OrderedDict

from .records import AlertRecord

LIMIT = 200  # the newest alerts kept; notify.list answers with fewer


class AlertLog:
    def __init__(self, limit=LIMIT):
        self.limit = limit
        self._records = OrderedDict()  # id -> AlertRecord, oldest first by the host's time
        self.version = 0  # grows with every alert taken: a view redraws when it moved

    def take(self, alerts, host=""):
        """Keep each alert once; return the records that were new."""
        new = []
        for alert in alerts:
            if not isinstance(alert, dict) or not isinstance(alert.get("time"), (int, float)):
                continue
            key = alert.get("id") or (alert["time"], alert.get("kind"), alert.get("message"))
            if key in self._records:
                continue
            record = self._records[key] = AlertRecord(alert, host)
            new.append(record)
        if new:
            ordered = sorted(self._records.items(), key=lambda item: item[1].time)[-self.limit:]
            self._records = OrderedDict(ordered)
            self.version += 1
        return new

    def newest(self, count=None):
        """The newest alerts first, at most `count`."""
        records = list(reversed(self._records.values()))
        return records if count is None else records[:count]

    def __len__(self):
        return len(self._records)
