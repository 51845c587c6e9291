"""One bounded read of an inference server's /metrics: a total deadline (a body that trickles
stops there), a size cap (a huge body stops there, and one that says it is too big is not read
at all), and no redirect to another host (one to the same host, vLLM's `/metrics` ->
`/metrics/`, is followed). Each refusal is a SourceError whose message says why."""

import socket
import ssl
import urllib.parse
import zlib

from ..core.feed_source import SourceError

MAX_REDIRECTS = 2
CHUNK_BYTES = 65536


def get(url, budget):
    """The body of a 200 reply to GET `url`, within `budget` (remote/core/feed_source.py Budget)."""
    for _ in range(MAX_REDIRECTS + 1):
        status, headers, body = _once(url, budget)
        if status in (301, 302, 303, 307, 308):
            target = urllib.parse.urljoin(url, headers.get("location", ""))
            if _origin(target) != _origin(url):
                raise SourceError("%s redirects to %s, another host: not followed" % (url, target))
            url = target
            continue
        if status != 200:
            raise SourceError("%s answered HTTP %d" % (url, status))
        if headers.get("content-encoding", "").lower() in ("gzip", "x-gzip"):
            body = _gunzip(body, url, budget.max_bytes)
        if not body.strip():
            raise SourceError("%s gave an empty answer" % url)
        if body.lstrip()[:1] == b"<":
            raise SourceError("%s: not Prometheus text: %r" % (url, body.lstrip()[:40].decode("latin-1")))
        return body
    raise SourceError("%s redirects more than %d times" % (url, MAX_REDIRECTS))


def _origin(url):
    parts = urllib.parse.urlsplit(url)
    return parts.scheme, parts.hostname, parts.port or (443 if parts.scheme == "https" else 80)


def _once(url, budget):
    scheme, host, port = _origin(url)
    parts = urllib.parse.urlsplit(url)
    if scheme not in ("http", "https") or not host:
        raise SourceError("%s is not an http(s) URL" % url)
    path = (parts.path or "/") + ("?" + parts.query if parts.query else "")
    try:
        sock = socket.create_connection((host, port), timeout=max(0.001, budget.remaining_s()))
    except socket.timeout:
        raise SourceError("%s did not accept a connection within the %.1f s deadline" % (url, budget.deadline_s))
    except OSError as exc:
        raise SourceError("%s did not answer (%s)" % (url, exc.strerror or exc))
    try:
        if scheme == "https":
            sock = ssl.create_default_context().wrap_socket(sock, server_hostname=host)
        request = "GET %s HTTP/1.1\r\nHost: %s:%d\r\nAccept-Encoding: identity\r\nConnection: close\r\nUser-Agent: specdeck\r\n\r\n" % (path, host, port)
        sock.sendall(request.encode("latin-1"))
        return _reply(sock, url, budget)
    except socket.timeout:
        raise SourceError("%s gave no complete answer within the %.1f s deadline (%d bytes by then)" % (url, budget.deadline_s, budget.bytes))
    except (OSError, ssl.SSLError) as exc:
        raise SourceError("%s: the connection failed (%s)" % (url, exc))
    finally:
        sock.close()


def _reply(sock, url, budget):
    """(status, headers, body) read from `sock` until the body is complete or the server closes."""
    data = bytearray()
    head = None
    while True:
        budget.check()
        sock.settimeout(max(0.001, budget.remaining_s()))
        chunk = sock.recv(CHUNK_BYTES)
        if chunk:
            budget.take(len(chunk))
            data += chunk
        if head is None:
            end = data.find(b"\r\n\r\n")
            if end >= 0:
                head = _head(bytes(data[:end]), url)
                del data[: end + 4]
                length = head[1].get("content-length")
                if length is not None and length.isdigit() and int(length) > budget.max_bytes:
                    raise SourceError("%s sends %s bytes, over the %d-byte cap: not read" % (url, length, budget.max_bytes))
        if head is not None:
            length = head[1].get("content-length")
            if length is not None and length.isdigit() and len(data) >= int(length):
                return head[0], head[1], bytes(data[: int(length)])
        if not chunk:
            if head is None:
                raise SourceError("%s closed the connection without a reply" % url)
            body = bytes(data)
            if head[1].get("transfer-encoding", "").lower() == "chunked":
                body = _unchunk(body, url)
            return head[0], head[1], body


def _head(raw, url):
    lines = raw.decode("latin-1").split("\r\n")
    words = lines[0].split(" ", 2)
    if len(words) < 2 or not words[0].startswith("HTTP/") or not words[1].isdigit():
        raise SourceError("%s did not answer in HTTP" % url)
    headers = {}
    for line in lines[1:]:
        name, _, value = line.partition(":")
        headers[name.strip().lower()] = value.strip()
    return int(words[1]), headers


def _unchunk(body, url):
    out, position = bytearray(), 0
    while True:
        end = body.find(b"\r\n", position)
        if end < 0:
            raise SourceError("%s ended its chunked reply early" % url)
        try:
            size = int(body[position:end].split(b";")[0], 16)
        except ValueError:
            raise SourceError("%s sent a malformed chunked reply" % url)
        if size == 0:
            return bytes(out)
        out += body[end + 2 : end + 2 + size]
        position = end + 2 + size + 2


def _gunzip(body, url, max_bytes):
    """`body` decompressed a bounded piece at a time: one that grows past `max_bytes` stops there."""
    inflater, out, pending = zlib.decompressobj(16 + zlib.MAX_WBITS), bytearray(), body
    try:
        while pending:
            out += inflater.decompress(pending, max_bytes + 1 - len(out))
            if len(out) > max_bytes:
                raise SourceError("%s: answer larger than %d MiB after decompression" % (url, max_bytes >> 20))
            pending = inflater.unconsumed_tail
            if inflater.eof:
                break
    except zlib.error as exc:
        raise SourceError("%s: a gzip answer that does not decompress (%s)" % (url, exc))
    return bytes(out)
