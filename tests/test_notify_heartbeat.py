"""Heartbeats: the host's daemon pings a URL (a GET) every period, so a service such as
healthchecks.io raises its own alarm when the host goes silent. A real loopback receiver sees the
pings at the period, `/fail` on a Healthchecks URL while a failure is open (its `/ping/<uuid>`
path makes it one, as a self-hosted Healthchecks is), none once the daemon is SIGKILLed, the pings
again once a new connection starts the daemon, and none after `--remove`.

The product's floor is 5 s; these tests lower it through SPECDECK_HEARTBEAT_MIN_S (read by the
daemon they start) so that a few periods take a few seconds.

The console's side: with several hosts open, one that stays unreachable (a connect that is
refused) for the app's threshold (120 s; shortened here through its constructor) is a desktop
alert of the console's own, once, and its return another."""

import base64
import json
import os
import signal
import stat
import time

import pytest
from textual.drivers.headless_driver import HeadlessDriver

from remote.notify import heartbeat
from remote.report.text import render
from tests.helpers.cli import daemon_pid, run_cli
from tests.helpers.fleet import LocalFleet
from tests.helpers.waits import wait_for, wait_until
from tui.app import UNREACHABLE_AFTER_S, SpecdeckApp

PERIOD_S = 1.0
CHECK = "/ping/5f2c0b9e-7d3a-4c1e-9b8f-2a6d4e1c0f37"
PUSH = "/api/push/kQ7uptime?status=up"


def pings(receiver, path):
    return [r for r in list(receiver.requests) if r["path"] == path]


def silent_for(receiver, seconds):
    """True once the receiver has had no request for `seconds` (a bounded wait, asked of it)."""
    return lambda: time.time() - max([r["at"] for r in list(receiver.requests)] or [0]) >= seconds


def test_the_floor_and_which_urls_get_fail(monkeypatch):
    monkeypatch.delenv(heartbeat.MIN_EVERY_ENV, raising=False)
    assert heartbeat.parse_every("5s") == 5.0 and heartbeat.parse_every("5m") == 300.0
    for short in ("4s", "0.5s", 1):
        with pytest.raises(ValueError, match="from 5 s"):
            heartbeat.parse_every(short)
    for url in ("https://hc-ping.com/5f2c0b9e-7d3a-4c1e-9b8f-2a6d4e1c0f37", "https://hc-ping.com/PINGKEY/backup-job",
                "https://healthchecks.io/ping/5f2c0b9e", "https://hc.example.org" + CHECK):
        assert heartbeat.is_healthchecks(url) and heartbeat.ping_url(url, alarm=True) == url + "/fail"
        assert heartbeat.ping_url(url, alarm=False) == url
    for url in ("https://kuma.example.org" + PUSH, "https://uptime.betterstack.com/api/v1/heartbeat/Xy12"):
        assert not heartbeat.is_healthchecks(url) and heartbeat.ping_url(url, alarm=True) == url
    assert heartbeat.ping_url("https://hc-ping.com/abc123?rid=7", True) == "https://hc-ping.com/abc123/fail?rid=7"


