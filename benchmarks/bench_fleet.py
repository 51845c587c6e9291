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

from tests.conftest import run_cli
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
