"""`specdeck fleet` over real hosts: several users of one machine behind a real sshd, each its own
host with its own daemon (tests/fleet_fixtures.py). Jobs started with `specdeck run` on one, a
replayed 8-GPU host, a host with no GPU telemetry; a port that refuses, ports that accept and say
nothing, a host whose key nobody knows, a host an ocean away (a delay proxy)."""

import json
import time

from tests.helpers.cli import run_cli
from tests.helpers.waits import wait_for
from tui.fleet import model

ROW_KEYS = {"host", "state", "reason", "rtt_ms", "gpus", "jobs_running", "servers", "training", "alerts"}
GPU_KEYS = {"count", "busy", "memory_used_bytes", "memory_total_bytes", "max_temperature_c"}


def fleet_json(fleet, *hosts, check=None):
    result = run_cli("fleet", *hosts, "--json", env=fleet.env, check=check)
    return result, {row["host"]: row for row in json.loads(result.stdout)["hosts"]}


def live_jobs(fleet, host):
    jobs = json.loads(run_cli("jobs", host, "--json", env=fleet.env, check=0).stdout)
    return [job["id"] for job in jobs if job["process_state"] in ("running", "starting")]


def test_every_host_in_one_row_with_what_it_has(fleet_factory):
    fleet = fleet_factory(slow=0, silent=0)
    started = [json.loads(run_cli("run", "gpu-a", "--json", "--", "sleep", "600", env=fleet.env, check=0).stdout)["id"] for _ in range(2)]
    try:
        running = live_jobs(fleet, "gpu-a")
        assert set(started) <= set(running)

        # No HOST: the hosts the config's [fleet] lists, in its order; one that did not answer makes it exit 2.
        def counted():
            result, rows = fleet_json(fleet)
            return (result, rows) if rows["gpu-a"]["jobs_running"] == len(running) else None

        result, rows = wait_for(counted, 60, message="gpu-a's row counting its %d running jobs" % len(running))
        assert result.returncode == 2, result.stderr
        assert list(rows) == fleet.names()
        for row in rows.values():
            assert ROW_KEYS <= set(row)

        a, b, c = rows["gpu-a"], rows["gpu-b"], rows["gpu-c"]
        assert (a["state"], a["reason"], a["user"]) == ("up", None, fleet.host("gpu-a").user.name)
        assert a["rtt_ms"] > 0 and a["alerts"] == [] and a["servers"] == [] and a["training"] == []
        assert c["jobs_running"] == len(live_jobs(fleet, "gpu-c")) and c["user"] == fleet.host("gpu-c").user.name
        # The replayed host's GPUs against its own telemetry: the same GPUs, the same totals.
        sample = json.loads(run_cli("gpus", "gpu-b", "--json", env=fleet.env, check=0).stdout)
        assert GPU_KEYS <= set(b["gpus"]) and b["gpus"]["count"] == len(sample["gpus"]) == 8
        assert b["gpus"]["memory_total_bytes"] == sum(gpu["memory_total_bytes"] for gpu in sample["gpus"])
        assert 0 <= b["gpus"]["busy"] <= 8 and b["gpus"]["stale"] is False and b["gpus"]["age_s"] < 5
        assert 10 <= b["gpus"]["max_temperature_c"] <= 100  # each figure against its sample: tests/test_fleet_summary.py
        # A host without NVML says why it shows no GPU.
        assert c["gpus"] is None and "NVML" in c["gpus_reason"]

        refused, unknown = rows["refused-1"], rows["unknown-key"]
        assert refused["state"] == "refused" and "Connection refused" in refused["reason"] and refused["gpus"] is None
        assert unknown["state"] == "unknown host key" and "\n" not in unknown["reason"]
        assert unknown["reason"].startswith("unknown host key for fleet-host-key-nobody-knows: ssh-ed25519 SHA256:")
        assert (unknown["jobs_running"], unknown["servers"], unknown["alerts"]) == (None, [], [])

        # Only hosts that answer: exit 0.
        assert fleet_json(fleet, "gpu-a", "gpu-c")[0].returncode == 0

        # For a person: a line per host, the down ones with their reason.
        shown = run_cli("fleet", env=fleet.env, check=2).stdout.splitlines()
        assert shown[0].split()[:3] == ["HOST", "STATE", "RTT"] and shown[1 + len(fleet.hosts)] == ""
        line = {text.split()[0]: text for text in shown[1:1 + len(fleet.hosts)]}
        assert line["gpu-b"].split()[1] == "up" and " %d/8 " % b["gpus"]["busy"] in line["gpu-b"]
        # No GPU: a word in its column, the columns after it where they are on the other rows; why, below the rows.
        header = shown[0]
        assert " no NVML " in line["gpu-c"] and line["gpu-c"][header.index("JOBS"):].split()[0] == str(c["jobs_running"])
        notes = shown[2 + len(fleet.hosts):]
        assert "gpu-c: no GPUs shown: %s" % c["gpus_reason"] in notes and not [note for note in notes if note.startswith("gpu-b")]
        assert line["refused-1"].split()[1] == "refused" and "Connection refused" in line["refused-1"]
        assert "unknown host key for fleet-host-key-nobody-knows" in line["unknown-key"]
    finally:
        for job in started:
            run_cli("stop", "gpu-a", job, "--grace", "1", env=fleet.env)


