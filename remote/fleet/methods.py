"""Wire method of the fleet: `fleet.summary`, the one small answer a console watching many hosts
asks each host for every few seconds. It reads only what the other areas' services already hold
(the telemetry feed's latest sample, the serving and training feeds' latest figures, the fleet
watch's running jobs and open alerts): no scrape, no NVML call, no job directory read at each
request, so it answers in well under a millisecond with 8 GPUs, 10 servers and 10 runs."""

import time

from ..core.wire import method
from ..core.words import LIVE_STATES as LIVE
from .watch import FleetWatch

# The daemon starts these with itself (see remote/core/wire.py, area_services).
SERVICES = (FleetWatch,)

BUSY_UTILIZATION_PERCENT = 10  # at or above: the GPU is busy (so is one a compute process holds)
# Reasons a GPU is slowed for its heat or power (NVML's words, remote/telemetry/nvml.py); not the
# routine ones every idle or capped GPU reports (gpu_idle, applications_clocks, sw_power_cap).
SLOWING_THROTTLES = frozenset(("hw_slowdown", "hw_thermal", "sw_thermal", "hw_power_brake"))
ALERTS_MAX = 20
FIRST_SAMPLE_WAIT_S = 2.0  # a daemon this young may not have its first sample yet: wait for it
YOUNG_DAEMON_S = 5.0


def gpu_figures(telemetry, daemon_age_s):
    """({count, busy, memory_used_bytes, memory_total_bytes, max_temperature_c, throttling,
    time, age_s, stale}, None) from the telemetry feed's latest sample, or (None, why there are none)."""
    if telemetry is None:
        return None, "this daemon runs no telemetry service"
    sample = telemetry.aged_sample()
    if sample is None and daemon_age_s < YOUNG_DAEMON_S:
        telemetry.await_read(lambda: telemetry.aged_sample() is not None, FIRST_SAMPLE_WAIT_S)
        sample = telemetry.aged_sample()
    if sample is None:
        return None, "no GPU sample yet (the telemetry service has not sampled)"
    nvml = sample.get("nvml") or {}
    if not nvml.get("available"):
        return None, nvml.get("reason") or "NVML is not available"
    gpus = [gpu for gpu in sample.get("gpus") or () if not gpu.get("lost")]
    held = {p.get("gpu_index") for p in sample.get("processes") or () if "compute" in (p.get("kind") or "")}

    def total(field):
        values = [gpu[field] for gpu in gpus if gpu.get(field) is not None]
        return sum(values) if values else None

    temperatures = [gpu["temperature_c"] for gpu in gpus if gpu.get("temperature_c") is not None]
    busy = sum(1 for gpu in gpus if (gpu.get("utilization_percent") or 0) >= BUSY_UTILIZATION_PERCENT or gpu.get("index") in held)
    throttling = sum(1 for gpu in gpus if SLOWING_THROTTLES & set(gpu.get("throttle_reasons") or ()))
    return {"count": len(sample.get("gpus") or ()), "busy": busy, "memory_used_bytes": total("memory_used_bytes"),
            "memory_total_bytes": total("memory_total_bytes"), "max_temperature_c": max(temperatures) if temperatures else None,
            "throttling": throttling, "time": sample.get("time"), "age_s": sample.get("age_s"), "stale": bool(sample.get("stale"))}, None


def server_figures(serving, watch, now):
    """[{id, accept_length, break_even_accept_length, break_even_source, age_s, stale}] of every server the serving
    feed reads (server jobs and attached servers), by id."""
    if serving is None:
        return []
    servers = []
    for server_id, record in sorted(serving.snapshot().items(), key=lambda item: _id_order(item[0])):
        recent = record.get("recent") or {}
        # The last ten seconds, as the Speculation pane shows "now"; a log-read server has only its line.
        accept_length = recent.get("accept_length") if "recent" in record else record.get("accept_length")
        line = watch.break_even(server_id) if watch is not None else None
        servers.append({"id": server_id, "accept_length": accept_length,
                        "break_even_accept_length": line["accept_length"] if line else None,
                        "break_even_source": line["source"] if line else None,
                        "age_s": record.get("age_s"), "stale": bool(record.get("stale"))})
    return servers


