"""Wire methods of notifications: the channels (add, list, change, remove, test), jobs whose end
someone wants to hear about, an alert sent by hand, retrying now, and the stream of alerts the
console turns into desktop notifications. A channel's URL is never in a reply: masked."""

import time

from ..core import streams
from ..core.protocol import BadRequest, NotFound
from ..core.streams import TopicSource
from ..core.wire import method
from .channels import CATEGORIES, public, quiet_until
from .alert import make_alert
from . import heartbeat, send
from .heartbeat import HeartbeatService
from .service import NotifyService

# The daemon starts these with itself (see remote/core/wire.py, area_services).
SERVICES = (NotifyService, HeartbeatService)
RETRY_WAIT_S = send.TRY_DEADLINE_S + 2.0  # notify.retry answers once its tries are done, or after this


def service(call):
    found = call.service(NotifyService.name)
    found.open_queue()
    return found


def _channel(call, found):
    channel_id = call.param("id", str, required=True)
    channel = found.store.get(channel_id)
    if channel is None:
        raise NotFound("no channel %s (notify.list lists them)" % channel_id)
    return channel


def _shown(found, channel):
    return dict(public(channel), status=found.queue.status(channel["id"]))


@method("notify.add")
def notify_add(call):
    """Add a channel. Params: `url` (a topic URL or webhook, http(s); kept in a file only this
    user can read, never shown whole) or `argv` (a command run with the alert as JSON on stdin),
    `format` (ntfy|slack|discord|json; default guessed from the URL: Slack and Mattermost hooks,
    Discord webhooks, a host named ntfy, else json), `on` (categories: failed, gpu, speculation,
    training, downloads, stalled, slowdown, disks, or all (default); a list or `failed,gpu`), `quiet`
    (`22:00-07:00`, the host's local time: only urgent alerts, failures, stalls and disks filling,
    are sent then). Reply: `{channel: {id,
    format, url (masked: scheme://host/…) or argv, on, quiet, created_at, status}}`."""
    found = service(call)
    try:
        channel = found.store.add(url=call.param("url", str), argv=call.param("argv", list), format=call.param("format", str),
                                  on=call.params.get("on"), quiet=call.param("quiet", str))
    except ValueError as exc:
        raise BadRequest(str(exc))
    return {"channel": _shown(found, channel)}


@method("notify.list")
def notify_list(call):
    """The channels and how each is doing, and the heartbeats. Params: none. Reply: `{channels:
    [{id, format, url (masked) or argv, on, quiet, created_at, status: {state:
    new|ok|retrying|failing, failures, last_error, last_error_at, last_ok_at, next_try_at,
    pending, sent, expired, requests}}], heartbeats: [heartbeat] (as notify.heartbeat's),
    recent: [alert] (the newest 20 raised, as notify.follow sends them), categories}`."""
    found = service(call)
    return {"channels": [_shown(found, c) for c in found.store.list()], "heartbeats": _heartbeats(call),
            "recent": found.queue.recent(20), "categories": list(CATEGORIES)}


def _pinger(call):
    return call.service(HeartbeatService.name)


def _heartbeats(call):
    pinger = _pinger(call)
    return [heartbeat.public(h, pinger.state(h["id"])) for h in pinger.store.list()]


@method("notify.heartbeat")
def notify_heartbeat(call):
    """Ping a URL (a GET) every period, so the service that receives the pings (healthchecks.io,
    Uptime Kuma push, Better Stack heartbeats) raises its own alarm when they stop; while an alert
    of category failed or stalled is open a Healthchecks URL (hc-ping.com, healthchecks.io, or a
    `/ping/<uuid>` path) gets `URL/fail` instead. Kept across daemon restarts. Params: `url`
    (http(s); `user:pass@` as basic auth; kept in a file only this user can read, never shown
    whole), `every` (seconds, or a duration such as `5m`; at least 5 s; default 5 min). Reply:
    `{heartbeat: {id, url (masked), every_s, created_at, healthchecks, last_at, last_error (null:
    answered 2xx), last_fail (the last ping was URL/fail), next_at, pings, failures}}`; the first
    ping goes at once."""
    pinger = _pinger(call)
    every = call.params.get("every")
    if every is not None and (isinstance(every, bool) or not isinstance(every, (int, float, str))):
        raise BadRequest("every is seconds or a duration such as 5m")
    try:
        added = pinger.store.add(call.param("url", str, required=True), every)
    except ValueError as exc:
        raise BadRequest(str(exc))
    call.daemon.services.wake(HeartbeatService.name)
    return {"heartbeat": heartbeat.public(added, pinger.state(added["id"]))}


@method("notify.heartbeat_remove")
def notify_heartbeat_remove(call):
    """End a heartbeat: no more pings. Params: `id`. Reply: `{removed: id}`."""
    pinger = _pinger(call)
    heartbeat_id = call.param("id", str, required=True)
    if not pinger.store.remove(heartbeat_id):
        raise NotFound("no heartbeat %s (notify.list lists them)" % heartbeat_id)
    pinger.forget(heartbeat_id)
    return {"removed": heartbeat_id}


