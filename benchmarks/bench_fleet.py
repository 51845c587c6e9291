"""`specdeck fleet` over 8 hosts against over one, in one run:

  python -m pytest benchmarks/bench_fleet.py -q -s

Eight hosts (tests/fleet_fixtures.py: eight ~/.ssh/config aliases of a real sshd, each through a
proxy of its own), asked by one `specdeck fleet` (ours), against the same eight asked one
command after another (the baseline: a loop over `specdeck fleet HOST`). The ratio of eight
hosts to one says how much the parallel asks cost: 1.0 is free, 8.0 is one after another. Once
on loopback and once with 150 ms of round trip in front of each host (an ocean away).
"""

import statistics
import time

from tests.helpers.cli import run_cli
from tests.fleet_fixtures import fleet_factory, fleet_sshd, fleet_users  # noqa: F401 (fixtures)

HOSTS = 8


def median_time(fn, n):
    times = []
    for _ in range(n):
        began = time.perf_counter()
        fn()
        times.append(time.perf_counter() - began)
    return statistics.median(times)


def fleet(fleet_hosts, *hosts):
    run_cli("fleet", *hosts, "--json", env=fleet_hosts.env, check=0)


def test_fleet_figures(fleet_factory):  # noqa: F811 (the fixture imported above)
    print("\nspecdeck fleet, %d hosts at once against one, and against %d commands one after another:" % (HOSTS, HOSTS))
    for rtt_s in (0.0, 0.15):
        hosts = fleet_factory(slow=HOSTS, rtt_s=rtt_s, silent=0, refused=0, unknown_key=0)
        names = hosts.names("slow")
        fleet(hosts, *names)  # the agent on the host, its daemon started
        one = median_time(lambda: fleet(hosts, names[0]), 5)
        eight = median_time(lambda: fleet(hosts, *names), 5)
        in_turn = median_time(lambda: [fleet(hosts, name) for name in names], 2)
        where = "loopback" if not rtt_s else "%d ms round trip" % (rtt_s * 1000)
        print("  %-18s 1 host %7.0f ms   %d hosts %7.0f ms (%.2fx one host)   %d commands in turn %7.0f ms   %5.1fx faster" % (
            where, one * 1e3, HOSTS, eight * 1e3, eight / one, HOSTS, in_turn * 1e3, in_turn / eight))


def test_summary_figures(tmp_path, monkeypatch):
    """One fleet.summary of a host with 8 GPUs, 10 servers and 10 training runs (a local agent,
    the H200 recording replayed), against the requests a console would make without it: the
    telemetry sample, each server's figures, each run's curves, the jobs and the alerts."""
    from tests.helpers.metrics import AFTER, MetricsServer
    from tests.fleet_fixtures import RECORDING
    from tests.helpers.cli import stop_daemon
    from tests.helpers.waits import wait_for
    from tui.transport.connection import open_client

    home = tmp_path / "specdeck-home"
    home.mkdir(mode=0o700)
    monkeypatch.setenv("SPECDECK_HOME", str(home))
    monkeypatch.setenv("SPECDECK_NVML_REPLAY", "%s:8" % RECORDING)
    client = open_client("local")
    servers = [MetricsServer() for _ in range(10)]
    try:
        server_ids = [client.call("serving.attach", {"url": server.url})["id"] for server in servers]
        for server in servers:
            server.text = AFTER
        step = "train/loss=1.5, train/full_acc_0=0.7, train/full_acc_1=0.5, epoch=0, global_step=%d"
        runs = [client.call("training.start", {"argv": ["sh", "-c", "echo '%s'; sleep 1; echo '%s'; sleep 600" % (step % 1, step % 2)],
                                               "steps_total": 1000})["id"] for _ in range(10)]
        wait_for(lambda: (lambda s: len(s["servers"]) == 10 and len(s["training"]) == 10 and s["gpus"])(client.call("fleet.summary")), 60)

        def without():
            client.call("telemetry.latest")
            for server_id in server_ids:
                client.call("serving.stats", {"id": server_id})
            for run in runs:
                client.call("training.curves", {"id": run, "points": 10})
            client.call("jobs.list")
            client.call("notify.list")

        ours = median_time(lambda: client.call("fleet.summary"), 200)
        baseline = median_time(without, 20)
        print("\nfleet.summary, 8 GPUs, 10 servers, 10 training runs (local agent): %.2f ms a call; "
              "the %d requests it stands for %.1f ms (%.0fx)" % (ours * 1e3, 23, baseline * 1e3, baseline / ours))
        for run in runs:
            client.call("jobs.stop", {"id": run, "grace_s": 1.0})
    finally:
        for server in servers:
            server.close()
        client.close()
        stop_daemon(home)
