"""The console's alerts on the desktop: every host's alerts as they are raised (with the host's
name in a fleet, counted as unseen on a host not shown), and with several hosts one that stays
unreachable for the console's `unreachable_after_s` (its daemon cannot say it is gone), and its
return. A mixin of the console's App (tui/app.py), which has `links`, `current` and `fleet`."""

from .desktop import alerts_notification, kind_for, sequence


def span_text(seconds):
    """`40 s`, `2 min`, `1 h 05 min`: how long a host has been away."""
    seconds = int(seconds)
    if seconds < 60:
        return "%d s" % seconds
    if seconds < 3600:
        return "%d min" % (seconds // 60)
    return "%d h %02d min" % (seconds // 3600, seconds % 3600 // 60)


class DesktopAlerts:
    """Mixin: `alerts_raised(message)` for a host's HostAlerts, `tell_unreachable()` each second."""

    def alerts_raised(self, message):
        alerts = [a for a in message.alerts if a.get("kind") != "test"]
        if not alerts:
            return
        link = self.link_of(message.host) or self.current
        shown = link is self.current
        hostname = (link.hello or {}).get("hostname") or link.name
        title, body = alerts_notification(alerts, hostname)
        if self.fleet and link.name not in title:
            title = "%s: %s" % (link.name, title)
        if not shown:
            link.unseen_alerts += len(alerts)
        # GPU alerts of the shown host: the GPU pane says them; every other alert is a toast.
        self.desktop(title, body, any(a.get("urgent") for a in alerts),
                     toast=not shown or any("gpu" not in (a.get("categories") or ()) for a in alerts))

    def desktop(self, title, body, urgent, toast=True):
        if getattr(self._driver, "is_web", False):  # in a browser: the page shows it (tui/web)
            self._driver.write_meta({"type": "notify", "title": title, "body": body, "urgent": urgent})
        elif (text := sequence(title, body, kind_for())) and self._driver is not None:
            self._driver.write(text)  # between frames, through the driver's own writer
        if toast:
            self.notify(body, title=title, severity="error" if urgent else "information", timeout=20, markup=False)

    def tell_unreachable(self):
        """A host of several away for unreachable_after_s: told once, on the desktop and in a toast
        (the host's daemon cannot tell it); and once more when it is back."""
        for link in self.links:
            away_s = link.away_for_s()
            if not link.away_alerted and away_s >= self.unreachable_after_s:
                link.away_alerted = True
                error = (link.detail or {}).get("error")
                self.desktop("%s unreachable" % link.name, "%s has not been reachable for %s%s" % (
                    link.name, span_text(away_s), ": %s" % error if error else ""), urgent=True)
            elif link.away_alerted and link.state == "connected":
                link.away_alerted = False
                self.desktop("%s is back" % link.name, "%s is reachable again" % link.name, urgent=False)
