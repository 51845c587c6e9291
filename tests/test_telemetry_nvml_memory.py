"""GPU memory as nvidia-smi and nvitop show it: NVML's v2 memory call, whose `used` leaves out
the memory the driver reserves, which the v1 call counts as used; v1 where the driver lacks v2.

The one-GPU H200 recording (tests/data/) holds both calls in every frame: v2, which the sampler
reads, and v1 beside it. On that H200 nvidia-smi said 0 MiB used and 616 MiB reserved while
idle; v1 said 615 MiB used. The two-GPU recording was made before the recorder asked for v2:
it holds only v1, and its replay gives v1 as recorded."""

import copy
import gzip
import json

import pynvml

from remote.telemetry.nvml import Nvml
from remote.telemetry.recording import RecordingNvml, ReplayNvml, load, to_json
from tests.helpers.cli import REPO_ROOT

ONE_GPU = REPO_ROOT / "tests" / "data" / "nvml-h200.json.gz"
TWO_GPUS = REPO_ROOT / "tests" / "data" / "nvml-h200x2.json.gz"
MIB = 1 << 20
V1_KEY = "nvmlDeviceGetMemoryInfo(gpu0)"
V2_KEY = "nvmlDeviceGetMemoryInfo(gpu0,%d)" % pynvml.nvmlMemory_v2


def gpu_of(replay):
    session = Nvml(replay)
    assert session.open() and len(session.gpus) >= 1
    return session, session.gpus[0]


def recorded(frame, key):
    return frame["calls"][key][0]["v"]


def test_memory_used_is_the_v2_figure_nvidia_smi_shows(agent_home):
    document = load(ONE_GPU)
    replay = ReplayNvml(document)
    assert replay.has_memory_v2
    session, gpu = gpu_of(replay)
    for phase in ("idle", "load", "stall"):
        index = next(i for i, frame in enumerate(document["frames"]) if frame["phase"] == phase)
        frame = document["frames"][index]
        v1, v2 = recorded(frame, V1_KEY), recorded(frame, V2_KEY)
        replay.frame = index
        used = gpu.read(100.0 + index)["memory_used_bytes"]
        assert used == v2["used"] == frame["sample"]["gpus"][0]["memory_used_bytes"]
        # What v1 adds is the driver's reserved memory (615 MiB on this H200), nothing of ours.
        assert v1["used"] - used == v2["reserved"] and 600 * MIB < v2["reserved"] < 630 * MIB
        if phase == "idle":
            assert used == 0  # as nvidia-smi said: 0 MiB used
        else:
            assert used > 20 << 30  # the load job holds 24 GiB
    assert session.error_counts == {}


def test_a_driver_without_the_v2_call_gives_v1_and_is_not_asked_again(agent_home):
    document = copy.deepcopy(load(ONE_GPU))
    for frame in document["frames"]:
        if V2_KEY in frame["calls"]:
            frame["calls"][V2_KEY] = [{"e": pynvml.NVML_ERROR_FUNCTION_NOT_FOUND}]
    # A recorder in front of the replay notes every call each read makes.
    source = ReplayNvml(document)
    recording = RecordingNvml(source)
    session, gpu = gpu_of(recording)
    load_frames = [i for i, frame in enumerate(document["frames"]) if frame["phase"] == "load"]
    for index in load_frames[-2:]:
        source.frame = index
        recording.begin_frame("load")
        assert gpu.read(100.0 + index)["memory_used_bytes"] == recorded(document["frames"][index], V1_KEY)["used"]
        recording.end_frame()
    first, second = ({key: calls for key, calls in frame["calls"].items() if "MemoryInfo" in key} for frame in recording.frames)
    assert first[V2_KEY] == [{"e": pynvml.NVML_ERROR_FUNCTION_NOT_FOUND}] and len(first[V1_KEY]) == 1
    assert list(second) == [V1_KEY]
    assert session.error_counts == {"NVMLError_FunctionNotFound": 1}


def test_a_recording_without_the_v2_call_replays_v1_as_recorded(agent_home):
    document = load(TWO_GPUS)
    replay = ReplayNvml(document)
    assert not replay.has_memory_v2 and not hasattr(replay, "nvmlMemory_v2")
    session, gpu = gpu_of(replay)
    for index in (2, 30):
        replay.frame = index
        frame = document["frames"][index]
        assert gpu.read(100.0 + index)["memory_used_bytes"] == recorded(frame, V1_KEY)["used"] == frame["sample"]["gpus"][0]["memory_used_bytes"]
    assert session.error_counts == {}


def test_the_recorder_keeps_the_v2_call_with_its_reserved_memory(agent_home, tmp_path):
    document = load(ONE_GPU)
    index = next(i for i, frame in enumerate(document["frames"]) if frame["phase"] == "load")
    v2 = recorded(document["frames"][index], V2_KEY)
    # What the recorder writes of pynvml's own v2 struct: every field, reserved included.
    assert to_json(pynvml.c_nvmlMemory_v2_t(**v2), {}) == v2
    # Recording a session (here over the replay) keeps the v2 call, and a replay of that
    # recording gives the sampler's figure again.
    source = ReplayNvml(document)
    recording = RecordingNvml(source)
    _, gpu = gpu_of(recording)
    source.frame = index
    recording.begin_frame("load")
    used = gpu.read(100.0)["memory_used_bytes"]
    recording.end_frame()
    path = tmp_path / "recorded.json.gz"
    recording.save(str(path))
    with gzip.open(path, "rt") as f:
        saved = json.load(f)
    assert saved["frames"][0]["calls"][V2_KEY] == [{"v": v2}] and V1_KEY not in saved["frames"][0]["calls"]
    replay = ReplayNvml(load(path))
    assert replay.has_memory_v2
    _, replayed = gpu_of(replay)
    assert replayed.read(100.0)["memory_used_bytes"] == used == v2["used"]
