"""GPU memory as nvidia-smi and nvitop show it: NVML's v2 memory call, whose `used` leaves out
the memory the driver reserves, which the v1 call counts as used; v1 where the driver lacks v2.

The replays here are of the H200 recording (tests/data/) with the memory answers written by
hand: the figures are the ones seen on an H200 for one process (v1 said 1,753 MiB used where
nvidia-smi said 1,139 MiB; the driver reserves 614 MiB there). The recording itself holds only
the v1 call (it was made before the recorder asked for v2), and its replay stays as recorded."""

import copy
import gzip
import json

import pynvml

from remote.telemetry.nvml import Nvml
from remote.telemetry.recording import RecordingNvml, ReplayNvml, load, to_json
from tests.conftest import REPO_ROOT

ONE_GPU = REPO_ROOT / "tests" / "data" / "nvml-h200.json.gz"
MIB = 1 << 20
TOTAL = 150_754_820_096  # an H200's, as NVML gives it
V1 = {"total": TOTAL, "free": TOTAL - 1753 * MIB, "used": 1753 * MIB}
V2 = {"version": pynvml.nvmlMemory_v2, "total": TOTAL, "reserved": 614 * MIB, "free": TOTAL - 1753 * MIB, "used": 1139 * MIB}
V1_KEY = "nvmlDeviceGetMemoryInfo(gpu0)"
V2_KEY = "nvmlDeviceGetMemoryInfo(gpu0,%d)" % pynvml.nvmlMemory_v2


def with_memory(v2_outcome):
    """The H200 recording with every frame's memory answers replaced: v1 as above, and v2 as given."""
    document = copy.deepcopy(load(ONE_GPU))
    for frame in document["frames"]:
        frame["calls"][V1_KEY] = [{"v": dict(V1)}]
        if v2_outcome is not None:
            frame["calls"][V2_KEY] = [v2_outcome]
    return document


def gpu_of(replay):
    session = Nvml(replay)
    assert session.open() and len(session.gpus) == 1
    return session, session.gpus[0]


def test_memory_used_is_the_v2_figure_nvidia_smi_shows(agent_home):
    replay = ReplayNvml(with_memory({"v": dict(V2)}))
    session, gpu = gpu_of(replay)
    replay.frame = 5
    read = gpu.read(100.0)
    assert read["memory_used_bytes"] == 1139 * MIB and read["memory_total_bytes"] == TOTAL
    assert session.error_counts == {}


def test_a_driver_without_the_v2_call_gives_v1_and_is_not_asked_again(agent_home):
    # A recorder in front of the replay notes every call each read makes.
    source = ReplayNvml(with_memory({"e": pynvml.NVML_ERROR_FUNCTION_NOT_FOUND}))
    recording = RecordingNvml(source)
    session, gpu = gpu_of(recording)
    for index in (5, 6):
        source.frame = index
        recording.begin_frame("idle")
        assert gpu.read(100.0 + index)["memory_used_bytes"] == 1753 * MIB
        recording.end_frame()
    first, second = ({key: calls for key, calls in frame["calls"].items() if "MemoryInfo" in key} for frame in recording.frames)
    assert first == {V2_KEY: [{"e": pynvml.NVML_ERROR_FUNCTION_NOT_FOUND}], V1_KEY: [{"v": V1}]}
    assert second == {V1_KEY: [{"v": V1}]}
    assert session.error_counts == {"NVMLError_FunctionNotFound": 1}


def test_the_h200_recording_replays_the_v1_call_it_holds(agent_home):
    document = load(ONE_GPU)
    replay = ReplayNvml(document)
    assert not replay.has_memory_v2 and not hasattr(replay, "nvmlMemory_v2")
    session, gpu = gpu_of(replay)
    for index in (2, 30):
        replay.frame = index
        recorded_used = document["frames"][index]["calls"][V1_KEY][0]["v"]["used"]
        assert gpu.read(100.0 + index)["memory_used_bytes"] == recorded_used == document["frames"][index]["sample"]["gpus"][0]["memory_used_bytes"]
    assert session.error_counts == {}


def test_the_recorder_keeps_the_v2_call_with_its_reserved_memory(agent_home, tmp_path):
    # What the recorder writes of pynvml's own v2 struct: every field, reserved included.
    struct = pynvml.c_nvmlMemory_v2_t(**V2)
    assert to_json(struct, {}) == V2
    # Recording a session (here over a replay that has both calls) keeps the v2 call per frame,
    # and a replay of that recording gives the sampler's figure again.
    source = ReplayNvml(with_memory({"v": dict(V2)}))
    recording = RecordingNvml(source)
    session, gpu = gpu_of(recording)
    source.frame = 5
    recording.begin_frame("idle")
    used = gpu.read(100.0)["memory_used_bytes"]
    recording.end_frame()
    path = tmp_path / "recorded.json.gz"
    recording.save(str(path))
    with gzip.open(path, "rt") as f:
        saved = json.load(f)
    assert saved["frames"][0]["calls"][V2_KEY] == [{"v": V2}] and V1_KEY not in saved["frames"][0]["calls"]
    replay = ReplayNvml(load(path))
    assert replay.has_memory_v2
    _, replayed = gpu_of(replay)
    assert replayed.read(100.0)["memory_used_bytes"] == used == 1139 * MIB
