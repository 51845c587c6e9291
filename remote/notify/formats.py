"""What a channel is sent: one alert, or a digest of several, in the form its service documents.

The alert object (the JSON webhook's `alerts` items, a command's stdin):
`{id, kind, categories: [word], urgent, watched, host, job_id, job_name, title, message, time,
time_text, log_tail: [line]}`. `id` is the alert's key: the same alert always has the same id,
so a receiver drops a repeat (a try that reached it but whose answer was lost is sent again).
`kind`: job_failed, job_lost, job_finished, server_died, verify_failed, gpu_idle, memory_full,
temperature, throttle, below_break_even, acceptance_regression, acceptance_recovered, under_predicted,
training_nan, training_flat, test. `time` is when it happened (s since the epoch), `time_text`
the host's local clock. A below_break_even alert adds `server` and `break_even`
(`{accept_length, source, how}`: the line it fell under); an acceptance_regression adds
`server`, `accept_length` (the live figure) and `baseline` (`{accept_length, margin, for_s,
saved_at}`), its acceptance_recovered follow-up (id: the regression's + `:resumed`) `server`
and `accept_length`; an under_predicted `server`, `accept_length` (the live figure) and `predicted`
(`{accept_length, path, k, margin, for_s}`: what the served drafter's profile predicts).

Per format:
- ntfy: POST the text to the topic URL; headers `Title`, `Priority` (urgent: high, else default),
  `Tags` (rotating_light, warning, white_check_mark, bell); non-ASCII header values as RFC 2047.
- slack (Slack and Mattermost incoming webhooks): `{"text": ...}` in mrkdwn, the log tail as a
  code block.
- discord: `{"content": ..., "allowed_mentions": {"parse": []}}`, content cut to 2,000 characters
  (Discord's limit); a job name never pings anyone.
- json: `{id, host, digest, count, text, alerts: [alert]}`.
- command: the json body on stdin; env SPECDECK_ALERT_ID, SPECDECK_ALERT_TITLE.
Every HTTP request carries `X-Specdeck-Alert-Id` (the alert's id; a digest's is made from its
alerts' ids) and is a POST with a User-Agent of specdeck.
"""

import base64
import hashlib
import json

from .. import AGENT_VERSION

DISCORD_MAX = 2000
TEXT_MAX = 3500  # ntfy turns a longer body into an attachment; Slack shows it folded
DIGEST_LINES = 30
TAGS = {"failed": "rotating_light", "gpu": "warning", "finished": "white_check_mark", "test": "bell"}


def delivery_id(alerts):
    """The id of a request: the alert's own, or one made from a digest's alert ids."""
    if len(alerts) == 1:
        return alerts[0]["id"]
    digest = hashlib.sha256("\n".join(sorted(a["id"] for a in alerts)).encode()).hexdigest()[:16]
    return "digest-%s" % digest


def title_of(alerts, host):
    if len(alerts) == 1:
        return alerts[0]["title"]
    return "%d alerts on %s" % (len(alerts), host)


def lines_of(alerts):
    """The text a person reads: one alert with its log tail, or a digest of one line each."""
    if len(alerts) == 1:
        alert = alerts[0]
        return ["%s (%s)" % (alert["message"], alert["time_text"])], alert.get("log_tail") or []
    shown = ["- %s: %s (%s)" % (a.get("host"), a["message"], a["time_text"]) for a in alerts[:DIGEST_LINES]]
    if len(alerts) > DIGEST_LINES:
        shown.append("... and %d more" % (len(alerts) - DIGEST_LINES))
    return shown, []


def plain_text(alerts, host, limit=TEXT_MAX):
    lines, tail = lines_of(alerts)
    text = "\n".join(lines)
    if tail:
        text += "\n\nlast lines of the log:\n" + "\n".join(tail)
    return cut(text, limit)


def cut(text, limit):
    """`text` in at most `limit` characters, its last one "…" where it was cut."""
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _header(value):
    """A header value http.client can send: ASCII as is, else RFC 2047 (ntfy decodes it)."""
    value = " ".join(value.split())
    try:
        value.encode("ascii")
        return value
    except UnicodeEncodeError:
        return "=?UTF-8?B?%s?=" % base64.b64encode(value.encode("utf-8")).decode("ascii")


def json_body(alerts, host):
    return {"id": delivery_id(alerts), "host": host, "digest": len(alerts) > 1, "count": len(alerts),
            "text": plain_text(alerts, host), "alerts": alerts}


def request_for(channel, alerts, host):
    """(body bytes, headers) for an HTTP channel, or (stdin bytes, env additions) for a command."""
    ident = delivery_id(alerts)
    title = title_of(alerts, host)
    fmt = channel["format"]
    headers = {"X-Specdeck-Alert-Id": ident, "User-Agent": "specdeck/%s" % AGENT_VERSION}
    if fmt == "command":
        body = json.dumps(json_body(alerts, host)).encode()
        return body, {"SPECDECK_ALERT_ID": ident, "SPECDECK_ALERT_TITLE": title}
    if fmt == "ntfy":
        urgent = any(a.get("urgent") for a in alerts)
        kinds = {c for a in alerts for c in a.get("categories") or ()}
        tag = "test" if alerts[0]["kind"] == "test" else "failed" if urgent else "gpu" if "gpu" in kinds else \
            "finished" if all(a["kind"] == "job_finished" for a in alerts) else "gpu"
        headers.update({"Title": _header(title), "Priority": "high" if urgent else "default", "Tags": TAGS[tag],
                        "Content-Type": "text/plain; charset=utf-8"})
        return plain_text(alerts, host).encode("utf-8"), headers
    headers["Content-Type"] = "application/json"
    if fmt == "slack":
        lines, tail = lines_of(alerts)
        text = "*%s*\n%s" % (_escape_slack(title), _escape_slack("\n".join(lines)))
        if tail:
            text += "\n```%s```" % "\n".join(tail).replace("```", "'''")
        return json.dumps({"text": cut(text, 39000)}).encode(), headers
    if fmt == "discord":
        lines, tail = lines_of(alerts)
        text = "**%s**\n%s" % (title, "\n".join(lines))
        if tail:
            room = DISCORD_MAX - len(text) - 10
            shown = "\n".join(tail)[-room:] if room > 40 else ""
            if shown:
                text += "\n```\n%s\n```" % shown.replace("```", "'''")
        return json.dumps({"content": cut(text, DISCORD_MAX), "allowed_mentions": {"parse": []}}).encode(), headers
    return json.dumps(json_body(alerts, host)).encode(), headers


def _escape_slack(text):
    # Slack and Mattermost read &, < and > as markup (<!channel> pings everyone).
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
