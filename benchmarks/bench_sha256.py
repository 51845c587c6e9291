"""sha256 of a 2.4 GB checkpoint: remote.checkpoints.report.sha256_file against coreutils sha256sum.

Same real-data file as bench_inspect.py (written once, reused). The page cache cannot be
dropped here, so each method runs at least twice, interleaved with the others, and only warm
runs are reported (--runs N: the median of N-1 warm runs). Our reader is
tried at 1, 2, 4 and 8 MiB blocks; the module's default is HASH_BLOCK_BYTES.

Usage: python3 benchmarks/bench_sha256.py [--dir DIR] [--runs N]
"""

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_inspect import DEFAULT_DIR, ensure_real_k2_file  # noqa: E402
from remote.checkpoints import report as checkpoint  # noqa: E402

MIB = 1024 * 1024


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dir", default=DEFAULT_DIR)
    parser.add_argument("--runs", type=int, default=2,
                        help="rounds over all methods, interleaved; the first warms the cache and is not "
                             "reported, the median of the others is (default 2: run twice, report warm)")
    args = parser.parse_args(argv)
    path = os.path.join(ensure_real_k2_file(args.dir), "model.safetensors")
    size = os.path.getsize(path)
    tool = shutil.which("sha256sum")
    if tool is None:
        sys.exit("sha256sum is not on the PATH")

    def coreutils():
        out = subprocess.run([tool, path], capture_output=True, text=True, check=True).stdout
        return out.split()[0]

    methods = [("sha256sum (coreutils)", coreutils)]
    for block in (1 * MIB, 2 * MIB, 4 * MIB, 8 * MIB):
        marker = " (default)" if block == checkpoint.HASH_BLOCK_BYTES else ""
        methods.append(("ours, %d MiB blocks%s" % (block // MIB, marker),
                        lambda block=block: checkpoint.sha256_file(path, block_bytes=block)))
    times = dict((name, []) for name, _ in methods)
    digests = set()
    for round_index in range(max(2, args.runs)):
        for name, fn in methods:  # interleaved, so that drift on a shared machine hits all alike
            started = time.perf_counter()
            digests.add(fn())
            if round_index:
                times[name].append(time.perf_counter() - started)
    assert len(digests) == 1, digests
    t_tool = statistics.median(times[methods[0][0]])
    print("file: %s, %s bytes (%.2f GB, %.2f GiB); median of %d warm runs each"
          % (path, "{:,}".format(size), size / 1e9, size / 2 ** 30, max(2, args.runs) - 1))
    print("%-34s %9s %10s %13s" % ("method", "time", "GB/s", "vs sha256sum"))
    best = None
    for name, _ in methods:
        seconds = statistics.median(times[name])
        print("%-34s %7.2f s %10.2f %12.1f%%" % (name, seconds, size / seconds / 1e9, 100.0 * t_tool / seconds))
        if name != methods[0][0] and (best is None or seconds < best[1]):
            best = (name, seconds)
    print("best: %s at %.1f%% of sha256sum's throughput (target >= 95%%)" % (best[0], 100.0 * t_tool / best[1]))


if __name__ == "__main__":
    main()
