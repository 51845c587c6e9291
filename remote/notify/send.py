"""One try at delivering to a channel, bounded in time: an HTTP POST (urllib, its sockets carrying
the try's deadline: core/deadline_http.py) or a command (subprocess, the alert as JSON on stdin); and a
heartbeat's GET, bounded the same way. Each runs on its caller's thread and has ended, its socket
closed, when it returns. The error it returns never holds the channel's URL: it is shown in the
console and may be logged, and the URL is a secret."""

import base64
import os
import signal
import socket
import subprocess
import urllib.error
import urllib.parse
import urllib.request

from ..core.deadline_http import Deadline, opener
from .formats import request_for

TRY_TIMEOUT_S = 5.0  # each socket operation; the whole try at most TRY_DEADLINE_S
TRY_DEADLINE_S = 10.0
REPLY_MAX_BYTES = 65536
COMMAND_TIMEOUT_S = 10.0


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
    body, headers = request_for(channel, alerts, host)
    url = split_userinfo(channel["url"])[0]
    return _request(channel, urllib.request.Request(url, data=body, headers=_auth(headers, channel["url"]), method="POST"))


def get(url):
    """One GET of `url` (a heartbeat's ping; `user:pass@` as basic auth), bounded like a POST:
    None when answered 2xx, else the one-line reason, never naming the URL."""
    channel = {"url": url}
    try:
        return _request(channel, urllib.request.Request(split_userinfo(url)[0], method="GET", headers=_auth({}, url)))
    except Exception as exc:  # a ping always ends with an answer
        return scrub("%s: %s" % (type(exc).__name__, exc), channel)


def _auth(headers, url):
    authorization = split_userinfo(url)[1]
    return dict(headers, Authorization=authorization) if authorization else headers


def _request(channel, request):
    deadline = Deadline(TRY_DEADLINE_S, TRY_TIMEOUT_S)
    try:
        with opener(deadline).open(request) as reply:
            status = reply.status
            # Read (a bounded amount of) the answer so the receiver sees a clean close.
            read = 0
            while read < REPLY_MAX_BYTES:
                chunk = reply.read(8192)
                if not chunk:
                    break
                read += len(chunk)
    except urllib.error.HTTPError as exc:
        exc.close()
        return "HTTP %d %s" % (exc.code, scrub(str(exc.reason or ""), channel))
    except urllib.error.URLError as exc:
        reason = exc.reason
        if isinstance(reason, socket.timeout):  # 3.9: not yet a TimeoutError
            return _timed_out(deadline)
        if isinstance(reason, OSError):
            return scrub("cannot connect: %s" % (reason.strerror or reason), channel)
        return scrub("no answer: %s" % reason, channel)
    except socket.timeout:
        return _timed_out(deadline)
    except OSError as exc:
        return scrub("%s: %s" % (type(exc).__name__, exc), channel)
    if 200 <= status < 300:
        return None
    return "HTTP %d" % status


def _timed_out(deadline):
    if deadline.passed():
        return "no complete answer within %d s" % TRY_DEADLINE_S
    return "no answer within %d s" % TRY_TIMEOUT_S


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
