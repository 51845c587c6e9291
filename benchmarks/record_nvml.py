"""Record what NVML returns on a real GPU host into a replay file for the CI tests.

  python3 benchmarks/record_nvml.py tests/data/nvml-h200.json.gz [--idle-s 15 --load-s 30 --stall-s 20 --after-s 8]

Runs our telemetry sampler (the real one, over pynvml wrapped by RecordingNvml) once a second
through four phases: the GPUs idle; a specdeck job running a bf16 matmul loop with host-to-GPU copies
on every GPU, and GPU-to-GPU copies where there are two (utilisation, power, clocks, PCIe,
NVLink); the same job holding its memory but idle (a stalled training: what the gpu_idle
alert is for); after the job exited with code 1.
Every frame keeps what NVML answered and the sample our sampler made from it, so a test can
check that a replay gives the same sample. Memory is what the sampler asks for, the v2 call
(used without the driver's reserved memory, as nvidia-smi shows it); the v1 call is recorded
beside it in every frame, so the recording shows the difference (printed as `v1 ...MiB`).
Needs torch with CUDA for the load, and nvidia-ml-py.
"""

import argparse
import os
import shutil
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

LOAD = r"""
import sys, time, torch
load_s, stall_s = float(sys.argv[1]), float(sys.argv[2])
devices = [torch.device("cuda", i) for i in range(torch.cuda.device_count())]
mats = [torch.randn(8192, 8192, device=d, dtype=torch.bfloat16) for d in devices]
held = [torch.empty(24 << 30, dtype=torch.uint8, device=d) for d in devices]
host = torch.empty(256 << 20, dtype=torch.uint8).pin_memory()
print("phase load", flush=True)
end = time.time() + load_s
while time.time() < end:
    for d, m in zip(devices, mats):
        for _ in range(8):
            m @ m
        held[d.index][: host.numel()].copy_(host, non_blocking=True)
    if len(devices) > 1:  # GPU to GPU: NVLink where the GPUs have it
        held[1][: 1 << 30].copy_(held[0][: 1 << 30], non_blocking=True)
    for d in devices:
        torch.cuda.synchronize(d)
print("phase stall", flush=True)
time.sleep(stall_s)
print("phase exit", flush=True)
sys.exit(1)
"""


def v1_memory_used(recording, handle):
    """NVML's v1 memory call (driver-reserved memory counted as used), recorded beside the v2 one."""
    try:
        return recording.nvmlDeviceGetMemoryInfo(handle).used
    except recording.NVMLError:
        return 0


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("out")
    parser.add_argument("--idle-s", type=float, default=15)
    parser.add_argument("--load-s", type=float, default=30)
    parser.add_argument("--stall-s", type=float, default=20)
    parser.add_argument("--after-s", type=float, default=8)
    args = parser.parse_args()
    os.environ["SPECDECK_HOME"] = tempfile.mkdtemp(prefix="specdeck-record-")

    import pynvml

    from remote.core.daemon import Daemon
    from remote.telemetry.recording import RecordingNvml
    from remote.telemetry.sampler import TelemetrySampler

    daemon = Daemon("recorder")
    recording = RecordingNvml(pynvml)
    sampler = TelemetrySampler(daemon, nvml_module=recording)
    sampler.start()
    print("NVML %s, %d GPUs" % (sampler.latest_sample() or sampler._nvml_state, len(sampler._nvml.gpus) if sampler._nvml else 0), flush=True)

    job = None
    phase = "idle"
    phase_end = time.monotonic() + args.idle_s
    next_at = time.monotonic()
    while True:
        if job is not None:
            text = daemon.jobs.tail(job["id"], 0)["text"]
            state = daemon.jobs.describe(job["id"])
            if state["process_state"] not in ("running", "starting"):
                if phase != "after":
                    phase, phase_end = "after", time.monotonic() + args.after_s
            elif "phase stall" in text:
                phase = "stall"
            elif "phase load" in text:
                phase = "load"
        elif time.monotonic() >= phase_end:
            job = daemon.jobs.submit([sys.executable, "-c", LOAD, str(args.load_s), str(args.stall_s)], name="matmul loop", kind="training")
            phase = "starting"
        if phase == "after" and time.monotonic() >= phase_end:
            break
        recording.begin_frame(phase)
        sampler.sample_once(time.time(), time.monotonic())
        recording.frames[-1]["sample"] = sampler.latest_sample()
        v1_used = [v1_memory_used(recording, gpu.handle) for gpu in (sampler._nvml.gpus if sampler._nvml else ())]
        recording.end_frame()
        sample = sampler.latest_sample()
        print("%-8s %s | %s" % (phase, " ".join("gpu%d %s%% %sW %sMiB (v1 %sMiB)" % (g["index"], g["utilization_percent"], g["power_w"],
                                                                                  (g["memory_used_bytes"] or 0) >> 20, v1 >> 20)
                                               for g, v1 in zip(sample["gpus"], v1_used)),
                               " ".join("%s:%s" % (p["pid"], p.get("job_id") or ("other ns" if p.get("other_namespace") else "-")) for p in sample["processes"])), flush=True)
        next_at += 1.0
        time.sleep(max(0.0, next_at - time.monotonic()))
    sampler.stop()
    log_text = daemon.jobs.tail(job["id"], 0)["text"] if job else ""
    recording.save(args.out, recorded_at=time.time(), driver_version=sampler._nvml_state.get("driver_version"),
                   memory_calls="v2 (what the sampler reads) with v1 beside it" if hasattr(pynvml, "nvmlMemory_v2") else "v1",
                   load_job=job and job["id"], load_exit=daemon.jobs.describe(job["id"])["exit_code"] if job else None,
                   phases={"idle_s": args.idle_s, "load_s": args.load_s, "stall_s": args.stall_s, "after_s": args.after_s},
                   command="python3 benchmarks/record_nvml.py %s %s" % (os.path.basename(args.out), " ".join(
                       "--%s %g" % (name.replace("_", "-"), getattr(args, name)) for name in ("idle_s", "load_s", "stall_s", "after_s"))),
                   job_log_tail=log_text[-2000:])
    print("wrote %s: %d frames, %d bytes" % (args.out, len(recording.frames), os.path.getsize(args.out)))
    shutil.rmtree(os.environ["SPECDECK_HOME"], ignore_errors=True)  # the load job's record and log


if __name__ == "__main__":
    main()
