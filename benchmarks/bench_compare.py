"""Comparing two checkpoints of a host from the console: the host's one `checkpoint.compare`
call against the way the console did it before (inspect both, page every tensor of both onto
the laptop, compare there), side by side over the local agent.

  python benchmarks/bench_compare.py

Cases: two small drafters (15 tensors each; then two whose weights differ), a 139,583-tensor MoE
target compared with itself (every tensor is matched, so the old way pages both listings across),
and the same target with a copy of it in another directory (the host also reads slices of each
tensor's bytes to compare the values, within its read budget). Printed: the wall time of each way,
the bytes of the replies that crossed the wire, the ratios, and what the host said of the values.

Then, on the host alone, each in a fresh process: compare_paths (what `specdeck compare` runs for
two paths of one machine) against two listings of the same checkpoints (each read and summarised,
the least a comparison must do), the ratio printed. `--host-only` runs only these.
"""

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from remote.checkpoints import compatibility  # noqa: E402 (after the path that finds it)
from tests.checkpoint_fixtures import cached_moe_target, write_drafter, write_moe_target  # noqa: E402
from tests.checkpoint_fixtures import FIXTURE_CACHE  # noqa: E402

RUNS = 3
PAGE = 5000


def wire_bytes(reply):
    return len(json.dumps(reply, separators=(",", ":")).encode())


def paged_on_the_laptop(client, path_a, path_b):
    """The former console path: both reports, every page of both, compared here."""
    received = 0
    reports = []
    for path in (path_a, path_b):
        report = client.call("checkpoint.inspect", {"path": path}, timeout=600)
        received += wire_bytes(report)
        tensors = list(report["tensors"])
        while len(tensors) < report["tensor_count"]:
            page = client.call("checkpoint.tensors", {"handle": report["handle"], "path": path, "offset": len(tensors),
                                                      "limit": PAGE}, timeout=600)
            received += wire_bytes(page)
            tensors += page["tensors"]
        reports.append(dict(report, tensors=tensors, complete=True))
    result = compatibility.compare(*reports)
    return result["verdict"], received


def on_the_host(client, path_a, path_b):
    reply = client.call("checkpoint.compare", {"a": path_a, "b": path_b}, timeout=600)
    return reply["verdict"]["status"], wire_bytes(reply), (reply.get("values") or {}).get("message")


def best_of(function, *args):
    times, outcome = [], None
    for _ in range(RUNS):
        started = time.perf_counter()
        outcome = function(*args)
        times.append(time.perf_counter() - started)
    return min(times), outcome


# `python -c HOST_SIDE way a b`: one way timed in a fresh process, printing its seconds.
HOST_SIDE = r'''
import sys, time
sys.path.insert(0, %(root)r)
way, path_a, path_b = sys.argv[1:4]
started = time.perf_counter()
from remote.checkpoints import comparison, listing
from remote.checkpoints.collect import collect
if way == "compare":
    status = comparison.compare_paths(path_a, path_b)["verdict"]["status"]
else:
    status = [listing.Listing(collect(path)).summary()["tensor_count"] for path in (path_a, path_b)]
print(time.perf_counter() - started, status)
'''


def host_side(way, path_a, path_b):
    out = subprocess.run([sys.executable, "-c", HOST_SIDE % {"root": ROOT}, way, path_a, path_b], capture_output=True,
                         text=True, check=True)
    return float(out.stdout.split()[0])


def on_the_host_alone(cases):
    print("\non the host alone (fresh process each, best of %d)" % RUNS)
    for name, path_a, path_b in cases:
        listed = min(host_side("listings", path_a, path_b) for _ in range(RUNS))
        compared = min(host_side("compare", path_a, path_b) for _ in range(RUNS))
        print(name)
        print("  two listings:         %7.2f s" % listed)
        print("  compare_paths:        %7.2f s" % compared)
        print("  ratio (compare / two listings): %.2fx" % (compared / listed))


def main():
    moe = cached_moe_target(FIXTURE_CACHE)["directory"]
    copies = tempfile.mkdtemp(prefix="moe-copy-")
    try:
        on_the_host_alone([("MoE target with itself (139,583 tensors)", moe, moe),
                           ("MoE target with a copy of it", moe, write_moe_target(os.path.join(copies, "moe"))["directory"])])
    finally:
        shutil.rmtree(copies, ignore_errors=True)
    if "--host-only" in sys.argv[1:]:
        return
    over_the_wire()


def over_the_wire():
    from tests.helpers.cli import stop_daemon

    home = tempfile.mkdtemp(prefix="specdeck-bench-compare-")
    os.chmod(home, 0o700)
    os.environ["SPECDECK_HOME"] = home
    from tui.transport.connection import open_client

    client = open_client("local")
    try:
        drafters = tempfile.mkdtemp(prefix="drafters-")
        first = write_drafter(os.path.join(drafters, "a"))
        cases = [
            ("two drafters (15 tensors each)", first, write_drafter(os.path.join(drafters, "b"), layout="speculators")),
            ("two drafters whose weights differ", first, write_drafter(os.path.join(drafters, "c"), values=1)),
        ]
        moe = cached_moe_target(FIXTURE_CACHE)["directory"]
        cases.append(("MoE target with itself (139,583 tensors)", moe, moe))
        cases.append(("MoE target with a copy of it", moe, write_moe_target(os.path.join(drafters, "moe-copy"))["directory"]))
        for name, path_a, path_b in cases:
            on_the_host(client, path_a, path_b)  # warm both ways' listings (kept by the agent)
            old_s, (old_verdict, old_bytes) = best_of(paged_on_the_laptop, client, path_a, path_b)
            new_s, (new_verdict, new_bytes, values) = best_of(on_the_host, client, path_a, path_b)
            assert old_verdict == new_verdict, (old_verdict, new_verdict)
            print(name)
            print("  paged to the laptop:  %7.2f s  %12s bytes received" % (old_s, format(old_bytes, ",")))
            print("  checkpoint.compare:   %7.2f s  %12s bytes received" % (new_s, format(new_bytes, ",")))
            print("  ratio (old / new):    %7.1fx time, %.1fx bytes" % (old_s / new_s, old_bytes / new_bytes))
            print("  values: %s" % values)
        shutil.rmtree(drafters, ignore_errors=True)
    finally:
        client.close()
        stop_daemon(home)
        shutil.rmtree(home, ignore_errors=True)


if __name__ == "__main__":
    main()
