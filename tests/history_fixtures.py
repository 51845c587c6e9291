"""A simulated GPU host for the history store: 8 GPUs x 15 NVML metrics at 1 Hz, values of the
kinds NVML gives (integer percents, clocks, bytes, temperatures; power in watts with fractions),
with time injected so a week runs in seconds to minutes."""

import random

GPU_METRICS = (
    "utilization_percent", "memory_utilization_percent", "memory_used_bytes", "memory_total_bytes",
    "temperature_c", "power_w", "power_limit_w", "energy_j", "sm_clock_mhz", "memory_clock_mhz",
    "fan_percent", "pcie_rx_bytes_per_s", "pcie_tx_bytes_per_s", "throttle_reasons", "processes",
)
PERIOD_S = 3600  # values repeat hourly, drawn once: generating them must not dominate the run


def _values(rng, metric):
    if metric.endswith("percent"):
        return [rng.randint(0, 100) for _ in range(PERIOD_S)]
    if metric == "memory_used_bytes":
        return [rng.randint(20, 140) * 1024 ** 3 + rng.randint(0, 1 << 20) for _ in range(PERIOD_S)]
    if metric == "memory_total_bytes":
        return [150_754_820_096] * PERIOD_S
    if metric == "temperature_c":
        return [rng.randint(30, 85) for _ in range(PERIOD_S)]
    if metric == "power_w":
        return [rng.randint(80_000, 700_000) / 1000.0 for _ in range(PERIOD_S)]  # NVML gives mW
    if metric == "power_limit_w":
        return [700.0] * PERIOD_S
    if metric == "energy_j":
        return [i * 400.0 for i in range(PERIOD_S)]
    if metric.endswith("clock_mhz"):
        return [rng.choice((345, 1410, 1755, 1980)) for _ in range(PERIOD_S)]
    if metric.endswith("bytes_per_s"):
        return [rng.randint(0, 60_000_000) for _ in range(PERIOD_S)]
    if metric == "throttle_reasons":
        return [rng.choice((0, 0, 0, 1, 4)) for _ in range(PERIOD_S)]
    return [rng.randint(0, 4) for _ in range(PERIOD_S)]


class SimulatedGpus:
    """Feeds a HistoryStore whose clock is `self.now`: `run(seconds, every_s)` adds one sample of
    every series each `every_s` simulated seconds and, every `flush_every_s`, does what the
    history service does each second (flush, then maintenance until none is waiting)."""

    def __init__(self, gpus=8, start=1_749_999_600.0, seed=7):
        rng = random.Random(seed)
        self.now = start
        self.series = [("gpu", metric, {"gpu": str(gpu)}) for gpu in range(gpus) for metric in GPU_METRICS]
        self.values = [_values(rng, metric) for _, metric, _ in self.series]
        self.points = 0

    def clock(self):
        return self.now

    def run(self, store, seconds, every_s=1, flush_every_s=60, spike=None):
        """`spike`: (time, series index, value) to add once, in place of that sample."""
        end = self.now + seconds
        next_flush = self.now + flush_every_s
        series, values = self.series, self.values
        while self.now < end:
            at = self.now
            offset = int(at) % PERIOD_S
            points = [(s[0], s[1], s[2], v[offset], at) for s, v in zip(series, values)]
            if spike and spike[0] == at:
                points[spike[1]] = points[spike[1]][:3] + (spike[2], at)
            store.add_many(points)
            self.points += len(points)
            self.now = at + every_s
            if self.now >= next_flush or self.now >= end:
                next_flush = self.now + flush_every_s
                store.flush()
                while store.maintain():
                    pass
        return self
