"""The view models (tui/*/model.py): how a job, a download, a GPU, a server's speculation, a
training run and a notification channel read, in the words both the pane and the command of
each show. Plain tests on jobs and figures shaped as the host sends them."""

from remote.core.words import LIVE_STATES
from remote.downloads.progress import FINAL_STATES
from tui.downloads import model as downloads
from tui.freshness import freshness, not_current_line, stale_text
from tui.jobs import model as jobs
from tui.notify import model as notify
from tui.serving import model as serving
from tui.telemetry import model as telemetry
from tui.training import model as training

NOW = 1_780_000_000.0
GIB = 2 ** 30


def job(**fields):
    """A job as `jobs.get` describes it: ended with exit 0 unless the fields say otherwise."""
    described = {"id": "j7", "kind": "command", "name": "python train.py", "state": "succeeded", "process_state": "succeeded",
                 "exit_code": 0, "signal": None, "started_at": NOW - 3725, "ended_at": NOW - 5, "error": None, "meta": {}}
    described.update(fields)
    return described


RUNNING = dict(state="running", process_state="running", exit_code=None, ended_at=None)


# ---------------------------------------------------------------- jobs


def test_a_job_is_live_exactly_while_the_host_says_its_process_runs():
    assert jobs.LIVE_STATES == LIVE_STATES  # the host's own list, not a copy
    assert jobs.is_live(job(**RUNNING)) and jobs.is_live(job(state="starting", process_state="starting"))
    # A stop asked for: the state says stopping, the process still runs.
    assert jobs.is_live(job(state="stopping", process_state="running"))
    for ended in ("succeeded", "failed", "lost", "stopped"):
        assert not jobs.is_live(job(state=ended, process_state=ended))
    assert jobs.has_failed(job(state="lost", process_state="lost")) and not jobs.has_failed(job(state="stopped", process_state="stopped"))


def test_a_jobs_figures_are_its_row_in_the_table_and_in_specdeck_jobs():
    shown = jobs.figures(job(**RUNNING), now=NOW)
    assert [shown[key] for _, key in jobs.COLUMNS][:5] == ["j7", "command", "running", "1:02:05", "-"]
    assert shown["name"] == "python train.py"
    assert jobs.figures(job(), now=NOW)["runtime"] == "1:02:00"  # an ended job's runtime stops at its end
    assert jobs.figures(job(exit_code=None, signal=9, state="failed", process_state="failed"))["exit"] == "sig 9"
    assert jobs.figures(job(started_at=None))["runtime"] == "-"  # not started yet


def test_how_a_job_ended_in_one_line():
    assert jobs.ended_line(job(exit_code=3, state="failed", process_state="failed")) == "j7 exited 3"
    assert jobs.ended_line(job(exit_code=None, signal=9, state="failed", process_state="failed")) == "j7 was killed by signal 9"
    assert jobs.ended_line(job(exit_code=None, signal=15, state="stopped", process_state="stopped")) == "j7 was stopped"
    lost = job(exit_code=None, state="lost", process_state="lost", error="its supervisor died")
    assert jobs.ended_line(lost) == "j7 was lost: its supervisor died"
    assert jobs.ended_line({}, "j9") == "j9 ended (unknown)"


# ---------------------------------------------------------------- downloads


def download(state, **progress):
    shown = {"repo": "team/tiny-drafter", "local_dir": "/data/tiny", "state": state, "files": [{"path": "model.safetensors"}],
             "bytes_total": 1_000_000_900, "bytes_done": 420_000_900, "rate_bytes_per_s": 52_400_000, "eta_s": 11.1}
    shown.update(progress)
    live = state in downloads.ACTIVE_STATES
    return job(id="j10", kind="download", name="team/tiny-drafter -> /data/tiny", state=state,
               process_state="running" if live else "succeeded", progress=shown, meta={"repo": "team/tiny-drafter"})


def test_a_download_in_progress_reads_with_its_rate_and_eta():
    line = downloads.progress_line(download("downloading"))
    assert line == "j10  downloading   42.0%  420.00 MB / 1.00 GB  52.40 MB/s  ETA 0:00:11"
    shown = downloads.figures(download("downloading"))
    assert (shown["kind"], shown["percent"], shown["size"], shown["repo"]) == ("download", " 42.0%", "1.00 GB", "team/tiny-drafter")


