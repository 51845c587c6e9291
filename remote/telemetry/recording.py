"""Record what NVML returns on a real GPU host, and play it back as a stand-in `pynvml` module.

`RecordingNvml` wraps the real pynvml: every call goes through unchanged and its result (or
its error code) is noted, per sample frame, as JSON. `ReplayNvml` is a fake pynvml built from
such a recording: the same function names answer with the recorded values (as attribute
objects, the way pynvml's structs are read), the recorded errors are raised as pynvml's own
NVMLError classes, and a recording of one or two GPUs can stand for eight. It stands in for
the GPU only: the query layer, the sampler, the store and the console above it are the real
ones. CI has no GPU; its telemetry tests run on a replay of a recording made on an H200
(tests/data/, re-recorded with benchmarks/record_nvml.py).
"""

import ctypes
import gzip
import json
import math
import time
from types import SimpleNamespace

FORMAT = "specdeck-nvml-recording/1"


# ---------------------------------------------------------------- recording


class RecordingNvml:
    """The real pynvml, with every `nvml*` call noted into `frames` (or `static` between frames)."""

    def __init__(self, real):
        self._real = real
        self._handles = {}  # pointer value -> GPU index
        self.static = {}
        self.frames = []
        self._calls = self.static

    def begin_frame(self, phase, **notes):
        frame = {"time": time.time(), "phase": phase, "calls": {}}
        frame.update(notes)
        self.frames.append(frame)
        self._calls = frame["calls"]

    def end_frame(self):
        self._calls = self.static

    def __getattr__(self, name):
        value = getattr(self._real, name)
        if not name.startswith("nvml") or not callable(value) or isinstance(value, type):
            return value  # constants, error classes, structs

        def recorded(*args):
            key = call_key(name, args, self._handles)
            try:
                result = value(*args)
            except self._real.NVMLError as exc:
                self._calls.setdefault(key, []).append({"e": exc.value})
                raise
            if name == "nvmlDeviceGetHandleByIndex" and isinstance(result, ctypes._Pointer):
                self._handles[ctypes.cast(result, ctypes.c_void_p).value] = args[0]
            self._calls.setdefault(key, []).append({"v": to_json(result, self._handles)})
            return result

        return recorded

    def save(self, path, **meta):
        document = {"format": FORMAT, "meta": meta, "static": self.static, "frames": self.frames}
        with gzip.open(path, "wt", encoding="utf-8") as f:
            json.dump(document, f, separators=(",", ":"))


def call_key(name, args, handles):
    """`nvmlDeviceGetClockInfo(gpu0,1)`: the function and its arguments, GPU handles by index."""
    parts = []
    for arg in args:
        if isinstance(arg, ReplayHandle):
            parts.append("gpu%d" % arg.index)
        elif isinstance(arg, (int, str)):
            parts.append(str(arg))
        elif isinstance(arg, (list, tuple)):
            parts.append(json.dumps(arg, separators=(",", ":")))
        elif isinstance(arg, ctypes._Pointer) and ctypes.cast(arg, ctypes.c_void_p).value in handles:
            parts.append("gpu%d" % handles[ctypes.cast(arg, ctypes.c_void_p).value])
        elif isinstance(arg, ReplayOpaque):
            parts.append(arg.type_name)
        else:
            parts.append(type(arg).__name__)
    return "%s(%s)" % (name, ",".join(parts))


def to_json(value, handles):
    """A pynvml result as JSON: structs and friendly objects as dicts, GPU handles by index."""
    if value is None or isinstance(value, (bool, int, str)):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    if isinstance(value, ReplayHandle):  # recording a replay (the tests do)
        return {"__handle__": value.index}
    if isinstance(value, ctypes._Pointer):
        index = handles.get(ctypes.cast(value, ctypes.c_void_p).value)
        return {"__handle__": index} if index is not None else {"__pointer__": type(value).__name__}
    if isinstance(value, (list, tuple, ctypes.Array)):
        return [to_json(item, handles) for item in value]
    if isinstance(value, (ctypes.Structure, ctypes.Union)):
        return {field[0]: to_json(getattr(value, field[0]), handles) for field in value._fields_}
    if hasattr(value, "__dict__"):
        return {k: to_json(v, handles) for k, v in vars(value).items() if not k.startswith("_")}
    return repr(value)


# ---------------------------------------------------------------- replay


class ReplayHandle:
    """A GPU handle of the replay: equal for the same index."""

    __slots__ = ("index",)

    def __init__(self, index):
        self.index = index

    def __eq__(self, other):
        return isinstance(other, ReplayHandle) and other.index == self.index

    def __hash__(self):
        return hash(("gpu", self.index))


class ReplayOpaque:
    """Something NVML hands out and takes back (an event set), by the name of its type."""

    __slots__ = ("type_name",)

    def __init__(self, type_name):
        self.type_name = type_name


def from_json(value):
    if isinstance(value, list):
        return [from_json(item) for item in value]
    if isinstance(value, dict):
        if "__handle__" in value:
            return ReplayHandle(value["__handle__"])
        if "__pointer__" in value:
            return ReplayOpaque(value["__pointer__"])
        return SimpleNamespace(**{k: from_json(v) for k, v in value.items()})
    return value


def load(path):
    opener = gzip.open if str(path).endswith(".gz") else open
    with opener(path, "rt", encoding="utf-8") as f:
        document = json.load(f)
    if document.get("format") != FORMAT:
        raise ValueError("%s is not an NVML recording (%s)" % (path, FORMAT))
    return document


