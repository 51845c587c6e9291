"""GPU telemetry on the host. CI has no GPU: the NVML parts run on a replay of what NVML returned
on an H200 host (tests/data/, recorded with benchmarks/record_nvml.py): a fake pynvml module
stands in for the GPU only; the query layer, the sampler, the job mapping, the history store,
the alerts and the daemon are the real ones. Host figures, the no-NVML path, history across a
daemon restart and the zipapp run for real."""

import copy
import json
import os
import signal
import subprocess
import sys
import time
import zipfile

import pytest

from remote.core.daemon import Daemon
from remote.history.store import HistoryStore
from remote.telemetry.alerts import DEFAULTS as ALERT_DEFAULTS, AlertLog, AlertRules
from remote.telemetry import host as host_metrics
from remote.telemetry.nvml import Nvml
from remote.telemetry.recording import ReplayNvml, load
from remote.telemetry.sample import apply_delta
from remote.telemetry.sampler import TelemetrySampler
from tests.helpers.cli import REPO_ROOT, daemon_pid, run_cli
from tests.helpers.waits import wait_for
from tui.transport.connection import open_client

ONE_GPU = REPO_ROOT / "tests" / "data" / "nvml-h200.json.gz"
TWO_GPUS = REPO_ROOT / "tests" / "data" / "nvml-h200x2.json.gz"
RATE_FIELDS = {"pcie_rx_bytes_per_s", "pcie_tx_bytes_per_s", "nvlink_rx_bytes_per_s", "nvlink_tx_bytes_per_s"}


def phase_frames(document, phase):
    return [i for i, frame in enumerate(document["frames"]) if frame["phase"] == phase]


def recorded_pid(document):
    return next(p["pid"] for f in document["frames"] for p in f["sample"]["processes"])


class FakeHistory:
    """daemon.history as the sampler sees it, over a real store with a clock of the test's."""

    def __init__(self, store):
        self.store = store
        self.add_many = store.add_many


def sampler_on(replay, agent_home, device_file=None):
    daemon = Daemon("test")
    sampler = TelemetrySampler(daemon, nvml_module=replay)
    sampler.start()
    if device_file is not None:
        sampler.mapper.device_prefix = str(device_file)
    return daemon, sampler


# ---------------------------------------------------------------- the query layer


def test_replay_gives_what_the_sampler_made_on_the_h200(agent_home):
    """Frame by frame, the sampler over the replay makes the sample it made live on the GPU."""
    document = load(ONE_GPU)
    replay = ReplayNvml(document)
    _, sampler = sampler_on(replay, agent_home)
    for index, frame in enumerate(document["frames"]):
        replay.frame = index
        sampler.sample_once(frame["time"], frame["time"])
        live = frame["sample"]["gpus"][0]
        replayed = sampler.latest_sample()["gpus"][0]
        for field, value in live.items():
            if field not in RATE_FIELDS:
                assert replayed[field] == value, (index, field)
    load_frame = document["frames"][phase_frames(document, "load")[-1]]["sample"]["gpus"][0]
    assert load_frame["utilization_percent"] >= 95 and load_frame["power_w"] > 400 and load_frame["pcie_rx_bytes_per_s"] > 1e9
    assert load_frame["name"] == "NVIDIA H200" and load_frame["memory_total_bytes"] > 140 * 2 ** 30


def test_what_a_gpu_does_not_report_is_absent_not_an_error(agent_home):
    document = load(ONE_GPU)
    # The H200 has no NVLink in a one-GPU slice: the recording has none; and make the driver
    # refuse the temperature (not supported) and the clocks (no permission) from frame 3 on.
    broken = copy.deepcopy(document)
    for frame in broken["frames"][3:]:
        frame["calls"]["nvmlDeviceGetTemperature(gpu0,0)"] = [{"e": 3}]
        frame["calls"]["nvmlDeviceGetClockInfo(gpu0,1)"] = [{"e": 4}]
    replay = ReplayNvml(broken)
    session = Nvml(replay)
    assert session.open() and len(session.gpus) == 1
    gpu = session.gpus[0]
    replay.frame = 2
    first = gpu.read(100.0)
    assert first["temperature_c"] is not None and first["nvlink_rx_bytes_per_s"] is None and first["nvlink_count"] is None
    replay.frame = 4
    calls = replay.calls
    second = gpu.read(101.0)
    assert second["temperature_c"] is None and second["sm_clock_mhz"] is None and second["memory_clock_mhz"] is not None
    # Asked once, then left alone: a later sample does not ask the driver for them again.
    replay.frame = 5
    before = replay.calls
    gpu.read(102.0)
    assert replay.calls - before == (before - calls) - 2
    assert session.error_counts == {"NVMLError_NotSupported": 1, "NVMLError_NoPermission": 1}


