"""`i` shows the host: the agent, what the host can use, and the daemon's services with their
state; a service that keeps failing shows its error and when it tries again."""

from tests.helpers.pilot import SIZE, connected, screen_text
from tests.helpers.waits import wait_until
from tui.app import SpecdeckApp
from tui.screens.host_info import HostInfoScreen, services_table


async def test_i_shows_the_services_of_the_daemon(agent_home):
    app = SpecdeckApp(host="local")
    async with app.run_test(size=SIZE) as pilot:
        await connected(pilot)
        await pilot.press("i")
        await wait_until(pilot, lambda: isinstance(app.screen, HostInfoScreen), message="the host screen")
        text = screen_text(app)
        for name in ("job-events", "history", "telemetry", "serving", "notify"):
            assert name in text, "service %s not listed" % name
        assert "running" in text and "agent 0.1.0" in text and "protocol" in text
        await pilot.press("escape")
        await wait_until(pilot, lambda: not isinstance(app.screen, HostInfoScreen), message="the screen to close")


def test_a_failing_service_shows_why_and_when_it_tries_again():
    from rich.console import Console

    table = services_table([{"name": "telemetry", "state": "retrying", "error": "NVMLError: driver not loaded", "failures": 3,
                             "next_try_at": 1000.0 + 8}], now=1000.0)
    console = Console(width=120, record=True)
    console.print(table)
    out = console.export_text()
    assert "telemetry" in out and "retrying" in out and "NVMLError: driver not loaded (3 in a row, next try in 8 s)" in out


def test_service_details_read_as_times_sizes_and_short_numbers():
    from rich.console import Console

    table = services_table([{"name": "history", "state": "running", "detail": {
        "file_bytes": 123608, "last_flush_at": 1_780_000_000.5, "cpu_ms_per_scrape": None, "cpu_ms_per_sample": 0.60812}}])
    console = Console(width=200, record=True)
    console.print(table)
    out = console.export_text()
    assert "file bytes 123.61 kB (120.71 KiB)" in out and "cpu ms per sample 0.608" in out
    assert "None" not in out and "1780000000" not in out
