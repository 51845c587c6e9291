"""A headless command's cost over a long link, ours beside OpenSSH's in one run:

  python -m pytest benchmarks/bench_headless.py -q -s

Over a delay proxy on loopback (tests/delay_proxy.py) at 150 ms round trip and at 0 ms:
`ssh HOST true` and `ssh HOST python3 -c pass` (OpenSSH's client, a new connection each), and
`specdeck jobs HOST` cold (no keeper: it starts one, which connects; the agent cached on the
host), cold on first contact (the agent sent through the boot) and warm (the keeper holds the
link). Each figure is the median of a few runs; the round trips each takes are (t150 - t0) /
0.15, beside the proxy's count of the times the conversation turned. Targets (issue 18): cold
at most one round trip over `ssh HOST true`, warm under 0.25 s at 150 ms.
"""

import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from tests.helpers.cli import REPO_ROOT, run_cli
from tests.delay_proxy import DelayProxy
from tests.helpers.keepers import end_keepers
from tui.transport import bootstrap

RTT_S = 0.15


def laptop_via(sshd, tmp_path, proxy):
    """A laptop HOME whose `gpuhost` goes through the proxy (the host key known under the sshd's name)."""
    home = sshd.client_home(tmp_path)
    config = home / ".ssh" / "config"
    text = config.read_text().replace("Port %d" % sshd.port, "Port %d" % proxy.port)
    config.write_text(text + "    HostKeyAlias [%s]:%d\n" % (sshd.host, sshd.port))
    return home


def measure(proxy, fn, runs, before=None):
    """(median seconds, mean turns) over `runs` runs of fn; `before` runs untimed before each."""
    times, turns = [], []
    for _ in range(runs):
        if before:
            before()
        turns_before = proxy.turns
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
        turns.append(proxy.turns - turns_before)
    return statistics.median(times), statistics.mean(turns)


def test_headless_figures(sshd, tmp_path, host_python, host_user):
    # As installed: the modules compiled once (an environment with PYTHONDONTWRITEBYTECODE would
    # otherwise compile every changed module again in each command it runs).
    subprocess.run([sys.executable, "-m", "compileall", "-q", "tui", "remote"], cwd=str(REPO_ROOT), check=True,
                   env=dict(os.environ, PYTHONDONTWRITEBYTECODE=""))
    runtime_dir = Path(tempfile.mkdtemp(prefix="sd-bench-"))
    agents = host_user.home / bootstrap.AGENT_DIR
    figures = {}
    try:
        for rtt in (0.0, RTT_S):
            with DelayProxy(sshd.port, rtt_s=rtt) as proxy:
                home = laptop_via(sshd, tmp_path, proxy)
                env = dict(os.environ, HOME=str(home))
                env.pop("SSH_AUTH_SOCK", None)
                ssh = ["ssh", "-F", str(home / ".ssh" / "config"), "-o", "BatchMode=yes", "gpuhost"]

                def jobs():
                    run_cli("jobs", "gpuhost", "--python", host_python, home=home, env={"XDG_RUNTIME_DIR": str(runtime_dir)}, check=0)

                def first_contact():
                    end_keepers(runtime_dir)
                    host_user.run(["rm", "-rf", str(agents)])

                jobs()  # the daemon up, the agent cached
                figures["ssh HOST true", rtt] = measure(proxy, lambda: subprocess.run(ssh + ["true"], env=env, check=True), 5)
                figures["ssh HOST python3 -c pass", rtt] = measure(
                    proxy, lambda: subprocess.run(ssh + [host_python, "-c", "pass"], env=env, check=True), 5)
                figures["specdeck jobs, cold first contact", rtt] = measure(proxy, jobs, 3, before=first_contact)
                figures["specdeck jobs, cold", rtt] = measure(proxy, jobs, 5, before=lambda: end_keepers(runtime_dir))
                jobs()
                # A command a moment after the last (a script's next line, a person's next
                # command): the keeper has its next relay ready by then.
                figures["specdeck jobs, warm", rtt] = measure(proxy, jobs, 5, before=lambda: time.sleep(1.0))
                # Back to back: each command waits for the relay the keeper started after the last.
                figures["specdeck jobs, warm, back to back", rtt] = measure(proxy, jobs, 5)
                end_keepers(runtime_dir)
    finally:
        end_keepers(runtime_dir)
    print("\nheadless commands over a delay proxy (median; round trips = (t%d - t0) / %.2f; turns: the proxy's count at %d ms):"
          % (RTT_S * 1000, RTT_S, RTT_S * 1000))
    labels = ["ssh HOST true", "ssh HOST python3 -c pass", "specdeck jobs, cold", "specdeck jobs, cold first contact", "specdeck jobs, warm",
              "specdeck jobs, warm, back to back"]
    for label in labels:
        t0, _ = figures[label, 0.0]
        t150, turns = figures[label, RTT_S]
        print("  %-36s %7.3f s at %3d ms  %7.3f s at 0 ms  %5.1f round trips  %5.1f turns"
              % (label, t150, RTT_S * 1000, t0, (t150 - t0) / RTT_S, turns))
    ssh_true = figures["ssh HOST true", RTT_S][0]
    cold = figures["specdeck jobs, cold", RTT_S][0]
    warm = figures["specdeck jobs, warm", RTT_S][0]
    print("  cold: %.3f s, ssh true + 1 round trip: %.3f s (target: cold <= that): %s; ratio to ssh true %.2fx"
          % (cold, ssh_true + RTT_S, "met" if cold <= ssh_true + RTT_S else "NOT met", cold / ssh_true))
    print("  warm: %.3f s (target < 0.25 s): %s; %.1fx faster than ssh true"
          % (warm, "met" if warm < 0.25 else "NOT met", ssh_true / warm))
