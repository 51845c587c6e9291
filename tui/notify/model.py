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
