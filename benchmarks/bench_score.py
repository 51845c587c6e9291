"""Scoring against reading: samples scored per second by the score job against a plain read of
the same sample files (the score should be bound by reading), and the job's peak memory against
the three target tensors plus one sample, ratios printed. Runs the job in this process under an
interpreter with torch (the speculators venv, or the host's ML python).

Usage: ML_PYTHON benchmarks/bench_score.py TARGET DRAFTER DATA [K] [SAMPLES|all] [RUNS]
The job runs RUNS times (default 2) in one process and the last run is reported: the first pays
torch's one-time setup of each operation, which on a small data set is most of its time.
"""

import json
import os
import resource
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from remote.scoring import plan, samples, score_job, tensors  # noqa: E402


def plain_read(files):
    """Samples per second reading every byte of each file, as the job reads them (byte ranges)."""
    began = time.monotonic()
    for _index, path in files:
        for span in tensors.header_spans(path).values():
            tensors.read_span(span)
    return len(files) / (time.monotonic() - began)


def main(argv):
    target, drafter, data = argv[1:4]
    k = int(argv[4]) if len(argv) > 4 else 5
    limit = int(argv[5]) if len(argv) > 5 and argv[5] != "all" else None
    runs = int(argv[6]) if len(argv) > 6 else 2
    checked = plan.check(drafter, target, data, k)
    files = samples.find(data)["files"][:limit] if limit else samples.find(data)["files"]
    read_rate = plain_read(files)
    work = tempfile.mkdtemp()
    os.environ["SPECDECK_JOB_DIR"] = work
    spec = dict(checked, k=k, samples=limit, split="all", train_ratio=0.9, device=None,
                result_path=os.path.join(work, "result.json"), profile_fallback=os.path.join(work, "profile.json"))
    out = sys.stdout
    sys.stdout = open(os.devnull, "w")
    try:
        for _run in range(max(1, runs)):  # the first run pays torch's one-time setup of each operation
            score_job.run(spec)
    finally:
        sys.stdout = out
    result = json.load(open(os.path.join(work, "result.json")))
    sample_bytes = max(os.path.getsize(path) for _index, path in files)
    floor = checked["target"]["tensor_bytes"] + sample_bytes
    print("samples              %d (%s layout), K=%d, on %s; the last of %d runs in one process" % (
        result["samples_scored"], result["layout"], k, result["device"], runs))
    print("plain read           %.1f samples/s" % read_rate)
    print("scored               %.1f samples/s   ratio %.2f of the read rate" % (result["samples_per_s"], result["samples_per_s"] / read_rate))
    print("peak memory          %.1f MiB   three target tensors + one sample %.1f MiB   ratio %.2f" % (
        result["peak_rss_bytes"] / 2.0 ** 20, floor / 2.0 ** 20, result["peak_rss_bytes"] / float(floor)))
    print("predicted accept length %.3f" % result["predicted_accept_length"])
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
