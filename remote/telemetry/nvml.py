"""NVML through nvidia-ml-py, read so that it never raises: one query function turns "not
supported", "no permission" and the like into an absent value (None), counters become rates,
and the fields that hardly change (names, UUIDs, limits) are read every few minutes only.

`pynvml` is imported when a session opens, not when this module is: the agent's core stays
standard library, and a host without nvidia-ml-py or without a driver gets a reason in words.
"""

import ctypes
import logging
import os
import time

log = logging.getLogger("specdeck.telemetry")

SLOW_FIELDS_TTL_S = 300.0  # names, UUIDs, limits: read again after this long
UNSUPPORTED_RETRY_S = 600.0  # a field a GPU said it lacks is not asked for again before this
XID_DRAIN_MAX = 32  # XID events read per sample at most (a storm must not stall the sampler)
ALL_LINKS = 0xFFFFFFFF  # a field's scope meaning "every NVLink of the GPU"

# NVML return codes after which asking again soon is pointless.
QUIET_ERRORS = ("NVML_ERROR_NOT_SUPPORTED", "NVML_ERROR_NO_PERMISSION", "NVML_ERROR_FUNCTION_NOT_FOUND",
                "NVML_ERROR_NOT_FOUND", "NVML_ERROR_ARGUMENT_VERSION_MISMATCH", "NVML_ERROR_INVALID_ARGUMENT")

# Clock event ("throttle") reason bits, as NVML defines them, with the words the wire uses.
THROTTLE_REASONS = (
    (0x1, "gpu_idle"), (0x2, "applications_clocks"), (0x4, "sw_power_cap"), (0x8, "hw_slowdown"),
    (0x10, "sync_boost"), (0x20, "sw_thermal"), (0x40, "hw_thermal"), (0x80, "hw_power_brake"),
    (0x100, "display_clocks"),
)

# Field ids (nvml.h), read with nvmlDeviceGetFieldValues, several in one call. PCIe comes from
# nvmlDeviceGetPcieThroughput instead: the PCIe byte-count fields are 32-bit and wrap several
# times a second under load (seen on an H200: 4 GiB wraps at ~13 GB/s).
FI_ECC_SBE_VOLATILE_TOTAL = 3
FI_ECC_DBE_VOLATILE_TOTAL = 4
FI_MEMORY_TEMPERATURE = 82
FI_NVLINK_LINK_COUNT = 91
FI_NVLINK_THROUGHPUT_DATA_TX = 138  # KiB, a 64-bit counter
FI_NVLINK_THROUGHPUT_DATA_RX = 139
# Measured on H200 hosts (benchmarks/bench_telemetry.py --calls): the field batch with NVLink
# throughput costs ~2.7 ms of CPU per GPU, nvmlDeviceGetPcieThroughput measures for 20 ms and
# costs ~0.9 ms per call, the per-second calls ~0.2 ms per GPU together. So NVLink, ECC and
# memory temperature are read every 15 s and PCIe every 5 s, the GPUs' turns spread over the
# seconds: 8 GPUs stay under 1% of a core.
COUNTERS_EVERY_S = 15.0
PCIE_EVERY_S = 5.0
WRAP_BY_VALUE_TYPE = {1: 1 << 32, 5: 1 << 32, 6: 1 << 16}  # counters narrower than 64 bits
VALUE_MEMBERS = ("dVal", "uiVal", "ulVal", "ullVal", "sllVal", "siVal", "usVal")  # by nvmlValueType_t


def load_module():
    """(the pynvml module, None) or (None, why not). SPECDECK_NVML_REPLAY=FILE[:GPUS] plays a
    recording instead (recording.py): a host without a GPU that shows one, for demos and tests."""
    replay = os.environ.get("SPECDECK_NVML_REPLAY")
    if replay:
        from .recording import ReplayNvml

        return ReplayNvml.from_spec(replay), None
    try:
        import pynvml
    except ImportError:
        return None, "nvidia-ml-py is not available to this Python"
    return pynvml, None


def throttle_words(mask):
    if mask is None:
        return None
    return [word for bit, word in THROTTLE_REASONS if mask & bit]


def field_number(value):
    """A number from an nvmlFieldValue_t, or None when NVML refused that field."""
    if value.nvmlReturn != 0:
        return None
    kind = value.valueType
    if not 0 <= kind < len(VALUE_MEMBERS):
        return None
    return getattr(value.value, VALUE_MEMBERS[kind])


