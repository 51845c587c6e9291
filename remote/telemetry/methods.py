"""Wire methods of telemetry: the latest sample, its stream, history windows, the alert settings,
and the alerts that fired (with what a console has already seen)."""

import time

from ..core import feed_wire, streams
from ..core.protocol import BadRequest, RemoteError
from ..core.streams import TopicSource
from ..core.wire import method
from ..notify.datagen_disks import with_forecasts
from .sampler import HOST_LABELS, TelemetrySampler
from .sample import GPU_SERIES, HOST_SERIES, samples_from_series

# The daemon starts these with itself (see remote/core/wire.py, area_services).
SERVICES = (TelemetrySampler,)

LATEST_WAIT_S = 5.0
SAMPLES_MAX = 2000  # per `telemetry.samples` reply: a week at 1 Hz would not fit in a frame


def sampler(call):
    return call.service(TelemetrySampler.name)


def _query(call, name, host, gpu, start, end, resolution_s, node=None):
    """The series of `name` for the host, or for the GPUs (one when `gpu` is an index); those of
    a cluster job's node when `node` names it (its series carry the node's name), else the host's own."""
    labels = dict(HOST_LABELS) if host else ({} if gpu is None else {"gpu": str(gpu)})
    if node is not None:
        labels["node"] = node
    found, used = feed_wire.query_history(call, TelemetrySampler.name, name, labels, start, end, resolution_s)
    return [s for s in found if (host or "gpu" in s["labels"]) and s["labels"].get("node") == node], used


@method("telemetry.latest")
def telemetry_latest(call):
    """The newest sample. Params: none. Reply: `{time, host: {cpu_count, cpu_percent,
    memory_used_bytes, memory_total_bytes, load_1m, load_5m, load_15m, network_rx_bytes_per_s,
    network_tx_bytes_per_s, disks: [{path, role, free_bytes, total_bytes, fill_rate_bytes_per_s
    (the slope of its free bytes over the last 10 min, negative while it empties; null before 3
    readings), full_in_s (at that rate; null when it does not fill), jobs: [running job ids
    writing there], read_at, datagen?: [{job_id, total_known, bytes_per_sample, samples_measured,
    samples_left, bytes_needed, free_bytes, full_at_sample (null: its samples left fit),
    full_in_s, full_at?, fill_rate_bytes_per_s?}] (a running data generation's forecast from
    its first samples' size; total_known false: from the disk's fill rate alone,
    remote/notify/datagen_disks.py)}]}, nvml: {available,
    reason, driver_version}, gpus: [{index, name, uuid, pci_bus_id, utilization_percent,
    memory_utilization_percent, memory_used_bytes, memory_total_bytes, temperature_c,
    memory_temperature_c, power_w, power_limit_w, sm_clock_mhz, sm_clock_max_mhz,
    memory_clock_mhz, throttle_reasons: [word], pcie_rx_bytes_per_s, pcie_tx_bytes_per_s,
    nvlink_count, nvlink_rx_bytes_per_s, nvlink_tx_bytes_per_s, ecc_corrected_errors,
    ecc_uncorrected_errors, xid_errors, last_xid, lost?}], processes: [{pid, gpu_index,
    memory_bytes, kind, job_id, command, started_at} or {pid, gpu_index, memory_bytes, kind,
    other_namespace: true}], nodes: {name: node}, age_s, stale, error?}`. `nodes`: the nodes of
    the running cluster jobs, each sampled on the node by a step of its job (remote/slurm/nodes.py):
    `{node, job_id, slurm_job_id, job_gpus, time, host, nvml, gpus, processes (with slurm_job_id
    in place of job_id), age_s, stale, error}`, `error` saying why a node has no current figures
    (its sampling step refused or ended); absent while no cluster job runs. A field the GPU or driver does not report is
    null; rates are null in the first sample. `age_s`: seconds since the sample was taken (at
    this reply); `stale`: older than the sampling interval plus its 2 s deadline (the sampler is
    failing or stuck: `error` says why), so the figures are not current."""
    service = sampler(call)
    # A daemon that has just started: its first sample is a second away, and rates (CPU, PCIe)
    # need a second one.
    service.await_read(lambda: service.samples >= 2, LATEST_WAIT_S)
    latest = service.aged_sample()
    if latest is None:
        raise RemoteError("NotFound", "no telemetry sample yet (see the telemetry service's status)")
    return with_forecasts(latest, call.daemon.services)


@method("telemetry.follow")
def telemetry_follow(call):
    """Stream the samples, once a second. Params: `stream`, `after` (a seq; absent: from now).
    Frames: first `{snapshot: sample (as telemetry.latest), records: []}`; then `{records:
    [delta]}`, each delta holding `time` and only what changed: `host` (changed keys), `nvml`,
    `gpus` ([{index, changed keys}]), `processes` (the whole list, when it changed), `nodes`
    ({name: that node's delta, its own changed fields (age_s, error, ...) included; null: the
    node is gone}); a delta
    with `full: true` is a whole sample (the set of GPUs changed). remote/telemetry/sample.py
    `apply_delta` rebuilds the sample. Every delta carries `age_s` and `stale`; when sampling
    fails or hangs, a delta with `stale: true`, `age_s` and `error` and nothing else comes (again
    every 5 s while it lasts). Reply: `{stream, seq, snapshot}` (as a stream's opening reply)."""
    return feed_wire.follow(call, sampler(call))


