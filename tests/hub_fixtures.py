"""The `hub` pytest fixture: a real fake hub (tests/hubserver.py) on 127.0.0.1, one per test.

The central conftest loads it as a plugin (``pytest_plugins``).
"""

import hashlib

import pytest

from tests.hubserver import DEFAULT_TOKEN, FakeHub


@pytest.fixture
def hub(tmp_path_factory):
    """A started FakeHub: `hub.url`, `hub.add_repo(repo_id, files, repo_type="model", gated=False)`,
    `hub.token` (the bearer token it accepts for gated repos), knobs `drop_connection`, `corrupt`,
    `throttle`, `lfs_redirect`, and records `requests`, `bytes_served`, `range_starts`."""
    server = FakeHub(root=str(tmp_path_factory.mktemp("hub")), token=DEFAULT_TOKEN).start()
    try:
        yield server
    finally:
        server.stop()


def blob(n, seed):
    """n deterministic pseudo-random bytes (incompressible, so no layer can shortcut them)."""
    out = bytearray()
    counter = 0
    while len(out) < n:
        out += hashlib.sha256(b"%d-%d" % (seed, counter)).digest() * 64
        counter += 1
    return bytes(out[:n])
