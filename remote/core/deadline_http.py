"""An urllib opener whose sockets carry one request's deadline (a notify or heartbeat try, a
benchmark's completion): each connect, send and receive waits at most the per-operation timeout
and never past the deadline, so a server that answers and then trickles a byte at a time ends
the request at its deadline, on the caller's own thread, with its socket closed. No thread waits
beside it (a waiter that gave up would leave the request running, its thread and socket with it).
Name resolution is the system resolver's, bounded by its own timeouts; redirects are not
followed (a webhook that redirects would get the alert's body elsewhere)."""

import functools
import http.client
import socket
import ssl
import time
import urllib.request


class DeadlinePassed(socket.timeout):
    """The request's whole deadline passed (not only one operation's timeout)."""


class Deadline:
    """The end of one request (monotonic) and the longest any one socket operation may wait."""

    def __init__(self, total_s, each_s):
        self.total_s = total_s
        self.at = time.monotonic() + total_s
        self.each_s = each_s

    def passed(self):
        return time.monotonic() >= self.at

    def timeout_s(self):
        """How long the next operation may wait; DeadlinePassed once there is no time left."""
        left = self.at - time.monotonic()
        if left <= 0:
            raise DeadlinePassed("no complete answer within %g s" % self.total_s)
        return min(self.each_s, left)


class _Armed(object):
    """Before each blocking operation, the socket's timeout is set from its deadline (a class of
    its own beside socket.socket or ssl.SSLSocket)."""

    deadline = None

    def _arm(self):
        if self.deadline is not None:
            self.settimeout(self.deadline.timeout_s())

    def connect(self, address):
        self._arm()
        return super().connect(address)

    def read(self, *args):  # ssl.SSLSocket's
        self._arm()
        return super().read(*args)

    def recv(self, *args):
        self._arm()
        return super().recv(*args)

    def recv_into(self, *args):
        self._arm()
        return super().recv_into(*args)

    def send(self, *args):
        self._arm()
        return super().send(*args)

    def sendall(self, *args):
        self._arm()
        return super().sendall(*args)


class DeadlineSocket(_Armed, socket.socket):
    """A TCP socket that sets its timeout from its deadline before each blocking operation."""


class DeadlineSSLSocket(_Armed, ssl.SSLSocket):
    """The same over TLS (the handshake is bounded by the timeout the plain socket had then,
    itself within the deadline; SSLContext.wrap_socket makes this class through sslsocket_class)."""


def _create_connection(deadline, address, timeout=None, source_address=None, *_):
    """socket.create_connection's job with DeadlineSockets."""
    host, port = address
    error = None
    for family, kind, proto, _, sockaddr in socket.getaddrinfo(host, port, 0, socket.SOCK_STREAM):
        sock = DeadlineSocket(family, kind, proto)
        sock.deadline = deadline
        try:
            if source_address:
                sock.bind(source_address)
            sock.connect(sockaddr)
            return sock
        except OSError as exc:
            error = exc
            sock.close()
    raise error or OSError("%s: no address to connect to" % host)


class _HTTPConnection(http.client.HTTPConnection):
    def __init__(self, *args, deadline, **kwargs):
        super().__init__(*args, **kwargs)
        self._create_connection = functools.partial(_create_connection, deadline)


class _HTTPSConnection(http.client.HTTPSConnection):
    def __init__(self, *args, deadline, **kwargs):
        super().__init__(*args, **kwargs)
        self._deadline = deadline
        self._create_connection = functools.partial(_create_connection, deadline)

    def connect(self):
        super().connect()
        self.sock.deadline = self._deadline


class _HTTPHandler(urllib.request.HTTPHandler):
    def __init__(self, deadline):
        super().__init__()
        self.deadline = deadline

    def http_open(self, req):
        return self.do_open(functools.partial(_HTTPConnection, deadline=self.deadline), req)


_contexts = []


def _tls_context():
    """One TLS context for every try, made at the first (loading the CA certificates costs
    milliseconds; a heartbeat every 5 s need not pay them each time)."""
    if not _contexts:
        context = ssl.create_default_context()
        context.sslsocket_class = DeadlineSSLSocket
        _contexts.append(context)
    return _contexts[0]


class _HTTPSHandler(urllib.request.HTTPSHandler):
    def __init__(self, deadline):
        super().__init__(context=_tls_context())
        self.deadline = deadline

    def https_open(self, req):
        return self.do_open(functools.partial(_HTTPSConnection, deadline=self.deadline), req, context=self._context)


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args, **kwargs):
        return None


def opener(deadline):
    """An opener for one try under `deadline` (proxies from the environment, as urllib's own)."""
    return urllib.request.build_opener(_NoRedirect, _HTTPHandler(deadline), _HTTPSHandler(deadline))