def test_an_ended_download_shows_no_rate_and_its_verdict_is_final():
    verified = download("verified", bytes_done=1_000_000_900)
    shown = downloads.figures(verified)
    assert (shown["rate"], shown["eta"], shown["percent"]) == ("-", "-", "100.0%")
    assert downloads.has_ended(verified) and not downloads.is_active(verified)
    assert downloads.VERDICT_STATES == FINAL_STATES  # the host's words for how a download ended
    # A verdict is final while the process is still exiting; a stop asked for is not an end yet.
    assert downloads.has_ended(dict(verified, process_state="running"))
    assert not downloads.has_ended(dict(download("downloading"), state="stopping"))


def test_a_download_before_its_file_list_has_no_size_yet():
    resolving = download("resolving", files=[], bytes_total=0, bytes_done=0)
    assert downloads.bytes_total(resolving) is None
    assert downloads.figures(resolving)["percent"] == "    -" and downloads.figures(resolving)["size"] == "-"
    assert downloads.action(job(name="verify team/x in /data/x")) == "verify"


# ---------------------------------------------------------------- telemetry


def test_a_gpu_reads_the_same_wherever_it_is_shown():
    gpu = {"index": 3, "name": "NVIDIA H200", "utilization_percent": 87.4, "memory_used_bytes": 70.14 * GIB,
           "memory_total_bytes": 141 * GIB, "temperature_c": 61.6, "power_w": 412.2, "power_limit_w": 700.0,
           "sm_clock_mhz": 1980, "throttle_reasons": ["gpu_idle", "sw_power_cap"], "nvlink_count": 0}
    shown = telemetry.gpu_figures(gpu)
    assert (shown["name"], shown["utilization"], shown["memory_used"], shown["memory_total"]) == ("H200", "87%", "70.1", "141")
    assert (shown["temperature"], shown["power"], shown["power_limit"], shown["sm_clock"]) == ("62", "412", "700", "1980")
    assert shown["throttle"] == "-" and shown["nvlink"] == "-"  # idle and at its power cap: not throttled
    hot = dict(gpu, throttle_reasons=["sw_power_cap", "sw_thermal", "hw_slowdown"])
    assert telemetry.throttle_reasons(hot) == ["sw_thermal", "hw_slowdown"]
    assert telemetry.gpu_figures(dict(hot, lost=True))["throttle"] == "LOST"
    assert telemetry.gpu_figures({"index": 0})["utilization"] == "-"  # a field NVML does not support


def test_the_hosts_figures_and_a_gpu_process():
    host = {"cpu_percent": 12.6, "cpu_count": 8, "memory_used_bytes": 3.2 * GIB, "memory_total_bytes": 15.4 * GIB, "load_1m": 0.5}
    shown = telemetry.host_figures(host)
    assert (shown["cpu"], shown["memory_used"], shown["memory_total"], shown["load"]) == ("13%", "3", "15", "0.50")
    assert telemetry.missing_gpus({"available": False, "reason": "NVML did not start"}) == "NVML did not start"
    assert telemetry.missing_gpus({"available": True}) is None
    process = {"pid": 5120, "gpu_index": 1, "memory_bytes": 60 * GIB, "job_id": "j8", "started_at": NOW - 65, "command": "vllm serve"}
    assert telemetry.process_figures(process, NOW) == {"pid": "5120", "gpu": "1", "memory": "60.0", "job": "j8", "runtime": "0:01:05",
                                                       "command": "vllm serve"}
    contained = telemetry.process_figures(dict(process, other_namespace=True), NOW)
    assert (contained["job"], contained["command"]) == ("-", "another PID namespace (a container)")


def test_stale_figures_say_how_old_they_are():
    assert stale_text(12.4, "the scrape timed out") == "(stale, 12 s old: the scrape timed out)"
    assert stale_text(None) == "(stale, ? old)"
    assert not_current_line({"stale": True, "age_s": 40, "error": "NVML hung"}) == "figures below are not current (stale, 40 s old: NVML hung)"
    assert not_current_line({"stale": False}) is None
    # No frame for longer than the quiet limit: stale, even though the host's last word was "fresh".
    assert freshness({"stale": False, "age_s": 0.5}, received_at=100.0, now_monotonic=108.0) == (
        True, 8.5, "no sample from the host for 8 s")
    assert freshness({"stale": False, "age_s": 0.5}, received_at=100.0, now_monotonic=101.0) == (False, 1.5, None)


# ---------------------------------------------------------------- serving


