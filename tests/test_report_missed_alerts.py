"""Back after being away (issue 40, item 4): a console that connects tells at once what the host
raised while no console followed it, however short the absence: a count, the first lines, and
`a` for the report that holds them. Against the real local agent, at 80x24, 120x40 and a
phone's size."""

import json
import re
import time

import pytest

from tests.helpers.pilot import notifications, screen_text
from tests.helpers.waits import wait_for, wait_until
from tui.app import SpecdeckApp
from tui.report.screen import AwayScreen
from tui.transport.connection import open_client

PHONE = (64, 60)


@pytest.mark.parametrize("size", [(80, 24), (120, 40), PHONE], ids=["80x24", "120x40", "phone"])
async def test_alerts_raised_while_the_console_was_closed_are_told_on_connecting(agent_home, size):
    # A console followed the host until two minutes ago: far less than the hour the full screen waits for.
    (agent_home / "report").mkdir()
    (agent_home / "report" / "watched.json").write_text(json.dumps({"last_watched_at": time.time() - 120}))
    client = open_client("local")  # a CLI's client: it does not count as a console watching
    try:
        job = client.call("jobs.submit", {"argv": ["sh", "-c", "exit 7"], "name": "overnight eval"})["id"]
        wait_for(lambda: [a for a in client.call("notify.list")["recent"] if a.get("job_id") == job], message="the host's alert")
    finally:
        client.close()
    app = SpecdeckApp(host="local")
    async with app.run_test(size=size) as pilot:
        await wait_until(pilot, lambda: any("while you were away" in (title or "") for title, _, _ in notifications(app)),
                         message="the alerts missed, told on connecting")
        [(title, body, _severity)] = [n for n in notifications(app) if "while you were away" in (n[0] or "")]
        assert re.match(r"1 alert while you were away from ", title), title
        assert job in body and "failed" in body and body.endswith("a: the report"), body
        await pilot.press("a")
        await wait_until(pilot, lambda: isinstance(app.screen, AwayScreen), message="the report on a")
        await wait_until(pilot, lambda: "Alerts" in screen_text(app), message="the report's alerts")
        assert job in app.screen.query_one("#away-report").render().plain