def test_a_lost_gpu_is_marked_and_the_others_keep_reporting(agent_home):
    broken = copy.deepcopy(load(TWO_GPUS))
    for frame in broken["frames"][5:]:
        frame["calls"]["nvmlDeviceGetUtilizationRates(gpu1)"] = [{"e": 15}]  # NVML_ERROR_GPU_IS_LOST
    replay = ReplayNvml(broken)
    _, sampler = sampler_on(replay, agent_home)
    replay.frame = 6
    sampler.sample_once(1000.0, 1000.0)
    gpus = sampler.latest_sample()["gpus"]
    assert gpus[1]["lost"] is True and gpus[1]["utilization_percent"] is None
    assert "lost" not in gpus[0] and gpus[0]["utilization_percent"] is not None


def test_two_gpus_show_nvlink_traffic_between_them(agent_home):
    document = load(TWO_GPUS)
    replay = ReplayNvml(document)
    _, sampler = sampler_on(replay, agent_home)
    rates = []
    for index in phase_frames(document, "load"):
        replay.frame = index
        sampler.sample_once(1000.0 + index, 1000.0 + index)
        rates.append(sampler.latest_sample()["gpus"][0]["nvlink_tx_bytes_per_s"])
    assert sampler.latest_sample()["gpus"][0]["nvlink_count"] == 18
    assert max(r or 0 for r in rates) > 10e9  # the copies from GPU 0 to GPU 1, tens of GB/s


# ---------------------------------------------------------------- processes and jobs


def start_gpu_job(daemon, device_file, argv_prefix=()):
    """A real job whose process holds `device_file` open, as a CUDA process holds /dev/nvidia*."""
    script = "import time; f = open(%r); time.sleep(120)" % str(device_file)
    job = daemon.jobs.submit(list(argv_prefix) + [sys.executable, "-c", script], name="holds the GPU")
    wait_for(lambda: daemon.jobs.describe(job["id"])["pid"], 30)
    pid = daemon.jobs.describe(job["id"])["pid"]
    wait_for(lambda: any(os.readlink("/proc/%d/fd/%s" % (pid, fd)) == str(device_file) for fd in os.listdir("/proc/%d/fd" % pid)), 30)
    return job, pid


def test_gpu_processes_map_to_jobs_and_other_namespaces_are_not_guessed(agent_home, tmp_path):
    document = load(TWO_GPUS)
    device_file = tmp_path / "nvidia0"
    device_file.write_text("")
    daemon = Daemon("test")
    job, pid = start_gpu_job(daemon, device_file)
    # The same job with its marker stripped from the environment: found by its session.
    unmarked, unmarked_pid = start_gpu_job(daemon, device_file, ["env", "-u", "SPECDECK_JOB_ID"])
    recorded = recorded_pid(document)
    replay = ReplayNvml(document, pid_map={recorded: pid}, gpu_count=3)
    sampler = TelemetrySampler(daemon, nvml_module=replay)
    sampler.start()
    sampler.mapper.device_prefix = str(device_file)
    replay.frame = phase_frames(document, "load")[3]
    try:
        sampler.sample_once(1000.0, 1000.0)
        processes = sampler.latest_sample()["processes"]
        mine = [p for p in processes if p["pid"] == pid]
        assert [p["gpu_index"] for p in mine] == [0, 1] and all(p["job_id"] == job["id"] for p in mine)
        assert mine[0]["memory_bytes"] > 20 * 2 ** 30 and "time.sleep(120)" in mine[0]["command"]
        assert abs(mine[0]["started_at"] - daemon.jobs.describe(job["id"])["started_at"]) < 5
        # GPU 2 repeats GPU 0 with its own process ids: not in this /proc, so another namespace.
        foreign = [p for p in processes if p["gpu_index"] == 2]
        assert foreign and all(p == {"pid": p["pid"], "other_namespace": True, "gpu_index": 2, "memory_bytes": p["memory_bytes"],
                                     "kind": "compute"} for p in foreign)
        # A pid this /proc has, but whose process holds no GPU: the same number in another namespace.
        replay.pid_map = {recorded: os.getpid()}
        sampler.sample_once(1001.0, 1001.0)
        assert all(p.get("other_namespace") for p in sampler.latest_sample()["processes"])
        replay.pid_map = {recorded: unmarked_pid}
        sampler.sample_once(1002.0, 1002.0)
        assert {p["job_id"] for p in sampler.latest_sample()["processes"] if p["pid"] == unmarked_pid} == {unmarked["id"]}
    finally:
        daemon.jobs.stop(job["id"], grace_s=1)
        daemon.jobs.stop(unmarked["id"], grace_s=1)


