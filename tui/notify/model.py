"""How a notification channel reads, the same in the notifications screen and in `specdeck
notify`: the channel in one line (its id, format, where it sends, the alerts it takes, its quiet
hours) and how it is doing (sent, failing and why, what waits)."""

from .. import display

# The colour of each state a channel can be in (remote/notify/queue.py).
STATE_STYLES = {"ok": "green", "failing": "bold red", "retrying": "yellow", "new": "dim"}
RETRYING_STATES = ("failing", "retrying")


def channel_figures(channel):
    """{key: text} of one channel: its id, format, where it sends (a URL, masked by the host, or a
    command line), the alerts it takes and its quiet hours (`-`: none)."""
    shown = {
        "id": channel["id"],
        "format": channel["format"],
        "where": channel.get("url") or " ".join(channel.get("argv") or []),
        "on": ",".join(channel.get("on") or ["all"]),
        "quiet": channel.get("quiet") or "-",
    }
    return {key: display.safe_text(value) for key, value in shown.items()}  # the host's text: one line, no controls


def channel_line(channel):
    """`c1  ntfy     https://ntfy.sh/…  on all  quiet 22:00-07:00`."""
    shown = channel_figures(channel)
    line = "%(id)s  %(format)-7s  %(where)s  on %(on)s" % shown
    return line if shown["quiet"] == "-" else line + "  quiet %s" % shown["quiet"]


def status_text(status):
    """How a channel is doing, in a few words: `ok, last sent 02:10`, `failing: HTTP 500 (6 in a
    row, next try 03:40), 12 waiting`."""
    state = status.get("state")
    if state in RETRYING_STATES:
        text = "%s: %s (%d in a row" % (state, status.get("last_error") or "?", status.get("failures") or 0)
        if status.get("next_try_at"):
            text += ", next try %s" % display.format_time(status["next_try_at"])
        text += ")"
    elif state == "ok":
        text = "ok, last sent %s" % display.format_time(status["last_ok_at"])
    else:
        text = "nothing sent yet"
    if state == "ok" and status.get("last_error_at") and status["last_error_at"] > (status.get("last_ok_at") or 0):
        text += "; last error %s" % status["last_error"]
    if status.get("pending"):
        text += ", %d waiting" % status["pending"]
    if status.get("expired"):
        text += ", %d given up" % status["expired"]
    return display.safe_text(text)  # an error is a receiver's reason phrase: its controls as escapes


def format_channels(channels):
    """Each channel's line, and under it how it is doing."""
    return "\n".join("%s\n    %s" % (channel_line(c), status_text(c.get("status") or {})) for c in channels)


def every_text(seconds):
    """`5 s`, `30 s`, `5 min`, `1 h 30 min`: a heartbeat's period."""
    seconds = int(round(seconds or 0))
    if seconds < 60 or seconds % 60:
        return "%d s" % seconds
    if seconds < 3600:
        return "%d min" % (seconds // 60)
    return "%d h" % (seconds // 3600) + (" %d min" % (seconds % 3600 // 60) if seconds % 3600 else "")


def heartbeat_line(heartbeat):
    """`h1  heartbeat  https://hc-ping.com/…  every 5 min`."""
    line = "%s  heartbeat  %s  every %s" % (display.safe_text(heartbeat["id"]), display.safe_text(heartbeat.get("url") or "?"),
                                            every_text(heartbeat.get("every_s")))
    return line + ("  (healthchecks: /fail while a failure or stall is open)" if heartbeat.get("healthchecks") else "")


def held_text(held_by):
    """What holds a heartbeat on /fail: `held there by: verification failed on gpu1 (j3)`."""
    if not held_by:
        return "a failure or stall is open"
    named = []
    for alert in held_by:
        title = alert.get("title") or alert.get("id") or "?"
        job_id = alert.get("job_id")
        named.append(title if not job_id or job_id in title.split() else "%s (%s)" % (title, job_id))
    return "held there by: " + "; ".join(named)


def heartbeat_status(heartbeat):
    """`last ping 02:10 ok, next 02:15`, `last ping 02:10 failed: HTTP 404 (3 of 40), next 02:15`, or
    `last ping 02:10 ok, sent to /fail (held there by: j3 failed on gpu1), next 02:15`."""
    if not heartbeat.get("last_at"):
        text = "no ping yet"
    else:
        text = "last ping %s " % display.format_time(heartbeat["last_at"])
        result = "ok, sent to /fail" if heartbeat.get("last_fail") else "ok"
        if heartbeat.get("last_error"):
            result = "failed: %s" % heartbeat["last_error"] + (", sent to /fail" if heartbeat.get("last_fail") else "")
        text += result
        if heartbeat.get("last_fail"):
            text += " (%s)" % held_text(heartbeat.get("held_by"))
        if heartbeat.get("failures"):
            text += " (%d of %d failed)" % (heartbeat["failures"], heartbeat.get("pings") or 0)
    if heartbeat.get("next_at"):
        text += ", next %s" % display.format_time(heartbeat["next_at"])
    return display.safe_text(text)


def format_heartbeats(heartbeats):
    return "\n".join("%s\n    %s" % (heartbeat_line(h), heartbeat_status(h)) for h in heartbeats)