class ReplayNvml:
    """A pynvml module that answers from a recording. pynvml itself supplies the error classes
    and constants, so the code under test meets the same exceptions it meets on a GPU.

    Frames advance with the clock (one per `frame_s`, cycling), or stay where `frame` is set.
    `gpu_count` repeats the recorded GPUs up to that many; `pid_map` replaces recorded process
    ids (a test maps the recorded training process onto a real local job).

    Memory: a recording holds the v2 memory call (used without the driver's reserved memory,
    as nvidia-smi shows it) when its recorder asked for it. One made before has only the v1
    call: its replay has no `nvmlMemory_v2`, like an nvidia-ml-py without it, so the query
    layer reads v1 as it did on the GPU; nothing is derived from the v1 figures."""

    def __init__(self, document, gpu_count=None, frame_s=1.0, pid_map=None, phases=None):
        import pynvml

        self._real = pynvml
        self.NVMLError = pynvml.NVMLError
        self.meta = document.get("meta", {})
        self._static = document.get("static", {})
        frames = document["frames"]
        if phases:
            frames = [frame for frame in frames if frame.get("phase") in phases]
        self._frames = frames
        v2_suffix = ",%s)" % getattr(pynvml, "nvmlMemory_v2", None)  # the call key of nvmlDeviceGetMemoryInfo(gpuN, v2)
        self.has_memory_v2 = any(key.startswith("nvmlDeviceGetMemoryInfo(") and key.endswith(v2_suffix)
                                 for calls in [self._static] + [frame["calls"] for frame in frames] for key in calls)
        self.recorded_gpus = self._first("nvmlDeviceGetCount()") or 0
        self.gpu_count = gpu_count or self.recorded_gpus
        self.frame_s = frame_s
        self.frame = None  # a fixed frame index, or None to follow the clock
        self.pid_map = dict(pid_map or {})
        self.calls = 0
        self._started = time.monotonic()
        self._position = (None, {})  # (frame index, {key: calls made in it})

    @classmethod
    def from_spec(cls, spec):
        """`FILE` or `FILE:GPUS` (SPECDECK_NVML_REPLAY)."""
        path, _, count = spec.rpartition(":") if spec.rpartition(":")[2].isdigit() else (spec, "", "")
        return cls(load(path), gpu_count=int(count) if count else None)

    def __getattr__(self, name):
        if name == "nvmlMemory_v2" and not self.has_memory_v2:
            raise AttributeError(name)
        value = getattr(self._real, name)
        if name.startswith("nvml") and callable(value) and not isinstance(value, type):
            return lambda *args: self._answer(name, args)
        return value

    def current_frame(self):
        if self.frame is not None:
            return self.frame % len(self._frames)
        return int((time.monotonic() - self._started) / self.frame_s) % len(self._frames)

    # -- the functions whose answers depend on the GPU count rather than the recording

    def nvmlInit(self):
        self.calls += 1

    def nvmlShutdown(self):
        self.calls += 1

    def nvmlDeviceGetCount(self):
        self.calls += 1
        return self.gpu_count

    def nvmlDeviceGetHandleByIndex(self, index):
        self.calls += 1
        if not 0 <= index < self.gpu_count:
            raise self.NVMLError(self._real.NVML_ERROR_INVALID_ARGUMENT)
        return ReplayHandle(index)

    # -- everything else: the recorded answer

    def _answer(self, name, args):
        self.calls += 1
        index = None
        if args and isinstance(args[0], ReplayHandle):
            index = args[0].index
            args = (ReplayHandle(index % self.recorded_gpus),) + args[1:]
        key = call_key(name, args, {})
        outcome = self._outcome(key)
        if outcome is None:
            raise self.NVMLError(self._real.NVML_ERROR_NOT_SUPPORTED)  # never recorded: a field this GPU lacked
        if "e" in outcome:
            raise self.NVMLError(outcome["e"])
        value = from_json(outcome["v"])
        if index is not None and index >= self.recorded_gpus:
            value = self._as_gpu(name, value, index)
        if name.endswith("RunningProcesses") and self.pid_map:
            for process in value:
                process.pid = self.pid_map.get(process.pid, process.pid)
        return value

    def _outcome(self, key):
        frame_index = self.current_frame()
        if self._position[0] != frame_index:
            self._position = (frame_index, {})
        seen = self._position[1]
        outcomes = self._frames[frame_index]["calls"].get(key) or self._static.get(key)
        if outcomes is None:
            outcomes = self._nearest(key, frame_index)
        if not outcomes:
            return None
        n = seen.get(key, 0)
        seen[key] = n + 1
        return outcomes[min(n, len(outcomes) - 1)]

    def _nearest(self, key, frame_index):
        """A call made only now and then (slow fields): its answer from the closest frame before."""
        for offset in range(len(self._frames)):
            outcomes = self._frames[(frame_index - offset) % len(self._frames)]["calls"].get(key)
            if outcomes:
                return outcomes
        return None

    def _first(self, key):
        outcomes = self._static.get(key) or self._nearest(key, 0) or []
        return outcomes[0].get("v") if outcomes else None

    def _as_gpu(self, name, value, index):
        """A repeated GPU gets its own identity."""
        if name == "nvmlDeviceGetUUID" and isinstance(value, str):
            return value[:-2] + "%02x" % index
        if name == "nvmlDeviceGetPciInfo" and hasattr(value, "busId"):
            value.busId = "00000000:%02X:00.0" % (0x10 + index)
        if name.endswith("RunningProcesses"):
            for process in value:
                process.pid = process.pid + 100000 * index  # not the same process on two GPUs
        return value
