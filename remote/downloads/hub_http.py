"""HTTP to the hub that keeps the token with the hub: redirects followed by hand, so a CDN the
hub sends a file to never sees the Authorization header, through the CA bundle the hub's own
clients would use; and Transient, the network hiccup worth retrying from the bytes we have."""

from __future__ import annotations

import os
import urllib.error
import urllib.parse
import urllib.request

READ_TIMEOUT = 60.0
MAX_REDIRECTS = 10


class Transient(Exception):
    """A network hiccup worth retrying from the bytes we have."""


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, req, fp, code, msg, headers, newurl):
        return None


def _ssl_context():
    """The CA bundle the requests/httpx-based hub clients would use: an explicit one from the
    environment, else certifi's when installed, else the system's."""
    import ssl

    for name in ("REQUESTS_CA_BUNDLE", "SSL_CERT_FILE", "CURL_CA_BUNDLE"):
        path = os.environ.get(name)
        if path and os.path.exists(path):
            return ssl.create_default_context(cafile=path)
    try:
        import certifi

        return ssl.create_default_context(cafile=certifi.where())
    except Exception:
        return ssl.create_default_context()


_OPENER = None


def _opener():
    global _OPENER
    if _OPENER is None:
        _OPENER = urllib.request.build_opener(_NoRedirect(), urllib.request.HTTPSHandler(context=_ssl_context()))
    return _OPENER


def _origin(url):
    s = urllib.parse.urlsplit(url)
    return "%s://%s" % (s.scheme, s.netloc)


def hub_origins(hf):
    """Origins that may see the token: the endpoint in use and huggingface_hub's default one
    (a mirror may redirect there)."""
    consts = hf.constants
    return {_origin(e) for e in (consts.ENDPOINT, getattr(consts, "_HF_DEFAULT_ENDPOINT", None)) if e}


def http_open(url, headers, method="GET", timeout=READ_TIMEOUT, follow=True, trusted=()):
    """Open `url`; follows redirects by hand so that the token never goes to another host
    (a CDN) than the hub's (`url`'s origin, or one in `trusted`). Returns the final response
    (errors are returned, not raised)."""
    headers = dict(headers)
    first_origin = _origin(url)
    for _ in range(MAX_REDIRECTS + 1):
        req = urllib.request.Request(url, headers=headers, method=method)
        try:
            resp = _opener().open(req, timeout=timeout)
        except urllib.error.HTTPError as e:
            resp = e
        code = resp.getcode()
        if follow and code in (301, 302, 303, 307, 308) and resp.headers.get("Location"):
            target = urllib.parse.urljoin(url, resp.headers["Location"])
            try:
                resp.close()
            except Exception:
                pass
            if _origin(target) != first_origin and _origin(target) not in trusted:
                headers = {k: v for k, v in headers.items() if k.lower() != "authorization"}
            url = target
            continue
        return resp
    raise Transient("too many redirects from %s" % first_origin)
