"""The spine's figures, ours beside today's way, in one run:

  python -m pytest benchmarks/bench_spine.py -q -s

- connect + bootstrap: first time (agent uploaded, daemon started) and again (cached),
  against `ssh HOST python3 -c pass` with OpenSSH's client (the least any ad-hoc query costs);
- one request's round trip over an open connection, against `ssh HOST true` per query;
- listing the tensors of a 2.38 GB drafter (real data on disk) over an open connection,
  against `ssh HOST python -c` with safe_open + get_tensor per key (what people do today);
- a cut link: time until noticed, and from the link's return until streams resume.
"""

import shlex
import shutil
import statistics
import subprocess
import time


from tests.checkpoint_fixtures import write_k2_drafter
from tests.helpers.cli import laptop_for
from tui.transport import bootstrap
from tui.transport.client import AgentClient
from tui.transport.connection import link_factory, open_client

def median_time(fn, n):
    times = []
    for _ in range(n):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def line(label, ours_s, base_s):
    print("  %-46s ours %9.2f ms   baseline %9.2f ms   %7.1fx" % (label, ours_s * 1e3, base_s * 1e3, base_s / ours_s))


def ssh_argv(home, *command):
    return ["ssh", "-F", str(home / ".ssh" / "config"), "-o", "BatchMode=yes", "gpuhost", *command]


def test_spine_figures(laptop, sshd, host_python, host_ml_python, host_user):
    print("\nspine, over a real sshd on loopback:")
    agents = host_user.home / bootstrap.AGENT_DIR

    def first_connect():
        shutil.rmtree(agents, ignore_errors=True)
        client = open_client("gpuhost", python=host_python)
        client.call("daemon.shutdown")
        client.close()
        time.sleep(0.6)  # let the daemon go, so the next connect starts one

    first = median_time(first_connect, 3)
    baseline_exec = median_time(lambda: subprocess.run(ssh_argv(laptop, host_python, "-c", "pass"), check=True), 5)
    line("connect + bootstrap, first time (upload)", first, baseline_exec)

    def again():
        open_client("gpuhost", python=host_python).close()

    open_client("gpuhost", python=host_python).close()
    line("connect + bootstrap, again (cached)", median_time(again, 5), baseline_exec)

    client = open_client("gpuhost", python=host_python)
    for _ in range(20):
        client.call("ping")
    rtt = median_time(lambda: client.call("ping"), 200)
    baseline_true = median_time(lambda: subprocess.run(ssh_argv(laptop, "true"), check=True), 5)
    line("one request's round trip", rtt, baseline_true)

    # The K2 drafter's exact layout with real bytes, stored as F16 so numpy (the baseline's
    # framework on a host without torch) can load it; same sizes as BF16.
    write_k2_drafter(host_user.home / "k2-drafter", sparse=False, dtype_override="F16")
    drafter = host_user.home / "k2-drafter" / "model.safetensors"
    size = drafter.stat().st_size
    subprocess.run(["chown", "-R", host_user.name, str(drafter.parent)], check=True)

    def ours():
        from tui.checkpoints.view import format_inspect

        format_inspect(client.call("checkpoint.inspect", {"path": str(drafter)}))

    ours()
    listing = median_time(ours, 20)
    script = (
        "from safetensors import safe_open\n"
        "f = safe_open(%r, framework='np')\n"
        "for k in f.keys():\n    t = f.get_tensor(k); print(k, t.shape, t.dtype)\n" % str(drafter)
    )
    baseline_listing = median_time(lambda: subprocess.run(ssh_argv(laptop, host_ml_python, "-c", shlex.quote(script)), check=True, capture_output=True), 3)
    line("list tensors of a %.2f GB drafter" % (size / 1e9), listing, baseline_listing)
    client.close()
    shutil.rmtree(drafter.parent)


def test_cut_link_figures(netns_host, tmp_path, monkeypatch, host_python):
    laptop_for(netns_host, tmp_path, monkeypatch)
    noticed, resumed = [], []
    for _ in range(3):
        events = {}
        client = AgentClient(
            link_factory("gpuhost", python=host_python), reconnect=True,
            on_state=lambda state, detail: events.setdefault(state, time.monotonic()),
        )
        client.start()
        events.clear()
        netns_host.cut()
        cut_at = time.monotonic()
        while "reconnecting" not in events:
            time.sleep(0.01)
        noticed.append(events["reconnecting"] - cut_at)
        time.sleep(2)
        events.pop("connected", None)
        netns_host.restore()
        back_at = time.monotonic()
        while "connected" not in events:
            time.sleep(0.01)
        resumed.append(events["connected"] - back_at)
        client.close()
    print("\ncut link (3 runs): noticed after %s s (target < 5 s); resumed %s s after the link returned (target < 1 s)"
          % (" ".join("%.2f" % s for s in noticed), " ".join("%.2f" % s for s in resumed)))