@method("telemetry.history")
def telemetry_history(call):
    """One metric over a window, per GPU (or for the host), from the history store. Params:
    `metric` (a GPU series: utilization_percent, memory_utilization_percent, memory_used_bytes,
    temperature_c, power_w, sm_clock_mhz, memory_clock_mhz, pcie_rx_bytes_per_s,
    pcie_tx_bytes_per_s, nvlink_rx_bytes_per_s, nvlink_tx_bytes_per_s; or a host series:
    cpu_percent, memory_used_bytes, load_1m, network_rx_bytes_per_s, network_tx_bytes_per_s
    with `host: true`), `gpu` (one index; default all), `node` (a cluster job's node: its GPUs or
    its host figures; default this host's), `start`/`end` or `since_s` (default the last hour),
    `resolution_s` (default: about 500 points). Reply: `{metric, resolution_s, node, series:
    [{gpu_index, points: [[time, min, mean, max], ...]}]}` (`gpu_index` null for the host)."""
    metric = call.param("metric", str, required=True)
    host = call.param("host", bool, False)
    node = call.param("node", str)
    if metric not in (HOST_SERIES if host else GPU_SERIES):
        raise BadRequest("no %s series %r (there are: %s)" % ("host" if host else "GPU", metric, ", ".join(HOST_SERIES if host else GPU_SERIES)))
    start, end = feed_wire.history_window(call)
    found, resolution_s = _query(call, metric, host, call.param("gpu", int), start, end, call.param("resolution_s", float), node)
    series = [{"gpu_index": None if host else int(s["labels"]["gpu"]), "points": s["points"]} for s in found]
    series.sort(key=lambda s: -1 if s["gpu_index"] is None else s["gpu_index"])
    return {"metric": metric, "resolution_s": resolution_s, "node": node, "series": series}


@method("telemetry.samples")
def telemetry_samples(call):
    """Every sample of a window at the store's resolution (1 s for the last 6 hours, then 10 s,
    then 1 min; coarser where the window would exceed 2,000 samples). Params: `start`/`end` or
    `since_s`, `node` (a cluster job's node; default this host). Reply: `{resolution_s, node,
    samples: [record]}`, each record shaped as `telemetry.latest` with the stored fields (bucket
    means), names and totals from the latest sample, and no processes."""
    start, end = feed_wire.history_window(call)
    node = call.param("node", str)
    resolution_s = max(1.0, (end - start) / SAMPLES_MAX)
    host_series, gpu_series, used = {}, {}, resolution_s
    for name in HOST_SERIES:
        found, used = _query(call, name, True, None, start, end, resolution_s, node)
        for series in found:
            host_series[name] = series["points"]
    for name in GPU_SERIES:
        found, used = _query(call, name, False, None, start, end, resolution_s, node)
        for series in found:
            gpu_series[(int(series["labels"]["gpu"]), name)] = series["points"]
    latest = sampler(call).latest_sample()
    if node is not None:
        latest = ((latest or {}).get("nodes") or {}).get(node)
    samples = samples_from_series(host_series, gpu_series, latest)
    return {"resolution_s": used, "node": node, "samples": samples}


@method("telemetry.configure")
def telemetry_configure(call):
    """Set this host's alert rules and the directories whose free space is shown; kept in the
    state directory, so they hold while no console is connected. Params: `alerts` ({rule:
    {setting: value}}, merged over what is set; rules: gpu_idle, memory_full, temperature
    {enabled, threshold, duration_s}: utilisation % below which a GPU held by a running job is
    idle, % of GPU memory used, °C; throttle {enabled, reasons: [word], duration_s}; job_failed
    {enabled}; disk_filling {enabled, horizon_s (told when a disk a running job writes to is
    full within this or the jobs' remaining ETA, whichever is later; 3600), low_percent (told
    again under this much free; 2), window_s (the fill rate's window; 600)}), `checkpoint_dirs` (list of paths). Reply: `{alerts, checkpoint_dirs}` in force."""
    service = sampler(call)
    try:
        return service.configure(alerts=call.param("alerts", dict), checkpoint_dirs=call.param("checkpoint_dirs", list))
    except ValueError as exc:
        raise BadRequest(str(exc))


@method("telemetry.alerts")
def telemetry_alerts(call):
    """Alerts that fired. Params: `since` (s since the epoch: those that fired or ended after
    it), `unseen` (true: those after the time a console last marked seen). Reply: `{alerts:
    [{id, kind: gpu_idle|memory_full|temperature|throttle|job_failed, gpu_index, job_id,
    node?, started_at, fired_at, ended_at, value, message}], seen_until}`; `ended_at` is null
    while the condition lasts; `node`: the Slurm job's node whose GPU it is (its source and
    message name it: `n2 GPU 5: ...`), absent for this host's GPUs."""
    log = sampler(call).alert_log
    since = call.param("since", float)
    seen_until = log.seen_until()
    if call.param("unseen", bool, False):
        since = max(since or 0.0, seen_until)
    return {"alerts": log.list(since), "seen_until": seen_until}


@method("telemetry.alerts_seen")
def telemetry_alerts_seen(call):
    """Mark the alerts up to `until` (s since the epoch; default now) as seen by a console.
    Reply: `{seen_until}`."""
    return {"seen_until": sampler(call).alert_log.mark_seen(call.param("until", float) or time.time())}


@method("telemetry.alerts_follow")
def telemetry_alerts_follow(call):
    """Stream alerts as they fire and end. Params: `stream`, `after` (a seq; absent: from now).
    Frames: `{records: [alert]}` (as in telemetry.alerts; an alert that ends comes again with
    `ended_at`). Reply: `{stream, seq, snapshot}` (as a stream's opening reply)."""
    source = TopicSource(sampler(call).alert_topic)
    return streams.follow(call, source)
