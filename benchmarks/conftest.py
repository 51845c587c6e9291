"""Benchmarks that need real parts (an sshd, a network namespace) run under pytest to reuse
the test suite's fixtures: `python -m pytest benchmarks/bench_spine.py -q -s`."""

from tests.conftest import laptop  # noqa: F401
from tests.sshd_fixtures import *  # noqa: F401,F403
