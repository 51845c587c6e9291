"""The real vLLM on the CPU as the serving tests use it: a free port for a server, the tiny
target and drafters (tests/serving_fixtures.py builds them once), and a GPU host reached over
the real sshd whose agent runs the servers."""

import os
import socket
from tests.helpers.cli import use_home

import pytest

from tests import serving_fixtures
from tui.transport.connection import open_client


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def models():
    python = serving_fixtures.require_vllm()
    return serving_fixtures.models(os.path.dirname(serving_fixtures.VLLM_VENV), python)


@pytest.fixture(scope="module")
def gpuhost(sshd, tmp_path_factory):
    """(laptop HOME, a client of the agent on the host over ssh) for the whole module."""
    home = sshd.client_home(tmp_path_factory.mktemp("laptop"))
    with pytest.MonkeyPatch.context() as patch:
        use_home(patch, home)
        patch.delenv("SSH_AUTH_SOCK", raising=False)
        client = open_client("gpuhost")
        try:
            yield home, client
        finally:
            client.close()