def test_a_servers_figures_read_with_one_precision_each():
    figures = {"accept_length": 2.4567, "draft_acceptance_rate": 0.48512, "num_drafts": 1200, "accepted_tps": 41.26,
               "generation_tps": 82.04, "kv_cache_usage": 0.314, "per_position": [0.812, 0.61, 0.4], "window_s": 300.0}
    assert [serving.figure(figures, key) for key in ("accept_length", "draft_acceptance_rate", "num_drafts", "accepted_tps")] == [
        "2.46", "0.485", "1200", "41.3"]
    assert serving.figure(figures, "kv_cache_usage") == "31%" and serving.figure(figures, "window_s") == "300 s"
    assert serving.figure(figures, "drafted_tps") == "-"  # no figure from the engine
    assert serving.per_position(figures) == "0.81 0.61 0.40" and serving.per_position({}) == "-"


def test_an_sglang_server_says_its_settings_and_whether_its_figures_are_a_window():
    settings = {"algorithm": "EAGLE3", "draft_model_path": "org/drafter\x1b[2J", "num_steps": 5, "eagle_topk": 1, "num_draft_tokens": 6}
    latest = {"engine": "sglang", "speculative": settings, "reading": "latest", "gauges": {"age_s": 12.4}}
    assert serving.engine_lines(latest) == [
        "engine: sglang   speculative: {algorithm: EAGLE3, num_steps: 5, eagle_topk: 1, num_draft_tokens: 6, draft model: org/drafter\\x1b[2J}",
        "figures: the latest value of its gauges (12 s old), not a window: no decode lines of its log in the window"]
    windowed = dict(latest, reading="window", lines=6, speculative={"algorithm": None})
    assert serving.engine_lines(windowed) == ["engine: sglang   speculative: off", "figures: over 6 decode lines of its log"]
    assert "not known yet" in serving.engine_lines(dict(latest, speculative=None))[0]
    assert serving.engine_lines({"engine": "vllm", "accept_length": 2.0}) == []  # a vLLM server's figures say it all


def test_a_server_runs_while_its_job_runs_and_says_how_it_ended():
    assert serving.is_live(None)  # attached by URL: no job to end
    assert serving.is_live({"state": "running"}) and not serving.is_live({"state": "stopped"})
    assert serving.is_dead({"state": "failed"}) and not serving.is_dead({"state": "stopped"})
    died = {"state": "failed", "exit_code": 1, "first_error": "torch.OutOfMemoryError: CUDA out of memory"}
    assert serving.how_it_ended(died) == "exited 1: torch.OutOfMemoryError: CUDA out of memory"
    assert serving.how_it_ended({"state": "stopped", "signal": 15}) == "was stopped"
    assert serving.how_it_ended({"state": "failed", "ended": "exited 1: CUDA out of memory", "first_error": "CUDA out of memory"}) == (
        "exited 1: CUDA out of memory")


# ---------------------------------------------------------------- training


def checkpoint(**fields):
    entry = {"path": "/data/runs/tiny/1", "name": "1", "step": 40, "format": "speculators", "verdict": "below break-even",
             "best": True, "validation": {"loss": 0.07512}, "predicted_accept_length": 1.034, "measured_accept_length": None}
    entry.update(fields)
    return entry


def test_a_checkpoint_reads_with_where_its_measurement_stands():
    shown = training.checkpoint_figures(checkpoint(measure={"state": "running", "phase": "baseline", "job": "j12"}))
    assert (shown["name"], shown["step"], shown["validation_loss"], shown["predicted"], shown["measured"]) == (
        "1 *", "40", "0.07512", "1.03", "-")
    assert shown["verdict"] == "below break-even, bench baseline"
    assert training.checkpoint_figures(checkpoint(measure={"state": "queued"}))["verdict"] == "below break-even, to measure"
    failed = training.checkpoint_figures(checkpoint(measure={"state": "failed", "error": "no GPU free"}))
    assert (failed["verdict"], failed["measure_error"]) == ("below break-even, measure failed", "no GPU free")
    done = training.checkpoint_figures(checkpoint(measured_accept_length=4.0, verdict="above break-even", measure={"state": "done"}))
    assert (done["measured"], done["verdict"], done["measure_error"]) == ("4.00", "above break-even", None)