def training_figures(training, watch):
    """[{id, step, eta_s, predicted_accept_length, age_s, stale}] of every training run that runs
    (data generation and ended runs still being read are left out), by id."""
    if training is None:
        return []
    runs = []
    for job_id, record in sorted(training.snapshot().items(), key=lambda item: _id_order(item[0])):
        if record.get("state") != "training" or (watch is not None and not watch.is_running(job_id)):
            continue
        runs.append({"id": job_id, "step": record.get("step"), "eta_s": record.get("eta_s"),
                     "predicted_accept_length": record.get("validation_predicted_accept_length") or record.get("predicted_accept_length"),
                     "age_s": record.get("age_s"), "stale": bool(record.get("stale"))})
    return runs


def _id_order(key):
    """j2 before j10; attached servers (u1) after jobs."""
    return (key[:1], int(key[1:]) if key[1:].isdigit() else 0, key)


def alert_figures(watch, now):
    """The open alerts of the last hour, newest first, at most ALERTS_MAX, as the notify area
    raised them: {id, at, kind, title, message, urgent, categories, job_id}."""
    if watch is None:
        return []
    return [{"id": a.get("id"), "at": a.get("time"), "kind": a.get("kind"), "title": a.get("title"), "message": a.get("message"),
             "urgent": bool(a.get("urgent")), "categories": list(a.get("categories") or ()), "job_id": a.get("job_id")}
            for a in watch.open_alerts(now, ALERTS_MAX)]


def jobs_running(daemon, watch):
    """Jobs running or starting: the fleet watch's count, or (before its first listing) the disk's."""
    count = watch.jobs_running() if watch is not None else None
    if count is None:
        count = sum(1 for job in daemon.jobs.list() if job["process_state"] in LIVE)
    return count


@method("fleet.summary")
def fleet_summary(call):
    """This host in one small answer, for a console that watches many: the latest figures the
    host's services already hold (no scrape, no NVML call of its own), each with its age, none
    stale shown as current. Params: none. Reply: `{at (the host's time), hostname, user, gpus:
    {count, busy, memory_used_bytes, memory_total_bytes, max_temperature_c, throttling, time
    (the sample's, as telemetry.latest's), age_s, stale} or null, gpus_reason (why null: no NVML, no sample yet), jobs_running, servers: [{id,
    accept_length, break_even_accept_length, break_even_source, age_s, stale}], training: [{id, step, eta_s,
    predicted_accept_length, age_s, stale}], alerts: [{id, at, kind, title, message, urgent,
    categories, job_id}]}`. `busy`: GPUs at or above 10% utilisation or held by a compute
    process; `throttling`: GPUs slowed for heat or power (hw_slowdown, hw_thermal, sw_thermal,
    hw_power_brake; not idle or the power cap); memory and temperature over the GPUs NVML
    still answers for. `jobs_running`: jobs running or starting. A server's accept length is
    over its last 10 s (null while it drafts nothing), its break-even the serving feed's line
    (`break_even_source`: set, by hand for its target; server meta; benchmark jN; null when
    none says, as `serving.stats` gives it); a run's
    predicted accept length is its newest validation's, else its newest step's. `alerts`: those
    the notify area raised in the last hour that are not resolved (a GPU alert whose condition
    ended is), newest first, at most 20. `age_s`/`stale` as the feeds give them (stale: older
    than the source's interval plus its read deadline)."""
    now = time.time()
    daemon = call.daemon
    services = daemon.services
    watch = services.get(FleetWatch.name)
    gpus, gpus_reason = gpu_figures(services.get("telemetry"), now - getattr(daemon, "started_at", 0.0))
    return {
        "at": now,
        "hostname": daemon.hello.get("hostname"),
        "user": daemon.hello.get("user"),
        "gpus": gpus,
        "gpus_reason": gpus_reason,
        "jobs_running": jobs_running(daemon, watch),
        "servers": server_figures(services.get("serving"), watch, now),
        "training": training_figures(services.get("training"), watch),
        "alerts": alert_figures(watch, now),
    }