def text(value):
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else value


class Nvml:
    """One session with the driver: init, a handle per GPU, the query function."""

    def __init__(self, module):
        self.nvml = module
        self.available = False
        self.reason = None
        self.driver_version = None
        self.cuda_driver_version = None
        self.gpus = []
        self.error_counts = {}  # error name -> count, for the service's status
        self._quiet_codes = {getattr(module, name) for name in QUIET_ERRORS if hasattr(module, name)}
        self._lost_code = getattr(module, "NVML_ERROR_GPU_IS_LOST", 15)
        self._skip_until = {}  # (function, gpu index) -> monotonic time to ask again
        self._events = None

    def open(self):
        """Start NVML; False (with `reason`) when the driver or its library is not there."""
        try:
            self.nvml.nvmlInit()
        except self.nvml.NVMLError as exc:
            self.reason = "NVML did not start: %s" % exc
            return False
        self.available = True
        self.driver_version = text(self.query("nvmlSystemGetDriverVersion"))
        self.cuda_driver_version = self.query("nvmlSystemGetCudaDriverVersion")
        count = self.query("nvmlDeviceGetCount") or 0
        for index in range(count):
            handle = self.query("nvmlDeviceGetHandleByIndex", index)
            if handle is not None:
                self.gpus.append(GpuReader(self, index, handle))
        self._watch_xid()
        if not self.gpus:
            self.reason = "NVML sees no GPU"
        return True

    def close(self):
        if self._events is not None:
            self.query("nvmlEventSetFree", self._events)
            self._events = None
        if self.available:
            self.query("nvmlShutdown")
            self.available = False

    def query(self, name, *args, gpu=None, key=None):
        """NVML's `name(*args)`, or None when this driver, GPU or user cannot have it. Never raises
        an NVML error. A field a GPU lacks is not asked for again for a while (cheaper samples)."""
        key = key or (name,)
        skip_until = self._skip_until.get(key)
        if skip_until is not None:
            if time.monotonic() < skip_until:
                return None
            del self._skip_until[key]
        function = getattr(self.nvml, name, None)
        if function is None:  # an older nvidia-ml-py than the field needs
            return None
        try:
            return function(*args)
        except self.nvml.NVMLError as exc:
            code = getattr(exc, "value", None)
            label = type(exc).__name__
            self.error_counts[label] = self.error_counts.get(label, 0) + 1
            if code in self._quiet_codes:
                self._skip_until[key] = time.monotonic() + UNSUPPORTED_RETRY_S
            elif code == self._lost_code and gpu is not None:
                gpu.lost = True
            return None

    # -- XID errors: events, where the driver lets us register for them

    def _watch_xid(self):
        event_type = getattr(self.nvml, "nvmlEventTypeXidCriticalError", None)
        if event_type is None or not self.gpus:
            return
        events = self.query("nvmlEventSetCreate")
        if events is None:
            return
        registered = [gpu for gpu in self.gpus if self._register(gpu, event_type, events)]
        if registered:
            self._events = events
        else:
            self.query("nvmlEventSetFree", events)

    def _register(self, gpu, event_type, events):
        try:
            self.nvml.nvmlDeviceRegisterEvents(gpu.handle, event_type, events)
            return True
        except self.nvml.NVMLError:
            return False  # not supported, or not allowed in this container: XIDs stay absent

    def drain_xid(self):
        """Read the XID events that came since the last sample into each GPU's counters."""
        if self._events is None:
            return
        by_handle = {handle_id(gpu.handle): gpu for gpu in self.gpus}
        for _ in range(XID_DRAIN_MAX):
            try:
                event = self.nvml.nvmlEventSetWait_v2(self._events, 0)
            except self.nvml.NVMLError:
                return  # a timeout: nothing more waiting
            gpu = by_handle.get(handle_id(event.device))
            if gpu is not None:
                gpu.xid_errors += 1
                gpu.last_xid = event.eventData


def handle_id(handle):
    """A key for a device handle that is equal for two handles of the same GPU."""
    try:
        return ctypes.cast(handle, ctypes.c_void_p).value
    except (TypeError, ctypes.ArgumentError):
        return handle


