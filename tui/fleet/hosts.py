"""The hosts of one console, each on its own: its own link, heartbeat and reconnection (the
client's), its own connecting thread, its own poll of the host's summary.

A host that is down, slow, asks about its host key or refuses the login holds only its own
threads: the others and the keys never wait on it. The console's cost grows with the number
of hosts, not with how often they speak: each host is asked for one small summary every
SUMMARY_EVERY_S (the figures the host's feeds already hold), and the Fleet pane reads the
summaries on its own clock.

A `HostLink` reports to the console through `post(message)` (the app's post_message, safe from
any thread); it never touches a widget.
"""

import itertools
import threading
import time

from remote.core.protocol import RemoteError

from ..transport.client import RETRY_INTERVALS_S, ConnectError
from ..messages import ClientReady, ConnectionChanged

SUMMARY_EVERY_S = 2.0
SUMMARY_TIMEOUT_S = 10.0


class HostLink:
    """One host: `name` as the user typed it, `state` (connecting, connected, reconnecting,
    failed), `detail` (the client's: error, next try), `client` once connected, `summary` (the
    host's last `fleet.summary`, with `summary_at`, a monotonic time), `unseen_alerts`,
    `away_since` (a monotonic time: since its first failed try, or its link dropped; None while
    it is connected or before its first try ended) and `away_alerted` (the console said it was
    away this time)."""

    def __init__(self, name, connect, post, retry=False, poll=True):
        """`connect(on_state)` returns a started AgentClient or raises ConnectError (see
        tui/app.py, which binds the host's interpreter and host-key question). With `retry`
        (a fleet) a first connection that fails is tried again as a dropped link is, backing off
        to every 15 s, unless trying again cannot cure it (a host key, a refused login): a host
        that was rebooting when the console opened joins when it is back. Without `poll` (a
        console of one host, which has no Fleet pane) the host's summary is never asked for: an
        idle console sends nothing."""
        self.name = name
        self._connect = connect
        self._post = post
        self.retry = retry
        self.poll = poll
        self.state = "connecting"
        self.detail = {}
        self.client = None
        self.hello = {}
        self.summary = None
        self.summary_at = None
        self.summary_error = None
        self.unseen_alerts = 0
        self.away_since = None
        self.away_alerted = False
        self._closed = threading.Event()
        self._generation = 0

    # -- the link

    def start(self):
        """Connect on a thread of its own; the client heals the link after that."""
        self._generation += 1
        generation = self._generation
        self.state, self.detail = "connecting", {}
        threading.Thread(target=self._run, args=(generation,), name="specdeck-host-%s" % self.name, daemon=True).start()

    def _run(self, generation):
        for attempt in itertools.count(1):
            started = time.monotonic()
            try:
                client = self._connect(lambda state, detail: self._on_state(generation, state, detail))
                break
            except ConnectError as exc:
                if generation != self._generation or self._closed.is_set():
                    return
                # A message written for the CLI (a flag to pass) may have the console's own words.
                error = getattr(exc, "console_message", None) or str(exc)
                if exc.permanent or not self.retry:
                    self._on_state(generation, "failed", {"error": error})
                    return
                wait_s = max(0.0, started + RETRY_INTERVALS_S[min(attempt, len(RETRY_INTERVALS_S)) - 1] - time.monotonic())
                self._on_state(generation, "reconnecting", {"error": error, "attempt": attempt, "next_try_at": time.time() + wait_s,
                                                            "next_try_in_s": wait_s})
                if self._closed.wait(wait_s):
                    return
        if self._closed.is_set() or generation != self._generation:
            client.close()
            return
        self.client = client
        self.hello = client.hello or {}
        self.state, self.detail = "connected", {}
        self.away_since = None
        self._post(ClientReady(self.hello.get("hostname", ""), self.hello.get("user", ""), host=self.name))
        if self.poll:
            self._poll(client)

    def _on_state(self, generation, state, detail):
        """The client's state callback (one of its threads)."""
        if state == "closed" or generation != self._generation:
            return
        if state == "connected" and self.client is None:
            return  # the first link, before connect() returned: ClientReady says it, with the client in place
        self.state, self.detail = state, dict(detail)
        if state == "connected":
            self.away_since = None
        elif state in ("reconnecting", "failed") and self.away_since is None:
            self.away_since = time.monotonic()
        self._post(ConnectionChanged(state, dict(detail), host=self.name))

    def reconnect(self):
        """Connect again after a failure (r): the client that gave up is closed."""
        failed, self.client = self.client, None
        if failed is not None:
            threading.Thread(target=failed.close, name="specdeck-close", daemon=True).start()
        self.start()

    def close(self):
        self._closed.set()
        client, self.client = self.client, None
        if client is not None:
            client.close()

    def away_for_s(self, now=None):
        """How long it has been unreachable (0 while connected, or while its first try goes on)."""
        since = self.away_since
        return 0.0 if since is None or self.state == "connected" else (time.monotonic() if now is None else now) - since

    @property
    def rtt_s(self):
        client = self.client
        return client.rtt_s if client is not None and self.state == "connected" else None

    # -- the summary

    def _poll(self, client):
        """Ask for the host's summary every SUMMARY_EVERY_S while this client is the host's."""
        while not self._closed.is_set() and self.client is client and client.state != "failed":
            if client.state == "connected":
                try:
                    self.summary = client.call("fleet.summary", timeout=SUMMARY_TIMEOUT_S)
                    self.summary_at = time.monotonic()
                    self.summary_error = None
                except RemoteError as exc:
                    self.summary_error = exc.message  # an agent without the method: the link still shows
                except ConnectError:
                    pass  # the state says why; the client heals
            self._closed.wait(SUMMARY_EVERY_S)