@method("notify.update")
def notify_update(call):
    """Change a channel's categories or quiet hours. Params: `id`, `on`, `quiet` ("" clears).
    Reply: `{channel}` as notify.add."""
    found = service(call)
    channel = _channel(call, found)
    try:
        channel = found.store.update(channel["id"], on=call.params.get("on"), quiet=call.param("quiet", str))
    except ValueError as exc:
        raise BadRequest(str(exc))
    return {"channel": _shown(found, channel)}


@method("notify.remove")
def notify_remove(call):
    """Remove a channel and what was queued for it. Params: `id`. Reply: `{removed: id}`."""
    found = service(call)
    channel = _channel(call, found)
    found.store.remove(channel["id"])
    found.queue.forget_channel(channel["id"])
    return {"removed": channel["id"]}


@method("notify.test")
def notify_test(call):
    """Send a test alert to one channel now (one bounded try, not queued). Params: `id`. Reply:
    `{id, delivered, error}` (`error`: why not, e.g. `HTTP 404`, `cannot connect: ...`)."""
    found = service(call)
    channel = _channel(call, found)
    error = found.send_test(channel)
    return {"id": channel["id"], "delivered": error is None, "error": error}


@method("notify.send")
def notify_send(call):
    """Raise an alert by hand (a script's own news), queued and delivered like any other.
    Params: `message` (required), `title`, `categories` (list; default ["failed"] when `urgent`,
    else none: only channels `on` all take it), `urgent` (sent in quiet hours), `key` (the alert's id: the
    same key is sent once; default a new one). Reply: `{alert, queued}` (queued false: that key
    was raised before)."""
    found = service(call)
    message = call.param("message", str, required=True)
    urgent = call.param("urgent", bool, False)
    categories = call.param("categories", list) or (["failed"] if urgent else [])
    if any(c not in CATEGORIES for c in categories):
        raise BadRequest("categories are %s" % ", ".join(CATEGORIES))
    now = time.time()
    key = call.param("key", str) or "sent:%d:%d" % (int(now * 1e6), found.raised)
    alert = make_alert(key, "sent", categories, found.host, call.param("title", str) or "specdeck on %s" % found.host, message, now,
                       urgent=urgent)
    queued = found.raise_alert(alert)
    return {"alert": alert, "queued": queued}


@method("notify.retry")
def notify_retry(call):
    """Try pending alerts now instead of at the channel's next backoff. Params: `id` (one
    channel; default all), `advance_s` (instead: move the queue's clock on by this many seconds,
    so backoff and the two-day expiry run as if that time had passed; for tests and benchmarks).
    Reply: `{channels}` as notify.list's, once every channel that had alerts waiting was tried
    (or after RETRY_WAIT_S): their status says how that try went."""
    found = service(call)
    channel_id = call.param("id", str)
    if channel_id is not None:
        _channel(call, found)
    advance_s = call.param("advance_s", float, 0.0)
    if advance_s < 0:
        raise BadRequest("advance_s must be >= 0")
    # Channels with alerts waiting and outside their quiet hours: the ones this retry tries.
    waiting = {}
    for channel in found.store.list():
        status = found.queue.status(channel["id"])
        if channel_id in (None, channel["id"]) and status["pending"] and quiet_until(channel.get("quiet"), found.clock()) is None:
            waiting[channel["id"]] = status["requests"]
    found.retry_now(channel_id, advance_s)
    # The reply says how the retry went, not the state from before it: wait until each of them
    # was tried once (a try is bounded by its own deadline).
    deadline = time.monotonic() + RETRY_WAIT_S
    while waiting and time.monotonic() < deadline:
        for cid, requests_before in list(waiting.items()):
            status = found.queue.status(cid)
            if not status["pending"] or status["requests"] > requests_before:
                del waiting[cid]
        if waiting:
            time.sleep(0.05)
    return {"channels": [_shown(found, c) for c in found.store.list()]}


@method("notify.follow")
def notify_follow(call):
    """Stream every alert as the host raises it (whether or not a channel takes it). Params:
    `stream`, `after` (a seq; absent: from now). Frames: `{records: [alert]}`, each alert `{id,
    kind, categories, urgent, watched, host, job_id, job_name, title, message, time, time_text,
    log_tail}` (remote/notify/formats.py); a `below_break_even` alert adds `server` (its id, a
    job's or an attached server's) and `break_even` (the line it fell under, `{accept_length,
    source, how}`); an `acceptance_regression` adds `server`, `accept_length` and `baseline`;
    an `under_predicted` `server`, `accept_length` and `predicted` (what the served drafter's
    profile predicts) (remote/notify/formats.py). Reply: `{stream, seq, snapshot}`."""
    return streams.follow(call, TopicSource(call.service(NotifyService.name).topic))
