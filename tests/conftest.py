"""Fixtures shared by the whole suite: real sshd servers, a network namespace host, a fake
hub over real HTTP, and a private agent state directory per test."""

import shutil
import tempfile
from pathlib import Path

import pytest

from tests.helpers.cli import laptop_for, stop_daemon
from tests.helpers.keepers import end_keepers, short_runtime_dir

pytest_plugins = [
    "tests.fleet_fixtures", "tests.hostile_servers", "tests.hub_fixtures", "tests.notify_receiver", "tests.slurm_fixtures", "tests.sshd_fixtures",
    "tests.helpers.coverage", "tests.helpers.metrics", "tests.helpers.training", "tests.helpers.vllm",
]


@pytest.fixture(autouse=True)
def private_laptop_config(tmp_path, monkeypatch):
    """Every test gets its own laptop config directory: a form's "remember" or `specdeck config`
    in a test never writes the real ~/.config/specdeck. A test that names its own sets it after."""
    path = tmp_path / "laptop-config"
    monkeypatch.setenv("XDG_CONFIG_HOME", str(path))
    return path


@pytest.fixture(autouse=True)
def private_runtime_dir(monkeypatch):
    """Every test gets its own XDG_RUNTIME_DIR, so the link keeper its headless commands start
    (tui/transport/keeper.py) is its own, and ended after it: no keeper of one test serves another."""
    path = short_runtime_dir()
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(path))
    yield path
    end_keepers(path)
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
def agent_home(tmp_path, monkeypatch):
    """SPECDECK_HOME for agents started on this machine (`local`); their daemon is stopped after."""
    # Short, whatever the depth of tmp_path (deeper under xdist): the daemon's socket stays inside
    # it (a deep state directory puts it in TMPDIR), where the tests look for it. Private from the
    # start: the agent never chmods a SPECDECK_HOME it did not create.
    home = Path(tempfile.mkdtemp(prefix="sd-home-"))
    monkeypatch.setenv("SPECDECK_HOME", str(home))
    yield home
    stop_daemon(home)
    shutil.rmtree(home, ignore_errors=True)


@pytest.fixture
def client(agent_home):
    """A client of the agent on this machine (`local`), under the test's own agent home."""
    from tui.transport.connection import open_client

    client = open_client("local")
    yield client
    client.close()


@pytest.fixture
def laptop(sshd, tmp_path, monkeypatch):
    """A laptop-side HOME that knows the loopback sshd as `gpuhost`."""
    return laptop_for(sshd, tmp_path, monkeypatch)


# --------------------------------------------------------------------------- running in parallel

# `.ci/run` spreads the suite over the machine's cores (pytest-xdist, `--dist loadgroup`). A
# module's tests stay on one worker, so a module-scoped server starts once; the Slurm modules
# share one worker, so one test cluster serves them all. The modules that take longest (real
# vLLM servers and sweeps, the Slurm cluster, real training) are handed out first, so that no
# long module starts last and runs on alone.
LONGEST_FIRST = (
    "test_serving_advisor", "slurm", "test_serving_console", "test_training_measure", "test_training_hostile",
    "test_serving_bench", "test_serving_vllm", "test_core_local_host", "test_training_console", "test_telemetry_history",
    "test_training_run",
)


def _group(item):
    module = item.module.__name__.rsplit(".", 1)[-1]
    return "slurm" if module.startswith("test_slurm_") else module


@pytest.hookimpl(tryfirst=True)  # before xdist's own hook reads the groups
def pytest_collection_modifyitems(config, items):
    rank = {name: index for index, name in enumerate(LONGEST_FIRST)}
    for item in items:
        item.add_marker(pytest.mark.xdist_group(_group(item)))
    items.sort(key=lambda item: rank.get(_group(item), len(rank)))  # stable: the rest keep their order
