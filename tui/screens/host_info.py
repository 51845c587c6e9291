"""The host at a glance: the agent (version, build, Python), what the host can do (NVML,
huggingface_hub, torch, vllm, ...), and the daemon's services with their state, so a sampler
that keeps failing is seen, and why."""

import time

from rich.table import Table
from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Label, Static

from ..display import format_bytes, format_duration, format_time, safe_text

STATE_STYLES = {"running": "green", "retrying": "bold red", "starting": "yellow", "stopped": "dim"}


def services_table(services, now=None):
    """One row a service: name, state, how it is doing (the error and the next try when failing).
    A failing service's line is whole, wrapped; a healthy one's figures fit on its one line (cut
    with an ellipsis), so that every service stays in view at 80x24 however many the host runs."""
    now = time.time() if now is None else now
    table = Table.grid(padding=(0, 2))
    table.add_column(style="bold")
    table.add_column()
    table.add_column()
    for service in services:
        state = service.get("state") or "?"
        if service.get("error"):
            how = "%s (%d in a row" % (service["error"], service.get("failures") or 0)
            if service.get("next_try_at"):
                how += ", next try in %d s" % max(0, round(service["next_try_at"] - now))
            how += ")"
        else:
            detail = service.get("detail") or {}
            how = ", ".join("%s %s" % (key.replace("_", " "), _value(key, value)) for key, value in detail.items()
                            if not isinstance(value, (dict, list)) and value is not None)
        how = safe_text(how)  # a service's error is the host's text
        text = Text(how) if service.get("error") else Text(how, no_wrap=True, overflow="ellipsis")
        table.add_row(Text(safe_text(service.get("name", "?"))), Text(safe_text(state), style=STATE_STYLES.get(state, "")), text)
    return table


def _value(key, value):
    """A detail as people read it: times as clock times, bytes in both units, numbers rounded."""
    if isinstance(value, float) and key.endswith("_at"):
        return format_time(value)
    if isinstance(value, int) and not isinstance(value, bool) and key.endswith("bytes"):
        return format_bytes(value)
    if isinstance(value, float):
        return "%.3g" % value
    return value


def capabilities_text(capabilities, services=()):
    """What the host can use, `name version` each, `name -` for what it cannot; and why NVML
    cannot when its bindings are there but it did not load (no driver library, no GPU): a host
    without GPUs must not read as one whose GPUs can be watched."""
    found = []
    nvml_failure = _nvml_failure(capabilities, services)
    for name, value in sorted((capabilities or {}).items()):
        if name == "python":
            continue
        usable = value and not (name == "nvml" and nvml_failure)
        found.append("%s %s" % (name, value.get("version", "")) if usable else "%s -" % name)
    text = "  ".join(found)
    if nvml_failure:  # on the same line: the services below must stay in view at 80x24
        text += "   (nvml did not load: %s)" % nvml_failure.replace("NVML did not start: ", "")
    return text


def _nvml_failure(capabilities, services):
    """Why NVML does not work on the host (the telemetry service's word, else the missing
    driver library), or None when it does or its bindings are not installed at all."""
    nvml = (capabilities or {}).get("nvml")
    if not nvml:
        return None
    for service in services or ():
        state = ((service.get("detail") or {}).get("nvml") or {}) if service.get("name") == "telemetry" else {}
        if state.get("available") is False:
            return state.get("reason") or "it did not start"
    if nvml.get("driver_library") is False:
        return "the NVIDIA driver's library (libnvidia-ml) is not on this host"
    return None


class HostInfoScreen(ModalScreen[None]):
    """`info` is the reply of daemon.info."""

    BINDINGS = [Binding("escape,q,i", "close", "close"),
                # The console opens the notifications screen (a capability of its own): this screen only asks.
                Binding("n", "app.notifications", "notifications", tooltip="where the host sends alerts while no console is open")]

    def __init__(self, info, **kwargs):
        super().__init__(**kwargs)
        self.info = info

    def compose(self) -> ComposeResult:
        info = self.info
        python = (info.get("capabilities") or {}).get("python") or {}
        with VerticalScroll(classes="dialog", id="host-info"):
            yield Label("%s@%s" % (info.get("user", "?"), info.get("hostname", "?")), classes="dialog-title", markup=False)
            yield Static(Text("agent %s, build %s, protocol %s; Python %s (%s)\ndaemon pid %s, up %s; state in %s" % (
                info.get("agent_version"), info.get("build"), info.get("protocol"), python.get("version"), python.get("executable"),
                info.get("daemon_pid"), format_duration(info.get("uptime_s")), info.get("state_dir"))))
            yield Label("Can use", classes="help-section")
            yield Static(Text(capabilities_text(info.get("capabilities"), info.get("services"))), id="host-capabilities")
            yield Label("Services", classes="help-section")
            yield Static(services_table(info.get("services") or []), id="host-services")
            yield Label("n notifications (phone, chat), escape or i to close", classes="dialog-hint")

    def action_close(self):
        self.dismiss(None)