# ---------------------------------------------------------------- storage, stream, alerts


def test_samples_are_stored_downsampled_and_streamed_as_small_deltas(agent_home, tmp_path):
    document = load(ONE_GPU)
    clock = [1_750_000_000.0]
    store = HistoryStore(str(tmp_path / "history.sqlite"), clock=lambda: clock[0]).open()
    replay = ReplayNvml(document)
    daemon, sampler = sampler_on(replay, agent_home)
    daemon.history = FakeHistory(store)
    start = clock[0]
    # The recording's idle -> load -> stall -> after, replayed for 3 minutes at 1 Hz.
    for second in range(180):
        replay.frame = second % len(document["frames"])
        clock[0] = start + second
        sampler.sample_once(clock[0], clock[0])
    clock[0] += 120
    store.flush()
    store.maintain_for(5.0)
    # One name for the capability: service, topic and history source are all `telemetry`.
    raw, resolution = store.query("telemetry", "utilization_percent", {"gpu": "0"}, start, start + 180, 1)
    assert resolution == 1 and len(raw[0]["points"]) == 180
    buckets, resolution = store.query("telemetry", "utilization_percent", {"gpu": "0"}, start, start + 180, 60)
    assert resolution == 60
    lows, highs = [p[1] for p in buckets[0]["points"]], [p[3] for p in buckets[0]["points"]]
    assert min(lows) == 0 and max(highs) >= 95  # idle and full load both survive the minute buckets
    assert store.query("telemetry", "cpu_percent", {"device": "host"}, start, start + 180, 10)[0][0]["points"]
    # The stream: the latest sample's changes only; applying them rebuilds the sample.
    records, _, _ = daemon.topics["telemetry"].after(0)
    rebuilt = None
    for record in records:
        assert record["stale"] is False and record["age_s"] == 0.0  # each says how old it is
        rebuilt = apply_delta(rebuilt, record)
    rebuilt.pop("age_s"), rebuilt.pop("stale")  # the first (full) record's
    assert rebuilt == sampler.latest_sample()
    sizes = [len(json.dumps(r)) for r in records[1:]]
    assert max(sizes) < 1024 and sum(sizes) / len(sizes) < 400
    assert "name" not in json.dumps(records[-1]) and "full" in records[0]


def test_idle_gpu_under_a_running_job_fires_and_ends_with_its_span(agent_home, tmp_path):
    document = load(ONE_GPU)
    device_file = tmp_path / "nvidia0"
    device_file.write_text("")
    daemon = Daemon("test")
    job, pid = start_gpu_job(daemon, device_file)
    replay = ReplayNvml(document, pid_map={recorded_pid(document): pid})
    sampler = TelemetrySampler(daemon, nvml_module=replay)
    sampler.start()
    sampler.mapper.device_prefix = str(device_file)
    sampler.configure(alerts={"gpu_idle": {"threshold": 5, "duration_s": 8}, "memory_full": {"enabled": False},
                              "throttle": {"enabled": False}})
    start = 1_750_000_000.0
    fired = []
    try:
        for offset, index in enumerate(phase_frames(document, "load")[-3:] + phase_frames(document, "stall") + phase_frames(document, "after")):
            replay.frame = index
            sampler.sample_once(start + offset, start + offset)
            fired += daemon.topics["alerts"].after(0)[0][len(fired):]
    finally:
        daemon.jobs.stop(job["id"], grace_s=1)
    idle = [a for a in fired if a["kind"] == "gpu_idle"]
    assert len(idle) == 2 and idle[0]["id"] == idle[1]["id"]  # fired, then ended
    began, ended = idle[1]["started_at"], idle[1]["ended_at"]
    assert idle[0]["fired_at"] - began >= 8 and ended > idle[0]["fired_at"]
    assert idle[1]["job_id"] == job["id"] and idle[1]["gpu_index"] == 0
    clock = lambda t: time.strftime("%H:%M", time.localtime(t))  # noqa: E731
    assert idle[1]["message"].startswith("GPU 0: idle ") and idle[1]["source"] == "GPU 0" and "while %s ran, %s-%s" % (job["id"], clock(began), clock(ended)) in idle[1]["message"]
    # Kept on disk for a console that was not there.
    assert [a["id"] for a in sampler.alert_log.list()] == [idle[0]["id"]]


