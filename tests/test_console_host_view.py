"""The host view (`i`) on a host without a working NVML (this machine: the bindings are
installed, the driver's library is not): NVML is not among what the host can use, and the
view says why."""

import ctypes.util

import pytest
from textual.widgets import Static

from tests.helpers.pilot import SIZE, connected
from tests.helpers.waits import wait_until
from tui.app import SpecdeckApp
from tui.screens.host_info import HostInfoScreen


@pytest.mark.skipif(bool(ctypes.util.find_library("nvidia-ml")), reason="this machine has NVIDIA's driver library")
async def test_the_host_view_does_not_list_nvml_as_usable_when_it_failed_to_load(agent_home):
    app = SpecdeckApp(host="local")
    async with app.run_test(size=SIZE) as pilot:
        await connected(pilot)
        # The telemetry service has tried NVML once its first sample is out.
        await wait_until(pilot, lambda: (app.client.call("telemetry.latest") or {}).get("nvml") is not None, message="a first sample")
        await pilot.press("i")
        await wait_until(pilot, lambda: isinstance(app.screen, HostInfoScreen), message="the host screen")
        can_use = str(app.screen.query_one("#host-capabilities", Static).render())
        listed, _, why = " ".join(can_use.split("\n")).partition("   (nvml did not load: ")
        assert "nvml -" in listed.split("  "), listed
        assert "safetensors" in listed and "safetensors -" not in listed  # what does load is still listed
        assert "NVML" in why and why.endswith(")"), why
