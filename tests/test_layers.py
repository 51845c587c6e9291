"""The split between the two sides holds: the host side needs nothing beyond the standard
library, and never imports the console's libraries; a daemon does not outlive its home."""

import json
import os
import shutil
import subprocess
import sys

import pytest

from tests.conftest import REPO_ROOT, daemon_pid, python39
from tests.sshd_fixtures import wait_for
from tui.connection import open_client

# Every module of the host side: what ships in the agent's zipapp.
HOST_CORE = ["remote"] + sorted("remote." + p.stem for p in (REPO_ROOT / "remote").glob("*.py") if p.stem not in ("__init__", "__main__"))
FORBIDDEN = ["textual", "paramiko", "rich", "huggingface_hub", "safetensors", "numpy", "torch", "tui", "httpx", "requests"]


def test_host_side_imports_only_the_standard_library():
    # Only what importing the host side adds counts: site hooks of this interpreter load a few
    # modules of their own before any code runs.
    code = (
        "import importlib, json, sys\n"
        "before = set(sys.modules)\n"
        "for name in %r: importlib.import_module(name)\n"
        "print(json.dumps(sorted(set(m.split('.')[0] for m in sys.modules if m not in before))))\n" % HOST_CORE
    )
    out = subprocess.run([sys.executable, "-I", "-c", "import sys; sys.path.insert(0, %r)\n" % str(REPO_ROOT) + code],
                         capture_output=True, text=True, check=True)
    loaded = set(json.loads(out.stdout))
    assert not loaded & set(FORBIDDEN), loaded & set(FORBIDDEN)
    stdlib = set(sys.stdlib_module_names) | {"remote", "__main__"}
    assert loaded <= stdlib, loaded - stdlib


def test_daemon_stops_when_its_home_is_removed(tmp_path, monkeypatch):
    home = tmp_path / "home"
    monkeypatch.setenv("SPECDECK_HOME", str(home))
    open_client("local").close()
    pid = daemon_pid(home)
    assert pid
    shutil.rmtree(home)
    wait_for(lambda: not os.path.exists("/proc/%d" % pid) or open("/proc/%d/stat" % pid).read().split()[2] == "Z", 30)


@pytest.mark.skipif(python39() is None, reason="no Python 3.9 on this machine")
def test_agent_and_jobs_run_on_python_3_9(agent_home):
    client = open_client("local", python=python39())
    assert client.hello["capabilities"]["python"]["version"].startswith("3.9.")
    job = client.call("jobs.submit", {"argv": ["bash", "-c", "echo on 3.9; exit 4"]})
    done = wait_for(lambda: (lambda j: j["exit_code"] is not None and j)(client.call("jobs.get", {"id": job["id"]})), 30)
    assert done["exit_code"] == 4 and client.call("jobs.tail", {"id": job["id"]})["text"] == "on 3.9\n"
    client.close()