def test_hosts_are_asked_at_once_not_one_after_another(fleet_factory):
    """Three hosts that each hold the command for their whole connect timeout (they accept and
    say nothing) and a host an ocean away: asked one after another they would take at least the
    sum of those timeouts; asked at once, about the longest of them."""
    fleet = fleet_factory(slow=1, rtt_s=0.3, silent=3, silent_timeout_s=3.0, refused=0, unknown_key=0)
    fleet_json(fleet, "gpu-c", check=0)  # the agent is on user c's host and its daemon runs (the slow host is c too)
    silent = [fleet.host(name) for name in fleet.names("silent")]
    began = time.monotonic()
    result, rows = fleet_json(fleet, "slow-1", *[h.alias for h in silent])
    took_s = time.monotonic() - began
    assert result.returncode == 2
    for host in silent:
        assert rows[host.alias]["state"] == "timed out", rows[host.alias]
        assert "3 s" in rows[host.alias]["reason"]
    slow = rows["slow-1"]
    assert slow["state"] == "up" and slow["rtt_ms"] >= 300  # it answered through the long link
    assert took_s < sum(h.timeout_s for h in silent), "%.1f s: the hosts were waited for one after another" % took_s


def test_no_host_named_and_none_listed_is_one_usage_line(tmp_path):
    result = run_cli("fleet", home=tmp_path, env={"XDG_CONFIG_HOME": str(tmp_path / "config")})
    assert result.returncode == 2 and result.stdout == ""
    (line,) = result.stderr.splitlines()
    assert line.startswith("specdeck: no hosts: name them (specdeck fleet HOST ...) or list them in ") and "[fleet] hosts = [" in line


def test_the_rows_cells_are_the_json_rows():
    """The console's pane and the command read the same row: a stale figure keeps its age."""
    summary = {"gpus": {"count": 8, "busy": 3, "memory_used_bytes": 3 << 30, "memory_total_bytes": 8 * (140 << 30),
                        "max_temperature_c": 71.4, "throttling": 1, "age_s": 40.0, "stale": True},
               "jobs_running": 2, "servers": [{"id": "j8", "accept_length": 2.0, "break_even_accept_length": 2.46, "age_s": 0.5,
                                               "stale": False}],
               "training": [{"id": "j9", "step": 1840, "eta_s": 7800, "predicted_accept_length": 2.61, "age_s": 0.2, "stale": False}],
               "alerts": [{"title": "GPU alert", "urgent": True}, {"title": "j3 finished", "urgent": False}]}
    row = model.row("gpu01", model.UP, None, 0.0114, summary, since_s=6.0)
    assert row["gpus"]["age_s"] == 46.0 and row["servers"][0]["stale"] is True  # 6 s since it came: no longer current
    cells = dict(zip(model.COLUMNS, model.cells(row)))
    assert cells["RTT"] == "11 ms" and cells["GPUS BUSY"] == "3/8 (stale 46 s)" and cells["MEM GiB"] == "3.0/1120.0 (stale 46 s)"
    assert cells["HOTTEST"] == "71°C (stale 46 s)" and cells["JOBS"] == "2" and cells["ALERTS"] == "2 (1 urgent)"
    assert cells["SERVERS AL/BREAK-EVEN"] == "j8 2.00/2.46 (stale 6 s)"
    assert cells["TRAINING STEP ETA AL"] == "j9 step 1840 ETA 2h10m AL 2.61 (stale 6 s)"