class GpuReader:
    """One GPU: `read(now)` gives its fields as a dict (None for what it does not report)."""

    def __init__(self, session, index, handle):
        self.session = session
        self.nvml = session.nvml
        self.index = index
        self.handle = handle
        self.lost = False
        self.xid_errors = 0
        self.last_xid = None
        self._slow = None
        self._slow_at = None
        self._counters = {}  # field id -> (monotonic time, value) for rates
        self._wraps = {}  # field id -> where its counter wraps (None: 64 bits)
        self._counter_values = None
        self._counters_at = None
        self._pcie_values = None
        self._pcie_due = None

    def query(self, name, *args):
        # Keyed by GPU and by the small arguments (which clock, which sensor): the SM clock may be
        # readable where the memory clock is not.
        key = (name, self.index) + tuple(a if isinstance(a, int) else repr(a) for a in args)
        return self.session.query(name, self.handle, *args, gpu=self, key=key)

    def slow(self, now_monotonic):
        """Fields that hardly change, read again every SLOW_FIELDS_TTL_S."""
        if self._slow is None or now_monotonic - self._slow_at >= SLOW_FIELDS_TTL_S:
            pci = self.query("nvmlDeviceGetPciInfo")
            limit_mw = self.query("nvmlDeviceGetEnforcedPowerLimit")
            links = self._field_values([FI_NVLINK_LINK_COUNT])
            self._slow = {
                "name": text(self.query("nvmlDeviceGetName")),
                "uuid": text(self.query("nvmlDeviceGetUUID")),
                "pci_bus_id": text(pci.busId) if pci is not None else None,
                "power_limit_w": limit_mw / 1000.0 if limit_mw is not None else None,
                "sm_clock_max_mhz": self.query("nvmlDeviceGetMaxClockInfo", getattr(self.nvml, "NVML_CLOCK_SM", 1)),
                "nvlink_count": links.get(FI_NVLINK_LINK_COUNT) if links else None,
            }
            self._slow_at = now_monotonic
        return self._slow

    def read(self, now_monotonic):
        nvml = self.nvml
        slow = self.slow(now_monotonic)
        utilization = self.query("nvmlDeviceGetUtilizationRates")
        memory = self.memory()
        power_mw = self.query("nvmlDeviceGetPowerUsage")
        reasons = self.query("nvmlDeviceGetCurrentClocksEventReasons")
        if reasons is None:
            reasons = self.query("nvmlDeviceGetCurrentClocksThrottleReasons")  # nvidia-ml-py < 12.535
        gpu = dict(slow)
        gpu.update(
            index=self.index,
            utilization_percent=utilization.gpu if utilization is not None else None,
            memory_utilization_percent=utilization.memory if utilization is not None else None,
            memory_used_bytes=memory.used if memory is not None else None,
            memory_total_bytes=memory.total if memory is not None else None,
            temperature_c=self.query("nvmlDeviceGetTemperature", getattr(nvml, "NVML_TEMPERATURE_GPU", 0)),
            power_w=power_mw / 1000.0 if power_mw is not None else None,
            sm_clock_mhz=self.query("nvmlDeviceGetClockInfo", getattr(nvml, "NVML_CLOCK_SM", 1)),
            memory_clock_mhz=self.query("nvmlDeviceGetClockInfo", getattr(nvml, "NVML_CLOCK_MEM", 2)),
            throttle_reasons=throttle_words(reasons),
            xid_errors=self.xid_errors if self.session._events is not None else None,
            last_xid=self.last_xid,
        )
        gpu.update(self._pcie_now(now_monotonic))
        gpu.update(self._counters_now(slow, now_monotonic))
        if self.lost:
            gpu["lost"] = True
        return gpu

    def memory(self):
        """Memory as nvidia-smi and nvitop show it: NVML's v2 call, whose `used` leaves out what the
        driver reserves (615 MiB on an H200, counted as used by the v1 call); v1 where the driver
        or nvidia-ml-py lacks v2 (the answer is then not supported, and not asked for again)."""
        version = getattr(self.nvml, "nvmlMemory_v2", None)
        if version is not None:
            memory = self.query("nvmlDeviceGetMemoryInfo", version)
            if memory is not None:
                return memory
        return self.query("nvmlDeviceGetMemoryInfo")

    def processes(self):
        """[(pid, GPU memory bytes or None, kind)] of the compute and graphics processes."""
        found = {}
        for kind, name in (("compute", "nvmlDeviceGetComputeRunningProcesses"), ("graphics", "nvmlDeviceGetGraphicsRunningProcesses")):
            for process in self.query(name) or ():
                memory = getattr(process, "usedGpuMemory", None)
                old = found.get(process.pid)
                if old is None or (memory or 0) > (old[1] or 0):
                    found[process.pid] = (process.pid, memory, kind if old is None else "compute+graphics")
        return list(found.values())

    # -- what is read every few seconds

    def _pcie_now(self, now_monotonic):
        """PCIe rx/tx in bytes/s (NVML's 20 ms sample, in KB/s): every PCIE_EVERY_S, this GPU's turn."""
        if self._pcie_values is not None and now_monotonic < self._pcie_due:
            return self._pcie_values
        tx_kb = self.query("nvmlDeviceGetPcieThroughput", getattr(self.nvml, "NVML_PCIE_UTIL_TX_BYTES", 0))
        rx_kb = self.query("nvmlDeviceGetPcieThroughput", getattr(self.nvml, "NVML_PCIE_UTIL_RX_BYTES", 1))
        self._pcie_values = {"pcie_rx_bytes_per_s": rx_kb * 1000 if rx_kb is not None else None,
                             "pcie_tx_bytes_per_s": tx_kb * 1000 if tx_kb is not None else None}
        # The first turn comes at once for every GPU; the next ones are spread by GPU index.
        stagger_s = 0.0 if self._pcie_due is not None else self.index % int(PCIE_EVERY_S)
        self._pcie_due = now_monotonic + PCIE_EVERY_S + stagger_s - 0.05
        return self._pcie_values

    def _counters_now(self, slow, now_monotonic):
        """NVLink rates, ECC counts, memory temperature: every COUNTERS_EVERY_S, the last in between."""
        if self._counter_values is not None and now_monotonic - self._counters_at < COUNTERS_EVERY_S:
            return self._counter_values
        fields = [FI_MEMORY_TEMPERATURE, FI_ECC_SBE_VOLATILE_TOTAL, FI_ECC_DBE_VOLATILE_TOTAL]
        if slow.get("nvlink_count"):
            fields += [(FI_NVLINK_THROUGHPUT_DATA_TX, ALL_LINKS), (FI_NVLINK_THROUGHPUT_DATA_RX, ALL_LINKS)]
        values = self._field_values(fields)
        self._counter_values = {
            "nvlink_rx_bytes_per_s": self._rate(FI_NVLINK_THROUGHPUT_DATA_RX, values, now_monotonic, 1024),
            "nvlink_tx_bytes_per_s": self._rate(FI_NVLINK_THROUGHPUT_DATA_TX, values, now_monotonic, 1024),
            "memory_temperature_c": values.get(FI_MEMORY_TEMPERATURE) or None,  # 0: no sensor
            "ecc_corrected_errors": values.get(FI_ECC_SBE_VOLATILE_TOTAL),
            "ecc_uncorrected_errors": values.get(FI_ECC_DBE_VOLATILE_TOTAL),
        }
        self._counters_at = now_monotonic
        return self._counter_values

    def _field_values(self, field_ids):
        """{field id: number} for the fields NVML gave; one driver call for all of them."""
        values = self.query("nvmlDeviceGetFieldValues", field_ids)
        if values is None:
            return {}
        found = {}
        for value in values:
            number = field_number(value)
            if number is not None:
                found[value.fieldId] = number
                self._wraps[value.fieldId] = WRAP_BY_VALUE_TYPE.get(value.valueType)
        return found

    def _rate(self, field_id, fields, now_monotonic, scale=1):
        """Per second, from two readings of a counter (a narrow one may wrap once between them);
        None on the first reading or after a reset."""
        value = fields.get(field_id)
        if value is None:
            return None
        previous = self._counters.get(field_id)
        self._counters[field_id] = (now_monotonic, value)
        if previous is None or now_monotonic <= previous[0]:
            return None
        change = value - previous[1]
        if change < 0:
            wrap = self._wraps.get(field_id)
            if wrap is None or previous[1] >= wrap:
                return None  # reset (driver reloaded)
            change += wrap
        return change * scale / (now_monotonic - previous[0])