def test_a_runs_figures_and_its_end():
    assert training.step_figures({"step": 21, "epoch": 1, "loss": 0.0754321, "tokens_per_s": 812.4}) == {
        "step": "21", "epoch": "1", "loss": "0.07543", "tokens_per_s": "812"}
    assert training.loss_text("nan") == "nan"
    failed = job(kind="training", state="failed", process_state="failed", exit_code=3)
    assert training.run_failure(failed) == "run j7 failed (exit code 3)"
    assert training.end_alert(failed) == "the run ended with exit code 3"
    assert training.run_failure(job(state="lost", process_state="lost", exit_code=None)) == (
        "run j7 was lost (its supervisor died without recording an exit)")
    stopped = job(state="stopped", process_state="stopped", exit_code=None, signal=15)
    assert training.run_failure(stopped) is None and training.end_alert(stopped) is None
    assert training.end_alert(job(**RUNNING)) is None and training.end_alert(job()) is None


# ---------------------------------------------------------------- notify


def test_a_channel_reads_in_one_line_with_how_it_is_doing():
    channel = {"id": "c1", "format": "ntfy", "url": "https://ntfy.example/…", "on": ["failed", "gpu"], "quiet": "22:00-07:00"}
    assert notify.channel_line(channel) == "c1  ntfy     https://ntfy.example/…  on failed,gpu  quiet 22:00-07:00"
    command = {"id": "c2", "format": "command", "argv": ["mail", "-s", "specdeck"], "on": None}
    assert notify.channel_line(command) == "c2  command  mail -s specdeck  on all"
    failing = {"state": "failing", "last_error": "HTTP 500", "failures": 6, "pending": 12}
    assert notify.status_text(failing) == "failing: HTTP 500 (6 in a row), 12 waiting"
    assert notify.status_text({}) == "nothing sent yet"


# ---------------------------------------------------------------- the pane and the command read alike


def test_the_jobs_table_and_specdeck_jobs_show_the_same_cells():
    from tui.jobs.cli import format_jobs
    from tui.jobs.table import job_cells

    ended = [job(), job(id="j8", kind="server", name="vllm serve", state="failed", process_state="failed", exit_code=None, signal=9)]
    header, *rows = format_jobs(ended).splitlines()
    assert header.split() == ["ID", "KIND", "STATE", "RUNTIME", "EXIT", "STARTED", "NAME"]
    for described, row in zip(ended, rows):
        at = 0
        for cell in (str(cell) for cell in job_cells(described)):  # each cell, in the table's order
            at = row.index(cell, at) + len(cell)
        assert "sig 9" in rows[1] and "1:02:00" in rows[0]


def test_the_downloads_row_and_the_progress_line_show_the_same_figures():
    from tui.downloads.pane import DownloadsPane

    for state in ("downloading", "verified"):
        described = download(state)
        cells = {key: str(cell) for (_, key), cell in zip(downloads.COLUMNS, DownloadsPane._row_cells(described))}
        line = downloads.progress_line(described)
        for key in ("id", "state", "percent", "rate", "eta", "size"):
            assert cells[key] in line, (key, cells[key], line)


def test_a_gpu_row_and_the_gpu_table_show_the_same_figures():
    from tui.telemetry.cli import format_sample
    from tui.telemetry.rows import gpu_row

    gpu = {"index": 0, "name": "NVIDIA H200", "utilization_percent": 99.6, "memory_used_bytes": 120.44 * GIB,
           "memory_total_bytes": 141 * GIB, "temperature_c": 71.2, "power_w": 652.7, "power_limit_w": 700.0, "sm_clock_mhz": 1755,
           "throttle_reasons": ["sw_power_cap", "sw_thermal"]}
    row = str(gpu_row(gpu, ["j8"]))
    sample = {"time": NOW, "host": {"cpu_percent": 3.0}, "nvml": {"available": True}, "gpus": [gpu], "processes": []}
    table = format_sample(sample).splitlines()
    gpu_line = table[table.index(next(line for line in table if line.startswith("GPU "))) + 1]
    for figure in ("100%", "120.4/141", "71", "653", "1755"):
        assert figure in row and figure in gpu_line, figure
    # Throttled by heat, not by its power cap: both say so.
    assert "throttled" in row and gpu_line.rstrip().endswith("sw_thermal")


def test_a_checkpoints_row_and_its_line_say_the_same_verdict():
    from tui.training.cli import _checkpoint_line
    from tui.training.series import checkpoint_row

    entry = checkpoint(measure={"state": "running", "phase": "speculative", "job": "j12"}, predicted_from="validation")
    row = checkpoint_row(entry)
    line = _checkpoint_line(entry)
    assert row[-1] == "below break-even, bench speculative" and line.endswith("below break-even, bench speculative  (best)")
    assert row[3] == "1.03 val" and "predicted 1.03 (validation)" in line
