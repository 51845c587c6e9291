"""The files `doctor` and serve's gate read from the target's directory (config.json,
generation_config.json) are read as a checkpoint's are: a FIFO in a config's place, or a 120 MB
config.json, is one line and exit 1 from `specdeck doctor` and `specdeck serve` (nothing started),
and the host's daemon is left as it was: no thread of it waits on the FIFO, and it goes on
answering. A null `k` or `engine_args` in serving.doctor is a BadRequest naming it."""

import os

import pytest

from remote.core.protocol import RemoteError
from tests.checkpoint_fixtures import write_drafter, write_json
from tests.helpers.cli import daemon_pid, run_cli
from tests.helpers.waits import wait_for

BIG_BYTES = 120 * 1000 * 1000


def write_pair(tmp_path):
    target = tmp_path / "target"
    target.mkdir()
    write_json(target / "config.json", {"architectures": ["LlamaForCausalLM"], "hidden_size": 64, "vocab_size": 256,
                                        "num_hidden_layers": 8, "max_position_embeddings": 8192})
    return target, write_drafter(tmp_path / "drafter", aux_layer_ids=[1, 3, 5])


def threads(pid):
    return len(os.listdir("/proc/%d/task" % pid))


def one_line_failure(result):
    lines = result.stderr.strip().splitlines()
    assert result.returncode == 1 and len(lines) == 1, (result.returncode, result.stderr)
    return lines[0]


def test_a_fifo_or_a_huge_config_is_one_line_and_the_daemon_goes_on(agent_home, tmp_path):
    target, drafter = write_pair(tmp_path)
    clean = run_cli("doctor", "local", target, "--drafter", drafter, "--max-model-len", "2048", timeout=60)
    assert clean.returncode == 0 and clean.stdout.startswith("doctor: ok"), clean.stdout + clean.stderr
    pid = daemon_pid(agent_home)
    before = threads(pid)

    # A FIFO where generation_config.json goes: nothing ever writes to it.
    os.mkfifo(target / "generation_config.json")
    line = one_line_failure(run_cli("doctor", "local", target, "--drafter", drafter, timeout=60))
    assert line == "specdeck: the target %s: cannot read generation_config.json: it is a FIFO, not a regular file" % target

    # A FIFO where config.json goes: doctor, and serve (its gate) before starting anything.
    os.unlink(target / "generation_config.json")
    os.rename(target / "config.json", tmp_path / "config.json")
    os.mkfifo(target / "config.json")
    line = one_line_failure(run_cli("doctor", "local", target, "--drafter", drafter, timeout=60))
    assert line == "specdeck: the target %s: cannot read config.json: it is a FIFO, not a regular file" % target
    line = one_line_failure(run_cli("serve", "local", target, "--drafter", drafter, timeout=60))
    assert line == "specdeck: the target %s: cannot read config.json: it is a FIFO, not a regular file" % target
    assert run_cli("jobs", "local", "--json", check=0).stdout.strip() == "[]"  # nothing started

    # A 120 MB config.json: refused by its size, never read.
    os.unlink(target / "config.json")
    with open(target / "config.json", "w") as f:
        f.write('{"hidden_size": 64, "vocab_size": 256, "padding": "')
        block = "x" * (1 << 20)
        while f.tell() < BIG_BYTES:
            f.write(block)
        f.write('"}')
    size = os.path.getsize(target / "config.json")
    for command in ("doctor", "serve"):
        line = one_line_failure(run_cli(command, "local", target, "--drafter", drafter, timeout=60))
        assert line == "specdeck: the target %s: config.json is %s bytes, too large for a model's config file" % (target, "{:,}".format(size))

    # The daemon is the one from before, and no thread of it is left waiting.
    assert daemon_pid(agent_home) == pid
    wait_for(lambda: threads(pid) <= before, message=lambda: "the daemon's threads back to %d (now %d)" % (before, threads(pid)))
    os.replace(tmp_path / "config.json", target / "config.json")
    assert run_cli("doctor", "local", target, "--drafter", drafter, "--max-model-len", "2048", timeout=60).stdout.startswith("doctor: ok")


@pytest.mark.parametrize("name", ["k", "engine_args"])
def test_a_null_k_or_engine_args_is_a_bad_request(client, tmp_path, name):
    target, drafter = write_pair(tmp_path)
    with pytest.raises(RemoteError) as refused:
        client.call("serving.doctor", {"target": str(target), "drafter": drafter, name: None}, timeout=60)
    assert (refused.value.type, refused.value.message) == ("BadRequest", "parameter %r is null: give a value or leave it out" % name)
    assert client.call("serving.doctor", {"target": str(target), "drafter": drafter, "max_model_len": 2048}, timeout=60)["status"] == "ok"
