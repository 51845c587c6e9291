"""Listing a 64-shard MoE target with 100,000+ (and 1,000,000) tensors: ours against safetensors.

Side by side on the same header-only shards (tests/checkpoint_fixtures.py, built once and
cached), each method in its own fresh process so that its peak RSS is its own:
  safetensors   safe_open(shard).keys() + get_slice(k).get_shape()/get_dtype(), every shard
  ours, one pass remote.checkpoints.summary_stream: shard after shard, no listing kept (what
                `inspect` without --all runs where the checkpoint lies)
  ours          remote.checkpoints.listing: read, check, group by name pattern, summary + first page
                (what the daemon keeps for the console's pages)
  ours, paged   the same, then every page of 5,000 tensors (what `inspect --all` does)
  daemon        checkpoint.inspect + every checkpoint.tensors page through the real local agent:
                the console's and the daemon's peak RSS (skipped when the console cannot start one)
Figures: seconds (median of --repeat fresh processes), tensors per second, peak RSS, and ours/theirs.

Then whole commands, each a fresh interpreter timed from its start to its exit (imports and
output included) with its own peak RSS: `python -m tui.cli inspect local:DIR --json` (what a user
runs on the host) against a plain script that lists the same shards with safe_open(framework=
"numpy") keys + get_slice, the ratios printed.

Usage: python3 benchmarks/bench_inspect_moe.py [--sizes 100k,1m] [--repeat 3] [--cache DIR]
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO_ROOT)

# (layers, experts) giving ~100,000+ and ~1,000,000 tensors over 64 shards.
SIZES = {"100k": (61, 384), "1m": (61, 2776)}
DEFAULT_CACHE = os.path.join(tempfile.gettempdir(), "specdeck-fixtures")

# Each method runs as `python -c CHILD method directory`, printing {"tensors", "seconds", "peak_rss_bytes"}.
CHILD = r'''
import glob, json, os, sys, time
sys.path.insert(0, %(root)r)
method, directory = sys.argv[1], sys.argv[2]
started = time.perf_counter()
extra = {}
if method == "safetensors":
    from safetensors import safe_open
    count = 0
    for shard in sorted(glob.glob(os.path.join(directory, "*.safetensors"))):
        with safe_open(shard, framework="np") as f:
            for key in f.keys():
                piece = f.get_slice(key)
                piece.get_shape(), piece.get_dtype()
                count += 1
elif method == "ours-one-pass":
    from remote.checkpoints import summary_stream
    summary = summary_stream.summary(directory)
    assert summary is not None, "the one-pass summary declined"
    count = summary["tensor_count"]
elif method in ("ours", "ours-paged"):
    from remote.checkpoints import listing
    kept = listing.open_listing(directory)
    summary = kept.summary()
    count = summary["tensor_count"]
    if method == "ours-paged":
        offset = len(summary["tensors"])
        while offset < count:
            offset += len(kept.page(offset, 5000)["tensors"])
        assert offset == count
elif method == "daemon":
    os.environ["SPECDECK_HOME"] = sys.argv[3]
    from tui.transport.connection import open_client
    client = open_client("local")
    started = time.perf_counter()
    summary = client.call("checkpoint.inspect", {"path": directory}, timeout=600)
    count, offset, largest = summary["tensor_count"], len(summary["tensors"]), 0
    while offset < count:
        page = client.call("checkpoint.tensors", {"handle": summary["handle"], "offset": offset, "limit": 5000}, timeout=600)
        offset += len(page["tensors"])
        largest = max(largest, len(json.dumps(page)))
    assert offset == count
    seconds = time.perf_counter() - started
    with open("/proc/%%d/status" %% client.hello["daemon_pid"]) as f:
        hwm = [l for l in f if l.startswith("VmHWM:")][0]
    extra = {"daemon_peak_rss_bytes": int(hwm.split()[1]) * 1024, "largest_page_bytes": largest, "seconds": seconds}
    client.close()
# VmHWM, not ru_maxrss: Linux carries ru_maxrss over from the parent across fork and exec.
with open("/proc/self/status") as f:
    peak = int([l for l in f if l.startswith("VmHWM:")][0].split()[1]) * 1024
result = {"tensors": count, "seconds": time.perf_counter() - started, "peak_rss_bytes": peak}
result.update(extra)
print(json.dumps(result))
'''


# A whole command run in a fresh interpreter that reports its own peak RSS as it exits.
WHOLE = r'''
import atexit, os, runpy, sys
def peak():
    with open("/proc/self/status") as f:
        hwm = int([l for l in f if l.startswith("VmHWM:")][0].split()[1]) * 1024
    os.write(report_fd, str(hwm).encode())
atexit.register(peak)
_exit = os._exit
def exit_reporting(code):  # the CLI ends with os._exit (no teardown), which skips atexit
    peak()
    _exit(code)
os._exit = exit_reporting
sys.path.insert(0, %(root)r)
kind, directory, report_fd = sys.argv[1], sys.argv[2], int(sys.argv[3])
if kind == "cli":
    sys.argv = ["specdeck", "inspect", "local:" + directory, "--json"]
    runpy.run_module("tui.cli", run_name="__main__")
else:
    import glob
    from safetensors import safe_open
    count = 0
    for shard in sorted(glob.glob(os.path.join(directory, "*.safetensors"))):
        with safe_open(shard, framework="numpy") as f:
            for key in f.keys():
                piece = f.get_slice(key)
                piece.get_shape(), piece.get_dtype()
                count += 1
    print(count)
'''


def run_whole(kind, directory):
    """(seconds from the interpreter's start to its exit, its peak RSS) of one whole command."""
    read_end, write_end = os.pipe()
    started = time.perf_counter()
    out = subprocess.run([sys.executable, "-c", WHOLE % {"root": REPO_ROOT}, kind, directory, str(write_end)],
                         stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, pass_fds=(write_end,))
    seconds = time.perf_counter() - started
    os.close(write_end)
    with os.fdopen(read_end) as f:
        peak = f.read()
    if out.returncode not in (0, 1) or not peak:
        raise RuntimeError("%s failed: %s" % (kind, out.stderr.strip()[-500:]))
    return seconds, int(peak)


def whole_commands(directory, repeat):
    runs = {kind: [run_whole(kind, directory) for _ in range(repeat)] for kind in ("safetensors", "cli")}
    figures = dict((kind, (statistics.median(s for s, _ in r), max(p for _, p in r))) for kind, r in runs.items())
    (base_s, base_rss), (ours_s, ours_rss) = figures["safetensors"], figures["cli"]
    print("%-52s %9s %11s" % ("whole command (fresh interpreter, imports included)", "seconds", "peak RSS"))
    print("%-52s %9.3f %8.0f MB" % ("safetensors: safe_open(numpy) keys + get_slice", base_s, base_rss / 1e6))
    print("%-52s %9.3f %8.0f MB" % ("ours: python -m tui.cli inspect local:DIR --json", ours_s, ours_rss / 1e6))
    print("ours / safetensors: %.2fx time, %.2fx peak RSS" % (ours_s / base_s, ours_rss / base_rss))


def run_child(method, directory, *extra):
    code = CHILD % {"root": REPO_ROOT}
    out = subprocess.run([sys.executable, "-c", code, method, directory] + list(extra), capture_output=True, text=True)
    if out.returncode != 0:
        raise RuntimeError("%s failed: %s" % (method, out.stderr.strip().splitlines()[-1:] or out.stderr))
    return json.loads(out.stdout.strip().splitlines()[-1])


def median_run(method, directory, repeat, *extra):
    runs = [run_child(method, directory, *extra) for _ in range(repeat)]
    best = dict(runs[0])
    best["seconds"] = statistics.median(r["seconds"] for r in runs)
    best["peak_rss_bytes"] = max(r["peak_rss_bytes"] for r in runs)
    if "daemon_peak_rss_bytes" in best:
        best["daemon_peak_rss_bytes"] = max(r["daemon_peak_rss_bytes"] for r in runs)
    return best


def stop_daemon(home):
    try:
        from tests.helpers.cli import stop_daemon as stop
    except ImportError:
        return
    stop(home)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="100k,1m")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--cache", default=DEFAULT_CACHE)
    parser.add_argument("--no-daemon", action="store_true")
    args = parser.parse_args(argv)
    sys.path.insert(0, os.path.join(REPO_ROOT, "tests"))
    import checkpoint_fixtures as fx

    for size in args.sizes.split(","):
        layers, experts = SIZES[size]
        started = time.perf_counter()
        facts = fx.cached_moe_target(args.cache, layers=layers, experts=experts, shards=64)
        directory = facts["directory"]
        header_bytes = 0
        for name in os.listdir(directory):
            if name.endswith(".safetensors"):
                with open(os.path.join(directory, name), "rb") as f:
                    header_bytes += int.from_bytes(f.read(8), "little")
        print("\n%s tensors over 64 shards (%s bytes of headers), fixture ready in %.1f s"
              % ("{:,}".format(facts["tensors"]), "{:,}".format(header_bytes), time.perf_counter() - started))
        run_child("ours", directory)  # warm the page cache for every method alike
        rows = [("safetensors: safe_open keys + get_slice shape/dtype", median_run("safetensors", directory, args.repeat)),
                ("ours, one pass: summary + first page (inspect)", median_run("ours-one-pass", directory, args.repeat)),
                ("ours, listing: summary + first page (the daemon)", median_run("ours", directory, args.repeat)),
                ("ours: summary + every page", median_run("ours-paged", directory, args.repeat))]
        daemon = None
        if not args.no_daemon:
            home = tempfile.mkdtemp(prefix="specdeck-bench-home.")
            try:
                daemon = median_run("daemon", directory, 1, home)
                rows.append(("daemon: inspect + every page over the wire", daemon))
            except (RuntimeError, ImportError) as exc:
                print("  (daemon row skipped: %s)" % exc)
            finally:
                stop_daemon(home)
        base = rows[0][1]
        print("%-52s %9s %14s %11s %10s" % ("method", "seconds", "tensors/s", "peak RSS", "x theirs"))
        for name, r in rows:
            print("%-52s %9.3f %14s %8.0f MB %9.2fx" % (name, r["seconds"], "{:,.0f}".format(r["tensors"] / r["seconds"]),
                                                       r["peak_rss_bytes"] / 1e6, r["seconds"] / base["seconds"]))
        if daemon:
            print("daemon peak RSS %.0f MB; largest page frame %s bytes (bound 16 MiB)"
                  % (daemon["daemon_peak_rss_bytes"] / 1e6, "{:,}".format(daemon["largest_page_bytes"])))
        wrong = [name for name, r in rows if r["tensors"] != facts["tensors"]]
        assert not wrong, "%s listed another number of tensors than the %s written" % (wrong, facts["tensors"])
        whole_commands(directory, args.repeat)


if __name__ == "__main__":
    main()