def test_pings_at_the_period_fail_while_a_failure_is_open_stop_with_the_daemon_and_come_back(agent_home, receiver, monkeypatch, tmp_path):
    from tui.transport.connection import open_client

    monkeypatch.setenv(heartbeat.MIN_EVERY_ENV, str(PERIOD_S))
    laptop = tmp_path / "laptop"
    laptop.mkdir()
    check_url = "http://hb:s3cr3t-pw@127.0.0.1:%d%s" % (receiver.port, CHECK)
    added = run_cli("notify", "local", "--heartbeat", check_url, "--every", "1s", home=laptop, check=0).stdout
    assert added.strip() == "added h1  heartbeat  %s/…  every 1 s  (healthchecks: /fail while a failure or stall is open)" % receiver.url
    client = open_client("local")
    try:
        client.call("notify.heartbeat", {"url": receiver.url + PUSH, "every": 1})
        with pytest.raises(Exception, match="from 1 s"):
            client.call("notify.heartbeat", {"url": receiver.url + PUSH, "every": "0.5s"})

        # At the period, as the receiver sees it, each a GET with the URL's user:pass as basic auth.
        seen = wait_for(lambda: (lambda p: p if len(p) >= 3 else None)(pings(receiver, CHECK)), message="three pings")
        gaps = [b["at"] - a["at"] for a, b in zip(seen, seen[1:])]
        print("heartbeat period as the receiver sees it: %s" % ", ".join("%.2f s" % g for g in gaps))
        assert all(gap >= 0.8 * PERIOD_S for gap in gaps)
        assert {r["method"] for r in seen} == {"GET"}
        assert seen[0]["headers"]["Authorization"] == "Basic " + base64.b64encode(b"hb:s3cr3t-pw").decode()
        wait_for(lambda: pings(receiver, PUSH), message="the plain URL pinged")
        listed = client.call("notify.list")["heartbeats"]
        first = listed[0]
        assert (first["id"], first["every_s"], first["last_error"], first["last_fail"], first["healthchecks"]) == ("h1", 1.0, None, False, True)
        assert first["url"] == receiver.url + "/…" and first["pings"] >= 3 and first["next_at"] > first["last_at"]
        assert listed[1]["healthchecks"] is False
        store = agent_home / "notify" / "heartbeats.json"
        assert stat.S_IMODE(os.stat(store).st_mode) == 0o600 and "s3cr3t-pw" in store.read_text()

        # A job that fails raises an alert of category failed: while it is open, the check gets
        # /fail (the plain URL still its own).
        client.call("jobs.submit", {"argv": ["sh", "-c", "exit 1"], "name": "dies"})
        wait_for(lambda: pings(receiver, CHECK + "/fail"), message="a ping to /fail")
        pushed = len(pings(receiver, PUSH))
        wait_for(lambda: len(pings(receiver, PUSH)) > pushed, message="the plain URL pinged after")
        assert not [r for r in receiver.requests if r["path"].startswith("/api/push/") and r["path"] != PUSH]

        # Listed with its last ping, its result and the next; the URL only masked.
        listing = run_cli("notify", "local", home=laptop, check=0).stdout
        assert "h1  heartbeat  %s/…  every 1 s" % receiver.url in listing and "h2  heartbeat" in listing
        assert "last ping " in listing and "ok, sent to /fail (held there by: j" in listing and " failed on " in listing
        assert "s3cr3t" not in listing and CHECK[6:] not in listing

    # The daemon SIGKILLed: the pings stop.
        pid = daemon_pid(agent_home)
        os.kill(pid, signal.SIGKILL)
        wait_for(lambda: daemon_pid(agent_home) is None, message="the daemon gone")
    finally:
        client.close()
    wait_for(silent_for(receiver, 2 * PERIOD_S), message="no ping for two periods")
    before = len(receiver.requests)

    # A new connection starts the daemon again; its heartbeats with it.
    client = open_client("local")
    try:
        restarted = daemon_pid(agent_home)
        assert restarted not in (None, pid)
        receiver.wait_for(before + 2)
        # The morning report counts the restart: the new daemon's start, after the first.
        report = json.loads(run_cli("report", "local", "--since", "1h", "--json", home=laptop, check=0).stdout)
        daemon = report["daemon"]
        assert daemon["restart_count"] == 1 and [r["pid"] for r in daemon["restarts"]] == [restarted] and daemon["pid"] == restarted
        assert "; restarted once: " in render(report)  # as `report` prints it
        assert pings(receiver, CHECK + "/fail")[-1]["at"] > receiver.requests[before - 1]["at"]  # the failure still open
        assert len(pings(receiver, PUSH)) > 0
    finally:
        client.close()

    # --remove ends them.
    assert run_cli("notify", "local", "--remove", "h1", home=laptop, check=0).stdout.strip() == "removed h1"
    client = open_client("local")
    try:
        assert client.call("notify.heartbeat_remove", {"id": "h2"}) == {"removed": "h2"}
    finally:
        client.close()
    wait_for(silent_for(receiver, 2 * PERIOD_S), message="no ping for two periods after --remove")
    assert "heartbeat" not in run_cli("notify", "local", home=laptop, check=0).stdout
    assert "h1" not in store.read_text()


