"""Listing a 2.4 GB checkpoint: specdeck's header reader against what people do today.

Side by side on the same real-data file (the K2 drafter's exact layout, 2,382,319,104 bytes):
  ours          remote.checkpoints.report.inspect (headers, config.json, and the d2t/t2d check)
  ours, header  read_header + check_header only (what safe_open's metadata path also does)
  safe_open metadata   keys + get_slice(k).get_shape()/get_dtype()
  safe_open get_tensor every tensor loaded, as the ad-hoc scripts did to print shapes
The file is written once (real bytes, not a hole) and reused; the page cache cannot be dropped
here, so every figure is a warm one (the slow path is run twice, the second run reported).

Usage: python3 benchmarks/bench_inspect.py [--dir DIR] [--repeat N]
"""

import argparse
import os
import statistics
import sys
import tempfile
import time

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO_ROOT)
sys.path.insert(0, os.path.join(REPO_ROOT, "tests"))

from remote.checkpoints import report as checkpoint  # noqa: E402

DEFAULT_DIR = os.path.join(tempfile.gettempdir(), "specdeck-bench", "k2-layout-real")


def ensure_real_k2_file(directory=DEFAULT_DIR):
    """The K2 drafter layout with every byte written, created on first use and then reused.

    F16 stands in for BF16 (same two bytes per element) so that numpy can load the tensors.
    """
    import checkpoint_fixtures as fx

    path = os.path.join(directory, "model.safetensors")
    if os.path.exists(path) and os.path.getsize(path) == fx.K2_FILE_BYTES:
        if os.stat(path).st_blocks * 512 >= fx.K2_FILE_BYTES * 0.99:  # really written, not sparse
            return directory
    print("writing %s (2,382,319,104 bytes of real data, once)..." % path, flush=True)
    started = time.perf_counter()
    fx.write_k2_drafter(directory, sparse=False, dtype_override="F16")
    print("  written in %.1f s" % (time.perf_counter() - started), flush=True)
    return directory


def timed(fn, repeat):
    times = []
    result = None
    for _ in range(repeat):
        started = time.perf_counter()
        result = fn()
        times.append(time.perf_counter() - started)
    return statistics.median(times), result


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dir", default=DEFAULT_DIR)
    parser.add_argument("--repeat", type=int, default=20)
    args = parser.parse_args(argv)
    from safetensors import safe_open

    directory = ensure_real_k2_file(args.dir)
    path = os.path.join(directory, "model.safetensors")
    size = os.path.getsize(path)

    def ours():
        report = checkpoint.inspect(directory)
        assert report["problems"] == [], report["problems"]
        return len(report["tensors"])

    def ours_header():
        header, start, file_size = checkpoint.read_header(path)
        tensors, problems = checkpoint.check_header(header, file_size - start)
        assert not problems
        return len(tensors)

    def metadata_only():
        with safe_open(path, framework="np") as f:
            return len([(k, f.get_slice(k).get_shape(), f.get_slice(k).get_dtype()) for k in f.keys()])

    def get_tensor_per_key():
        loaded = 0
        with safe_open(path, framework="np") as f:
            for k in f.keys():
                loaded += f.get_tensor(k).nbytes
        assert loaded == size - 8 - 1528
        return loaded

    ours()  # first touch: imports, page cache for the header
    t_ours, n = timed(ours, args.repeat)
    t_header, _ = timed(ours_header, args.repeat)
    t_meta, n_meta = timed(metadata_only, args.repeat)
    timed(get_tensor_per_key, 1)  # first pass may read from disk; report the warm one
    t_load, loaded = timed(get_tensor_per_key, 1)
    assert n == n_meta == 15

    print("file: %s, %s bytes (%.2f GB, %.2f GiB), %d tensors" % (path, "{:,}".format(size), size / 1e9, size / 2 ** 30, n))
    print("%-50s %13s %13s" % ("method", "time", "x ours"))
    rows = [
        ("ours: inspect (header + config + d2t/t2d check)", t_ours),
        ("ours: read_header + check_header", t_header),
        ("safe_open: keys + get_slice shapes/dtypes", t_meta),
        ("safe_open: get_tensor per key (warm)", t_load),
    ]
    for name, seconds in rows:
        print("%-50s %10.3f ms %12.3gx" % (name, seconds * 1000, seconds / t_ours))
    print("ratio get_tensor / ours: %.0fx; metadata-only / ours header: %.2fx"
          % (t_load / t_ours, t_meta / t_header))
    print("get_tensor read %s bytes at %.2f GB/s" % ("{:,}".format(loaded), loaded / t_load / 1e9))


if __name__ == "__main__":
    main()
