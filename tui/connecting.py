"""The console's connections: every host connected on a thread of its own (tui/fleet/hosts.py),
a host key the console does not know asked about in a dialog, and the shown host's link (its
state, who it is, the round trip) in the header and the panes. A mixin of the console's App
(tui/app.py), which has `links`, `current`, `models`, `header` and `fleet`."""

import threading

from .messages import ClientReady, ConnectionChanged
from .report import screen as report_screen
from .screens.host_key import HostKeyScreen


class HostConnections:
    """Mixin: `_connect()` at mount, the ConnectionChanged and ClientReady handlers, `r` (reconnect)."""

    def _connect(self):
        """Connect every host, each on its own thread."""
        for link in self.links:
            link.start()

    def _connector(self, name):
        return lambda on_state: self._make_client(name, on_state, self._ask_host_key)

    def _open_client(self, name, on_state, ask_host_key):
        from .transport.connection import open_client

        python = self.python(name) if callable(self.python) else self.python
        # A link the keeper holds warm (a headless command's, moments ago) is taken as it is;
        # else the console connects itself, where its dialog can ask about a host key.
        return open_client(name, python=python, accept_new=ask_host_key, reconnect=True, on_state=on_state, keeper="warm")

    def _ask_host_key(self, host_key):
        """Runs on the connecting thread: ask in a dialog and wait for the answer."""
        if self.accept_new:
            return True
        answered = threading.Event()
        answer = {"accept": False}

        def on_answer(accept):
            answer["accept"] = bool(accept)
            answered.set()

        self.call_from_thread(self.push_screen, HostKeyScreen(host_key), on_answer)
        while not answered.wait(0.2):
            if self._quitting.is_set():
                return False
        return answer["accept"]

    def on_connection_changed(self, message: ConnectionChanged):
        link = self.link_of(message.host) or self.current
        if link is not self.current:
            return  # the Fleet pane reads every host's state on its own clock
        if message.state == "connected" and self.client is None:
            return  # the first link, before the client was in place: ClientReady says it
        self.connection_state = message.state
        self._show_connection(message.state, message.detail)
        self._show_rtt()
        if message.state == "failed":
            reason = message.detail.get("error") or "the connection failed"
            lines = [reason] if "press r" in reason else [reason, "press r to try again"]
            self.notify(lines, title="cannot connect to %s" % self.host, severity="error", timeout=15, markup=False)
        self.refresh_bindings()

    def on_client_ready(self, message: ClientReady):
        link = self.link_of(message.host) or self.current
        model = self.host_model(link.name)
        model.client = link.client
        if model.follow_alerts():  # a new client of the host's: its alerts, and the night it was not watched
            report_screen.watch(self, link)
        if link is not self.current:
            return
        self.client = link.client
        self.connection_state = "connected"
        self._show_connection("connected", {})
        self._label_host(message.hostname, message.user)
        for pane_class in self.pane_classes:
            for pane in self.query(pane_class):
                pane.post_message(ClientReady(message.hostname, message.user, host=link.name))
        self.follow_job_events()
        self.refresh_bindings()

    def _show_connection(self, state, detail):
        header = self.header
        header.state, header.detail = state, dict(detail or {})
        self.show_connection(state, detail)

    def _label_host(self, hostname, user):
        header = self.header
        header.hostname = hostname
        if user:
            host = hostname if self.host == "local" else self.host.split("@")[-1]
            header.host_label = "%s@%s" % (user, host)

    def _show_rtt(self):
        self.header.rtt_s = self.current.rtt_s
        if self.fleet:
            self.tell_unreachable()
            states = [link.state for link in self.links]
            parts = ["host %d of %d" % (self.links.index(self.current) + 1, len(self.links))]
            parts += ["%d %s" % (states.count(state), state) for state in ("failed", "reconnecting", "connecting") if state in states]
            self.header.fleet_text = " · ".join(parts)

    def action_reconnect(self):
        self.client = None
        self.connection_state = "connecting"
        self._show_connection("connecting", {})
        self.refresh_bindings()
        self.current.reconnect()
