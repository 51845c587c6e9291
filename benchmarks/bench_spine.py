"""The spine's figures, ours beside today's way, in one run:

  python -m pytest benchmarks/bench_spine.py -q -s

- connect + bootstrap: first time (agent uploaded, daemon started) and again (cached),
  against `ssh HOST python3 -c pass` with OpenSSH's client (the least any ad-hoc query costs);
- one request's round trip over an open connection, against `ssh HOST true` per query;
- listing the tensors of a 2.38 GB drafter (real data on disk) over an open connection,
  against `ssh HOST python -c` with safe_open + get_tensor per key (what people do today);
- a cut link: time until noticed, and from the link's return until streams resume.
"""

import json
import shutil
import statistics
import struct
import subprocess
import time


from tests.conftest import laptop_for
from tui import bootstrap
from tui.client import AgentClient
from tui.connection import link_factory, open_client

K2_TENSORS = [  # the published K2 EAGLE-3 drafter's layout, stored here as F16 so numpy can load it
    ("d2t", "I64", [32000]), ("t2d", "BOOL", [163840]), ("fc.weight", "F16", [7168, 21504]),
    ("lm_head.weight", "F16", [32000, 7168]), ("midlayer.hidden_norm.weight", "F16", [7168]),
    ("midlayer.input_layernorm.weight", "F16", [7168]), ("midlayer.mlp.down_proj.weight", "F16", [7168, 18432]),
    ("midlayer.mlp.gate_proj.weight", "F16", [18432, 7168]), ("midlayer.mlp.up_proj.weight", "F16", [18432, 7168]),
    ("midlayer.post_attention_layernorm.weight", "F16", [7168]), ("midlayer.self_attn.k_proj.weight", "F16", [1024, 14336]),
    ("midlayer.self_attn.o_proj.weight", "F16", [7168, 8192]), ("midlayer.self_attn.q_proj.weight", "F16", [8192, 14336]),
    ("midlayer.self_attn.v_proj.weight", "F16", [1024, 14336]), ("norm.weight", "F16", [7168]),
]
SIZES = {"I64": 8, "BOOL": 1, "F16": 2}


def write_k2_like(path):
    """A 2.38 GB safetensors file with real (non-hole) bytes in every tensor."""
    header, offset = {}, 0
    for name, dtype, shape in K2_TENSORS:
        n = SIZES[dtype]
        for d in shape:
            n *= d
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [offset, offset + n]}
        offset += n
    raw = json.dumps(header, separators=(",", ":")).encode()
    raw += b" " * (-len(raw) % 8)
    block = (bytes(range(0, 256, 2)) * 8192)[: 1 << 20]  # even bytes: valid f16/bool/int values
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(raw)) + raw)
        left = offset
        while left:
            chunk = block[: min(left, len(block))]
            f.write(chunk)
            left -= len(chunk)
    return 8 + len(raw) + offset


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

    drafter = host_user.home / "k2-drafter" / "model.safetensors"
    drafter.parent.mkdir(exist_ok=True)
    size = write_k2_like(drafter)
    shutil.chown(drafter.parent, host_user.name)
    shutil.chown(drafter, host_user.name)

    def ours():
        from tui.checkpoint_view import format_inspect

        format_inspect(client.call("checkpoint.inspect", {"path": str(drafter)}))

    ours()
    listing = median_time(ours, 20)
    script = (
        "from safetensors import safe_open\n"
        "f = safe_open(%r, framework='np')\n"
        "for k in f.keys():\n    t = f.get_tensor(k); print(k, t.shape, t.dtype)\n" % str(drafter)
    )
    baseline_listing = median_time(lambda: subprocess.run(ssh_argv(laptop, host_ml_python, "-c", json.dumps(script)), check=True, capture_output=True), 3)
    line("list tensors of a %.2f GB drafter" % (size / 1e9), listing, baseline_listing)
    client.close()
    drafter.unlink()


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
