"""The series of a telemetry sample that the morning report reads back (remote/report/): each
followed disk's free and total bytes (labels: the disk's path), and each job's GPU utilisation
(the mean over the GPUs its processes hold; labels: the job's id)."""

# Not the host's source: the sampler gives those the host's labels, and these keep their own.
SOURCE = "report"

JOBS_MAX = 100  # jobs recorded per sample: at most this many series


def report_points(sample):
    """[(source, name, labels, value)], as series_points gives them."""
    points = []
    for disk in sample["host"].get("disks") or []:
        if disk.get("free_bytes") is not None and disk.get("path"):
            points.append((SOURCE, "disk_free_bytes", {"disk": disk["path"]}, disk["free_bytes"]))
            if disk.get("total_bytes") is not None:
                points.append((SOURCE, "disk_total_bytes", {"disk": disk["path"]}, disk["total_bytes"]))
    utilisation = {gpu["index"]: gpu.get("utilization_percent") for gpu in sample["gpus"]}
    held = {}
    for process in sample["processes"]:
        value = utilisation.get(process.get("gpu_index"))
        if process.get("job_id") and value is not None:
            held.setdefault(process["job_id"], {})[process["gpu_index"]] = value
    for job_id, gpus in sorted(held.items())[:JOBS_MAX]:
        points.append((SOURCE, "job_gpu_utilization_percent", {"job": job_id}, sum(gpus.values()) / len(gpus)))
    return points
