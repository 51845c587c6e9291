"""`specdeck advise` on a server with no K sweep of its pair names the sweep to run with what it
knows filled in: the host as the user named it, the server's target and drafter (issue 40, item
9). The server is a real job of the local agent, its engine the stand-in of tests/hostile_engine.py."""

import json
import shlex
import sys

from tests import hostile_engine
from tests.checkpoint_fixtures import write_drafter, write_json
from tests.helpers.cli import run_cli
from tests.helpers.vllm import free_port


def test_advise_without_a_sweep_names_the_sweep_to_run_with_the_host_target_and_drafter(agent_home, tmp_path):
    target = tmp_path / "my target"  # a space: the command is still one to paste
    target.mkdir()
    write_json(target / "config.json", {"architectures": ["LlamaForCausalLM"], "hidden_size": 64, "vocab_size": 256,
                                        "num_hidden_layers": 8, "max_position_embeddings": 8192})
    drafter = write_drafter(tmp_path / "drafter", aux_layer_ids=[1, 3, 5])
    engine = hostile_engine.install(tmp_path / "engine")
    replies = hostile_engine.script(tmp_path / "replies.json", ["{}"])
    started = run_cli("serve", "local", target, "--drafter", drafter, "--k", "3", "--port", free_port(), "--wait",
                      "--python", sys.executable, "--env", "PYTHONPATH=%s" % engine, "--env", "HOSTILE_REPLIES=%s" % replies,
                      timeout=300)
    assert started.returncode == 0, started.stdout + started.stderr
    job = started.stdout.split()[0]  # `j1  http://127.0.0.1:PORT  (waiting for it to answer)`
    try:
        shown = run_cli("advise", "local", job, check=0).stdout
        expected = "run it:  specdeck bench local %s --drafter %s --k 1,2,3,4,5" % (shlex.quote(str(target)), shlex.quote(str(drafter)))
        assert expected in shown.splitlines(), shown
        assert "HOST" not in shown and "TARGET" not in shown and "DRAFTER" not in shown
        printed = json.loads(run_cli("advise", "local", job, "--json", check=0).stdout)
        assert printed["sweep_command"] == expected[len("run it:  "):]
    finally:
        run_cli("stop", "local", job)
