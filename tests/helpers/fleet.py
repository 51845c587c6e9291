"""Hosts of one console made of local agents: each its own SPECDECK_HOME (so its own daemon,
jobs and alerts) and, if asked, its own replayed NVML recording. `LocalFleet(tmp_path,
["a", "b"])` gives `connect` for SpecdeckApp(hosts=..., connect=...), and `stop()` stops
every daemon it started."""

import os

from tests.helpers.cli import stop_daemon
from tui.transport.client import AgentClient
from tui.transport.connection import LocalLink

H200 = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "data", "nvml-h200.json.gz")


class LocalFleet:
    def __init__(self, root, names, gpus=None):
        """`gpus`: {name: how many GPUs of the H200 recording the host replays}."""
        self.homes, self.env = {}, {}
        for name in names:
            home = root / ("host-" + name)
            home.mkdir(mode=0o700, parents=True, exist_ok=True)
            self.homes[name] = home
            env = dict(os.environ, SPECDECK_HOME=str(home))
            env.pop("SPECDECK_NVML_REPLAY", None)
            if gpus and gpus.get(name):
                env["SPECDECK_NVML_REPLAY"] = "%s:%d" % (H200, gpus[name])
            self.env[name] = env
        self.down = set()  # names whose next connection fails, as a host that is down

    def connect(self, name, on_state, ask_host_key):
        def link(reconnecting=False):
            if name in self.down:
                from tui.transport.client import ConnectError

                raise ConnectError("cannot connect to %s port 22: Connection refused" % name)
            return LocalLink(None, self.env[name])

        return AgentClient(link, reconnect=True, on_state=on_state).start()

    def client(self, name):
        """A client of the host's agent of its own (to start jobs, raise alerts)."""
        return AgentClient(lambda reconnecting=False: LocalLink(None, self.env[name])).start()

    def stop(self):
        for home in self.homes.values():
            stop_daemon(home)
