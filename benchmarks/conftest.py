"""Benchmarks that need real parts (an sshd, a network namespace) run under pytest to reuse
the test suite's fixtures: `python -m pytest benchmarks/bench_spine.py -q -s`."""

import pytest

from tests.helpers.cli import laptop_for

pytest_plugins = ["tests.sshd_fixtures"]


@pytest.fixture
def laptop(sshd, tmp_path, monkeypatch):
    """A laptop-side HOME that knows the loopback sshd as `gpuhost`."""
    return laptop_for(sshd, tmp_path, monkeypatch)