def test_a_repaired_mismatch_and_a_job_that_ran_again_send_the_heartbeat_back_to_its_plain_url(agent_home, receiver, hub, monkeypatch, tmp_path):
    from tests.checkpoint_fixtures import write_drafter

    monkeypatch.setenv(heartbeat.MIN_EVERY_ENV, str(PERIOD_S))
    laptop = tmp_path / "laptop"
    laptop.mkdir()
    write_drafter(tmp_path / "drafter-src")
    files = {name: (tmp_path / "drafter-src" / name).read_bytes() for name in ("config.json", "model.safetensors")}
    hub.add_repo("team/tiny-eagle3", files)
    env = {"XDG_CONFIG_HOME": str(tmp_path / "config"), "HF_ENDPOINT": "", "HF_TOKEN": ""}
    target = tmp_path / "models" / "tiny-eagle3"
    run_cli("download", "local", "team/tiny-eagle3", "--endpoint", hub.url, "--local-dir", target, "--wait", home=laptop, env=env, check=0)
    run_cli("notify", "local", "--heartbeat", receiver.url + CHECK, "--every", "1s", home=laptop, check=0)
    wait_for(lambda: pings(receiver, CHECK), message="the first plain ping")

    def fail_after(at):
        return [r for r in pings(receiver, CHECK + "/fail") if r["at"] > at]

    def plain_only_after(at, count=2):
        """Once `count` pings came after `at`, whether the last ones went to the plain URL."""
        after = [r for r in list(receiver.requests) if r["at"] > at]
        return after[-count:] if len(after) >= count and all(r["path"] == CHECK for r in after[-count:]) else None

    # A file changed on disk: the verification finds the mismatch, the check goes to /fail and
    # `notify` says which alert holds it there.
    with open(target / "config.json", "r+b") as f:
        f.write(b"[")
    assert run_cli("verify", "local:%s" % target, "--json", home=laptop, env=env).returncode == 1
    broken = json.loads(run_cli("jobs", "local", "--json", home=laptop, env=env, check=0).stdout)[-1]["id"]
    wait_for(lambda: fail_after(0), message="a ping to /fail for the mismatch")
    listing = wait_for(lambda: (lambda text: text if "/fail (held there by: verification failed on " in text else None)(
        run_cli("notify", "local", home=laptop, check=0).stdout), message="notify naming what holds the check on /fail")
    assert "(%s)" % broken in listing, listing

    # Repaired in the same minute (the file as the hub has it, verified again): plain pings again.
    (target / "config.json").write_bytes(files["config.json"])
    assert run_cli("verify", "local:%s" % target, "--json", home=laptop, env=env).returncode == 0
    repaired_at = time.time()
    wait_for(lambda: plain_only_after(repaired_at, 3), message="plain pings after the repair")
    listing = run_cli("notify", "local", home=laptop, check=0).stdout
    assert "ok, next " in listing and "sent to /fail" not in listing and "held there by" not in listing, listing

    # A job that failed, then ran again and succeeded: /fail while it is open, plain once it ran well.
    flag = tmp_path / "ready"
    argv = ["sh", "-c", "test -e %s" % flag]
    run_cli("run", "local", "--", *argv, home=laptop, check=0)
    failed_at = time.time()
    wait_for(lambda: fail_after(failed_at), message="a ping to /fail for the failed job")
    flag.touch()
    run_cli("run", "local", "--", *argv, home=laptop, check=0)
    wait_for(lambda: [j for j in json.loads(run_cli("jobs", "local", "--json", home=laptop, check=0).stdout)
                      if j["process_state"] == "succeeded" and j["argv"][1:] == argv[1:]], message="the job that ran again succeeded")
    again_at = time.time()
    wait_for(lambda: plain_only_after(again_at, 3), message="plain pings after the job ran again")


async def test_a_host_of_the_fleet_unreachable_for_the_threshold_is_a_desktop_alert_and_its_return_another(tmp_path, monkeypatch):
    monkeypatch.setenv("TERM_PROGRAM", "WezTerm")
    monkeypatch.delenv("SPECDECK_DESKTOP_NOTIFY", raising=False)
    assert UNREACHABLE_AFTER_S == 120.0 and SpecdeckApp(hosts=["a", "b"]).unreachable_after_s == 120.0
    fleet = LocalFleet(tmp_path, ["alpha", "gamma"])
    fleet.down.add("gamma")
    written = []  # what the app writes to the terminal, from its start
    monkeypatch.setattr(HeadlessDriver, "write", lambda driver, data: written.append(data))
    app = SpecdeckApp(hosts=["alpha", "gamma"], connect=fleet.connect, unreachable_after_s=1.0)
    try:
        async with app.run_test(size=(120, 30)) as pilot:
            away = "\x1b]777;notify;gamma unreachable;gamma has not been reachable for "
            await wait_until(pilot, lambda: any(w.startswith(away) for w in written), message="gamma's desktop alert")
            sent = next(w for w in written if w.startswith(away))
            assert sent.endswith(": cannot connect to gamma port 22: Connection refused\x07")
            # its toast, asked for with the alert (it lasts 20 s: a loaded machine may take longer to connect alpha)
            assert any(n.title == "gamma unreachable" and n.severity == "error" for n in app._notifications)
            await wait_until(pilot, lambda: app.link_of("alpha").state == "connected", message="alpha connected")
            assert not any("\x1b]777;notify;alpha" in w for w in written)  # a host that answers is never said away
            fleet.down.discard("gamma")
            await wait_until(pilot, lambda: "\x1b]777;notify;gamma is back;gamma is reachable again\x07" in written,
                             timeout_s=30, message="gamma back, said")
            assert sum(w.startswith(away) for w in written) == 1  # told once while it was away
    finally:
        fleet.stop()