def test_two_nodes_alerting_in_the_same_millisecond_keep_an_alert_each(tmp_path):
    """A cluster job's nodes send their samples together: each node's alerts are kept, none
    replaces another's in the log."""
    log = AlertLog(str(tmp_path))
    settings = copy.deepcopy(ALERT_DEFAULTS)
    settings["memory_full"].update(threshold=0, duration_s=0)
    sample = {"gpus": [{"index": i, "memory_used_bytes": 1 << 30, "memory_total_bytes": 141 << 30} for i in range(2)],
              "processes": [{"gpu_index": i, "job_id": "j1"} for i in range(2)]}
    now = 1_750_000_000.0
    for node in ("n1", "n2"):
        for alert in AlertRules(log, settings, node=node).check_sample(sample, now):
            log.append(alert)
    assert sorted(a["source"] for a in log.list()) == ["n1 GPU 0", "n1 GPU 1", "n2 GPU 0", "n2 GPU 1"]


def test_job_exit_alerts_and_settings_survive_a_daemon_restart(agent_home):
    client = open_client("local")
    try:
        settings = client.call("telemetry.configure", {"alerts": {"temperature": {"threshold": 70, "duration_s": 30}}})
        assert settings["alerts"]["temperature"] == {"enabled": True, "threshold": 70, "duration_s": 30}
        with pytest.raises(Exception) as refused:
            client.call("telemetry.configure", {"alerts": {"temperature": {"threshold": "hot"}}})
        assert "temperature.threshold must be a number" in str(refused.value)
        failed = client.call("jobs.submit", {"argv": ["sh", "-c", "exit 3"], "name": "fails"})
        stopped = client.call("jobs.submit", {"argv": ["sleep", "60"], "name": "stopped on purpose"})
        client.call("jobs.stop", {"id": stopped["id"], "grace_s": 1})
        alerts = wait_for(lambda: [a for a in client.call("telemetry.alerts")["alerts"] if a["kind"] == "job_failed"], 30)
        assert [a["job_id"] for a in alerts] == [failed["id"]]
        assert alerts[0]["message"].startswith("job %s exited 3 at " % failed["id"]) and alerts[0]["source"] == "job %s" % failed["id"]
        time.sleep(1.5)  # the stopped job's end has been seen too
        assert len([a for a in client.call("telemetry.alerts")["alerts"] if a["kind"] == "job_failed"]) == 1
        os.kill(daemon_pid(agent_home), signal.SIGKILL)
    finally:
        client.close()
    client = open_client("local")
    try:
        assert client.call("telemetry.alerts", {"unseen": True})["alerts"][0]["job_id"] == failed["id"]
        assert client.call("telemetry.configure", {})["alerts"]["temperature"]["threshold"] == 70
        client.call("telemetry.alerts_seen", {})
        assert client.call("telemetry.alerts", {"unseen": True})["alerts"] == []
        assert len(client.call("telemetry.alerts")["alerts"]) == 1  # not raised again by the new daemon
    finally:
        client.close()


# ---------------------------------------------------------------- for real: host, daemon, CLI, zipapp


def test_host_figures_come_from_proc(agent_home):
    reader = host_metrics.HostReader()
    reader.read(0.0, [("state", str(agent_home))])
    burn_until = time.monotonic() + 0.5
    while time.monotonic() < burn_until:
        pass
    figures = reader.read(1.0, [("state", str(agent_home)), ("downloads", str(agent_home))])
    assert 0 < figures["cpu_percent"] <= 100
    with open("/proc/meminfo") as f:
        total_kib = int(f.readline().split()[1])
    assert figures["memory_total_bytes"] == total_kib * 1024 and 0 < figures["memory_used_bytes"] < figures["memory_total_bytes"]
    assert abs(figures["load_1m"] - os.getloadavg()[0]) < 1.0
    assert figures["network_rx_bytes_per_s"] >= 0
    st = os.statvfs(str(agent_home))
    (disk,) = figures["disks"]  # one file system, named once with both roles
    assert disk["role"] == "state, downloads" and abs(disk["free_bytes"] - st.f_bavail * st.f_frsize) < 256 * 2 ** 20


