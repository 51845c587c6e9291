"""One try at delivering to a channel, bounded in time: an HTTP POST (urllib) or a command
(subprocess, the alert as JSON on stdin); and a heartbeat's GET, bounded the same way. The error it returns never holds the channel's URL:
it is shown in the console and may be logged, and the URL is a secret."""

import base64
import os
import signal
import threading
import socket
import subprocess
import time
import urllib.error
import urllib.parse
import urllib.request

from .formats import request_for

TRY_TIMEOUT_S = 5.0  # each socket operation; the whole try at most TRY_DEADLINE_S
TRY_DEADLINE_S = 10.0
REPLY_MAX_BYTES = 65536
COMMAND_TIMEOUT_S = 10.0


class NoRedirect(urllib.request.HTTPRedirectHandler):
    """A webhook that redirects is answered as failed: following it would POST the alert (and
    its headers) to wherever it points."""

    def redirect_request(self, *args, **kwargs):
        return None


_opener = urllib.request.build_opener(NoRedirect)


def scrub(text, channel):
    """`text` without the channel's URL or any part of its path (a token) in it."""
    url = channel.get("url")
    if not url:
        return text
    text = text.replace(url, "<url>")
    password = urllib.parse.urlsplit(url).password
    if password:
        text = text.replace(password, "…")
    for part in url.split("/")[3:]:
        for piece in part.split("?"):
            if len(piece) >= 6:
                text = text.replace(piece, "…")
    return text


def deliver(channel, alerts, host):
    """Send `alerts` (one, or several as a digest) to `channel`: None when delivered, else the
    one-line reason it was not."""
    try:
        if channel["format"] == "command":
            return _run_command(channel, alerts, host)
        return _post(channel, alerts, host)
    except Exception as exc:  # a try always ends with an answer: the queue keeps the alert
        return scrub("%s: %s" % (type(exc).__name__, exc), channel)


def split_userinfo(url):
    """(the URL without any `user:pass@`, the Authorization header for it or None)."""
    parts = urllib.parse.urlsplit(url)
    if "@" not in parts.netloc:
        return url, None
    userinfo, _, hostport = parts.netloc.rpartition("@")
    user, _, password = userinfo.partition(":")
    pair = "%s:%s" % (urllib.parse.unquote(user), urllib.parse.unquote(password))
    plain = urllib.parse.urlunsplit((parts.scheme, hostport, parts.path, parts.query, parts.fragment))
    return plain, "Basic " + base64.b64encode(pair.encode("utf-8")).decode("ascii")


def _post(channel, alerts, host):
    """One POST, its whole try (connect, headers, answer) bounded by TRY_DEADLINE_S: a receiver
    that trickles its answer a byte at a time is a failed try, never a delivery."""
    return within_deadline(lambda: _post_once(channel, alerts, host), channel)


def within_deadline(attempt, channel):
    """`attempt()` (None or the reason it failed) on a thread of its own, its whole try bounded by
    TRY_DEADLINE_S; an exception is its reason, scrubbed of the channel's URL."""
    outcome = []

    def run():
        try:
            outcome.append(attempt())
        except Exception as exc:
            outcome.append(scrub("%s: %s" % (type(exc).__name__, exc), channel))

    worker = threading.Thread(target=run, daemon=True)
    worker.start()
    worker.join(TRY_DEADLINE_S)
    if not outcome:
        return "no complete answer within %d s" % TRY_DEADLINE_S
    return outcome[0]


def get(url):
    """One GET of `url` (a heartbeat's ping; `user:pass@` as basic auth), bounded like a POST:
    None when answered 2xx, else the one-line reason, never naming the URL."""
    channel = {"url": url}
    return within_deadline(lambda: _request(channel, urllib.request.Request(split_userinfo(url)[0], method="GET",
                                                                            headers=_auth({}, url))), channel)


def _auth(headers, url):
    authorization = split_userinfo(url)[1]
    return dict(headers, Authorization=authorization) if authorization else headers


def _post_once(channel, alerts, host):
    body, headers = request_for(channel, alerts, host)
    url = split_userinfo(channel["url"])[0]
    return _request(channel, urllib.request.Request(url, data=body, headers=_auth(headers, channel["url"]), method="POST"))


def _request(channel, request):
    began = time.monotonic()
    try:
        with _opener.open(request, timeout=TRY_TIMEOUT_S) as reply:
            status = reply.status
            # Read (a bounded amount of) the answer so the receiver sees a clean close.
            read = 0
            while read < REPLY_MAX_BYTES and time.monotonic() - began < TRY_DEADLINE_S:
                chunk = reply.read(8192)
                if not chunk:
                    break
                read += len(chunk)
    except urllib.error.HTTPError as exc:
        return "HTTP %d %s" % (exc.code, scrub(str(exc.reason or ""), channel))
    except urllib.error.URLError as exc:
        reason = exc.reason
        if isinstance(reason, OSError) and not isinstance(reason, (TimeoutError, socket.timeout)):  # 3.9: not yet one
            return scrub("cannot connect: %s" % (reason.strerror or reason), channel)
        return scrub("no answer: %s" % reason, channel)
    except (TimeoutError, OSError) as exc:
        return "no answer within %d s" % TRY_TIMEOUT_S if "timed out" in str(exc) else scrub("%s: %s" % (type(exc).__name__, exc), channel)
    if 200 <= status < 300:
        return None
    return "HTTP %d" % status


def _run_command(channel, alerts, host):
    stdin, env_extra = request_for(channel, alerts, host)
    env = dict(os.environ, **env_extra)
    try:
        process = subprocess.Popen(channel["argv"], stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                                   env=env, start_new_session=True, close_fds=True)
    except OSError as exc:
        return "cannot run %s: %s" % (channel["argv"][0], exc.strerror or exc)
    try:
        _, stderr = process.communicate(stdin, timeout=COMMAND_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        # Its whole session: a `sh -c` whose child holds stderr open would keep us waiting.
        try:
            os.killpg(process.pid, signal.SIGKILL)
        except OSError:
            pass
        process.wait()
        for pipe in (process.stdin, process.stderr):
            try:
                pipe.close()
            except OSError:
                pass
        return "the command did not finish within %d s" % COMMAND_TIMEOUT_S
    if process.returncode != 0:
        last = (stderr or b"").decode("utf-8", "replace").strip().splitlines()
        return "the command exited %d%s" % (process.returncode, ": " + last[-1][:200] if last else "")
    return None
