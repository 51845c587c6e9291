"""The "while you were away" screen: shown by itself when the console connects to a host that no
console followed for over an hour, on `a` afterwards, and its layout at 80x24."""

import json
import time

from tests.helpers.pilot import SIZE, connected, screen_text
from tests.helpers.snapshot import NOW, SnapshotApp, freeze
from tests.helpers.waits import wait_for, wait_until
from tui.app import SpecdeckApp
from tui.report.screen import AwayScreen


async def test_a_host_nobody_watched_for_two_hours_opens_on_the_night(agent_home):
    (agent_home / "report").mkdir()
    (agent_home / "report" / "watched.json").write_text(json.dumps({"last_watched_at": time.time() - 2 * 3600 - 60}))
    app = SpecdeckApp(host="local")
    async with app.run_test(size=SIZE) as pilot:
        await wait_until(pilot, lambda: "While you were away" in screen_text(app), message="the while-you-were-away screen")
        text = screen_text(app)
        assert "While you were away from " in text and text.count("2 h 01 min") == 1 and "escape (or a, q) closes it" in text and "Jobs" in text and "Daemon" in text
        await pilot.press("escape")
        await wait_until(pilot, lambda: not isinstance(app.screen, AwayScreen), message="the screen to close")
        await connected(pilot)
        job = app.client.call("jobs.submit", {"argv": ["sh", "-c", "exit 7"], "name": "overnight eval"})["id"]
        wait_for(lambda: app.client.call("jobs.get", {"id": job})["state"] == "failed")
        await pilot.press("a")
        await wait_until(pilot, lambda: "Report of " in screen_text(app), message="the report on a")
        text = screen_text(app)
        assert "Report of " in text and text.count("12 h 00 min") == 1 and "escape (or a, q) closes it" in text and "%s command overnight eval: started" % job in text and "(exit 7)" in text
        # The console follows the host while it shows it: the host counts it as watched now.
        assert time.time() - app.screen.report["last_watched_at"] < 60


REPORT = {
    "since": NOW - 9 * 3600, "until": NOW, "host": "gpu01", "errors": {}, "cut": [],
    "jobs": [
        {"id": "j9", "name": "finetune aq-k2 -> k2.5", "kind": "training", "state": "failed", "exit_code": 1, "signal": None,
         "started_at": NOW - 20411, "ended_at": NOW - 3000, "started_in_window": False, "running": False, "runtime_s": 17411.0,
         "gpu_utilization_percent": {"mean": 91.0, "max": 100.0}},
        {"id": "j8", "name": "vllm serve K2.5 + eagle3 (K=3)", "kind": "server", "state": "running", "exit_code": None, "signal": None,
         "started_at": NOW - 11525, "ended_at": None, "started_in_window": False, "running": True, "runtime_s": 11525.0,
         "gpu_utilization_percent": {"mean": 64.0, "max": 98.0}},
    ],
    "training": [{"id": "j9", "name": "finetune aq-k2 -> k2.5", "state": "failed", "steps": {"from": 1200, "to": 1840},
                  "loss": {"from": 1.61, "to": 1.23}, "checkpoints": 3,
                  "best_checkpoint": {"name": "2", "step": 1800, "verdict": "above break-even", "predicted_accept_length": 2.61,
                                      "measured_accept_length": 2.48}}],
    "servers": [{"id": "j8", "name": "vllm serve K2.5 + eagle3 (K=3)", "state": "running",
                 "accept_length": {"min": 1.9, "median": 2.55, "max": 3.1}, "samples": 900, "break_even": 2.46, "under_break_even_s": 2520.0}],
    "downloads": [{"id": "j7", "repo": "AQ-MedAI/Kimi-K2-Instruct-eagle3", "state": "verified", "finished": True, "verdict": {"status": "verified"},
                   "bytes_total": 2382320506, "bytes_done": 2382320506, "ended_at": NOW - 7159, "error": None}],
    "alerts": [{"id": "job:j9:1", "time": NOW - 3000, "kind": "job_failed", "title": "j9 failed on gpu01", "urgent": True, "job_id": "j9",
                "channels": [{"channel": "c1", "state": "sent", "tries": 1, "error": None},
                             {"channel": "c2", "state": "pending", "tries": 4, "error": "HTTP 503"}]}],
    "disks": [{"path": "/data", "lowest_free_bytes": 41 * 2**30, "lowest_at": NOW - 5000, "free_bytes_now": 60 * 2**30, "total_bytes": 2**41}],
    "daemon": {"started_at": NOW - 4 * 3600, "uptime_s": 4 * 3600.0, "pid": 900, "restarts": [{"at": NOW - 4 * 3600, "pid": 900, "version": "0.1.0"}],
               "service_restarts": []},
}


def test_away_screen_layout(snap_compare, monkeypatch):
    freeze(monkeypatch)
    monkeypatch.setenv("TZ", "UTC")
    time.tzset()
    monkeypatch.setattr(time, "localtime", time.gmtime)

    async def show(pilot):
        await pilot.pause()
        pilot.app.push_screen(AwayScreen(REPORT, away=True))
        await pilot.pause(0.3)

    try:
        assert snap_compare(SnapshotApp(host="gpu01"), terminal_size=(80, 24), run_before=show)
    finally:
        monkeypatch.undo()
        time.tzset()