def test_no_nvml_still_shows_the_host_in_one_line(agent_home):
    env = {"SPECDECK_HOME": str(agent_home)}
    result = run_cli("gpus", "local", env=env, check=0)
    lines = result.stdout.splitlines()
    assert lines[0].startswith("host  cpu ") and " memory " in lines[0]
    assert any(line.startswith("disk  state") for line in lines)
    gpu_lines = [line for line in lines if line.startswith("GPUs:")]
    assert len(gpu_lines) == 1 and "NVML did not start" in gpu_lines[0]
    sample = json.loads(run_cli("gpus", "local", "--json", env=env, check=0).stdout)
    assert sample["nvml"]["available"] is False and sample["gpus"] == [] and sample["host"]["memory_total_bytes"] > 0


def test_cli_json_latest_and_window_across_a_daemon_restart(agent_home, monkeypatch):
    monkeypatch.setenv("SPECDECK_NVML_REPLAY", "%s:2" % TWO_GPUS)
    env = {"SPECDECK_HOME": str(agent_home), "SPECDECK_NVML_REPLAY": "%s:2" % TWO_GPUS}
    sample = json.loads(run_cli("gpus", "local", "--json", env=env, check=0).stdout)
    assert set(sample) == {"time", "host", "nvml", "gpus", "processes", "age_s", "stale"}
    assert sample["stale"] is False and 0 <= sample["age_s"] < 3
    assert {"cpu_percent", "memory_used_bytes", "memory_total_bytes", "load_1m"} <= set(sample["host"])
    assert sample["nvml"] == {"available": True, "reason": None, "driver_version": "580.159.04"}
    gpu = sample["gpus"][1]
    for field in ("index", "name", "uuid", "utilization_percent", "memory_used_bytes", "memory_total_bytes", "temperature_c",
                  "power_w", "power_limit_w", "sm_clock_mhz"):
        assert field in gpu
    assert gpu["index"] == 1 and gpu["power_limit_w"] == 700.0
    client = open_client("local")
    try:
        first = wait_for(lambda: (lambda s: s if len(s) >= 5 else None)(client.call("telemetry.samples", {"since_s": 600})["samples"]), 30)
        os.kill(daemon_pid(agent_home), signal.SIGKILL)
    finally:
        client.close()
    # A new daemon: the night before it is still there, and it goes on recording.
    client = open_client("local")
    try:
        wait_for(lambda: client.call("telemetry.samples", {"since_s": 600})["samples"][-1]["time"] > first[-1]["time"], 30)
    finally:
        client.close()
    window = json.loads(run_cli("gpus", "local", "--json", "--since", "10m", env=env, check=0).stdout)
    times = [s["time"] for s in window["samples"]]
    assert times[0] <= first[0]["time"] and times[-1] > first[-1]["time"]
    assert all(len(s["gpus"]) == 2 and s["gpus"][0]["name"] == "NVIDIA H200" for s in window["samples"])
    assert run_cli("gpus", "local", "--since", "soon", env=env).returncode == 2


def test_the_agent_zipapp_carries_pynvml(tmp_path):
    from tui.transport.bootstrap import build_agent

    name, data = build_agent()
    path = tmp_path / name
    path.write_bytes(data)
    assert "pynvml.py" in zipfile.ZipFile(str(path)).namelist()
    # Without site-packages (-S), as on a host where nothing is installed: pynvml comes from the zip.
    code = ("import sys; sys.path.insert(0, %r)\n"
            "from remote.core import capabilities; from remote.telemetry.nvml import load_module, Nvml\n"
            "module, reason = load_module(); session = Nvml(module)\n"
            "print(capabilities.probe()['nvml'] is not None, module.__file__.startswith(%r), session.open() or session.reason)\n"
            % (str(path), str(path)))
    out = subprocess.run([sys.executable, "-S", "-c", code], capture_output=True, text=True, env={"PATH": os.environ["PATH"]})
    found, from_zip, opened = out.stdout.split(" ", 2)
    assert (found, from_zip) == ("True", "True"), out.stderr
    assert "NVML did not start" in opened or opened.strip() == "True"
