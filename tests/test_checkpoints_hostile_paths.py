"""Checkpoint paths as a hostile neighbour lays them out, against the real CLI and the real local
agent: a FIFO named model.safetensors, a FIFO shard index, an index naming a FIFO shard (opening
any of them for reading would wait for a writer, for good), a symlink loop, a NUL byte. Each is
one line naming it, at once; the daemon's connection keeps answering after them."""

import os
import sys

import pytest

from remote.core.protocol import RemoteError
from tests.helpers.cli import run_cli

sys.path.insert(0, os.path.dirname(__file__))
import checkpoint_fixtures as fx  # noqa: E402

SHARD = "model-00001-of-00002.safetensors"
# (directory, the file in it that is a FIFO)
FIFOS = [("fifo_file", "model.safetensors"), ("fifo_index", "model.safetensors.index.json"), ("fifo_shard", SHARD)]


@pytest.fixture(scope="module")
def hostile(tmp_path_factory):
    root = tmp_path_factory.mktemp("hostile")
    fx.write_drafter(str(root / "drafter"))
    os.makedirs(str(root / "fifo_file"))
    fx.write_json(root / "fifo_file" / "config.json", {"architectures": ["LlamaForCausalLMEagle3"]})
    os.mkfifo(str(root / "fifo_file" / "model.safetensors"))
    os.makedirs(str(root / "fifo_index"))
    os.mkfifo(str(root / "fifo_index" / "model.safetensors.index.json"))
    fx.write_sharded(str(root / "fifo_shard"), fx.hf_model_tensors())
    os.remove(str(root / "fifo_shard" / SHARD))
    os.mkfifo(str(root / "fifo_shard" / SHARD))
    os.symlink("loop_b", str(root / "loop_a"))
    os.symlink("loop_a", str(root / "loop_b"))
    return root


def lines_with(text, *words):
    return [line for line in text.splitlines() if all(w in line for w in words)]


def one_line(result):
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    return lines[0]


@pytest.mark.parametrize("directory, fifo", FIFOS)
def test_inspect_and_compare_of_a_checkpoint_holding_a_fifo_name_it_and_exit_1(hostile, directory, fifo):
    inspected = run_cli("inspect", hostile / directory)
    assert inspected.returncode == 1, inspected.stderr
    assert len(lines_with(inspected.stdout, "ERROR", "cannot read %s: it is a FIFO, not a regular file" % fifo)) == 1
    compared = run_cli("compare", hostile / directory, hostile / "drafter")
    assert compared.returncode == 1, compared.stderr
    said = compared.stderr + compared.stdout
    assert len(lines_with(said, "cannot read %s: it is a FIFO, not a regular file" % fifo)) == 1


@pytest.mark.parametrize("directory, fifo", FIFOS[:2])
def test_a_fifo_given_as_the_path_is_one_line_and_exit_1(hostile, directory, fifo):
    path = hostile / directory / fifo
    result = run_cli("inspect", path)
    assert result.returncode == 1 and result.stdout == ""
    assert one_line(result) == "specdeck: %s is a FIFO, not a regular file" % path


def test_one_daemon_connection_answers_jobs_list_after_fifo_requests(client, hostile):
    # More requests than a connection has workers: each returns, none holds a thread.
    for _ in range(3):
        with pytest.raises(RemoteError) as refused:
            client.call("checkpoint.inspect", {"path": str(hostile / "fifo_file" / "model.safetensors")})
        assert refused.value.type == "NotACheckpoint" and "is a FIFO, not a regular file" in refused.value.message
    report = client.call("checkpoint.inspect", {"path": str(hostile / "fifo_shard")})
    assert report["files"] == [{"path": str(hostile / "fifo_shard" / "model-00002-of-00002.safetensors"),
                                "bytes": os.path.getsize(str(hostile / "fifo_shard" / "model-00002-of-00002.safetensors"))}]
    assert "cannot read %s: it is a FIFO, not a regular file" % SHARD in [p["message"] for p in report["problems"]]
    with pytest.raises(RemoteError) as compared:
        client.call("checkpoint.compare", {"a": str(hostile / "fifo_index"), "b": str(hostile / "drafter")})
    assert compared.value.type == "NotACheckpoint"
    assert "cannot read model.safetensors.index.json: it is a FIFO" in compared.value.message
    assert isinstance(client.call("jobs.list", {})["jobs"], list)


def test_a_nul_byte_in_a_path_is_a_one_line_bad_request(client):
    for method, params in (("fs.list", {"path": "/tmp/a\0b"}), ("checkpoint.inspect", {"path": "/tmp/model\0.safetensors"}),
                           ("checkpoint.tensors", {"path": "/tmp/model\0.safetensors"}),
                           ("checkpoint.compare", {"a": "/tmp/a\0b", "b": "/tmp/c"})):
        with pytest.raises(RemoteError) as refused:
            client.call(method, params)
        assert refused.value.type == "BadRequest", method
        assert "contains a NUL byte" in refused.value.message and "\n" not in refused.value.message


def test_a_symlink_loop_is_said_to_be_one(client, hostile):
    loop = hostile / "loop_a"
    result = run_cli("inspect", loop)
    assert result.returncode == 1
    assert one_line(result) == "specdeck: %s is a symlink loop: it cannot be resolved" % loop
    for method, params in (("checkpoint.inspect", {"path": str(loop)}), ("fs.list", {"path": str(loop)})):
        with pytest.raises(RemoteError) as refused:
            client.call(method, params)
        assert refused.value.type == "NotFound", method
        assert refused.value.message == "%s is a symlink loop: it cannot be resolved" % loop
