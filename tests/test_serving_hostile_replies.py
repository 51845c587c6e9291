"""Per-request speculation metrics are checked where the benchmark reads them: a reply whose
histogram holds Infinity, a count given as a string, an object where a number goes, negative
counts, a histogram of 100,000 buckets, a 5,000,000-bucket reply (10 MB, with and without a
Content-Length) and a reply that is not JSON are each refused, counted and named in `specdeck
bench`'s result, and the run goes on: the good replies around them still give the figures.

The engine is a real HTTP server on loopback (tests/hostile_engine.py, started by the real
benchmark job as it starts vLLM), reached through `specdeck bench local`."""

import json
import socket
import sys

from tests import hostile_engine
from tests.checkpoint_fixtures import write_drafter, write_json
from tests.helpers.cli import run_cli

K = 3


def metrics(**decoding):
    good = {"mean_acceptance_length": 4.0, "acceptance_histogram": [0, 0, 0, 4], "num_spec_tokens": K, "num_spec_steps": 4,
            "num_draft_tokens": 12, "num_accepted_draft_tokens": 12, "draft_acceptance_rate": 1.0}
    good.update(decoding)
    return good


def reply(decoding=None, text=None):
    """A completion reply's raw body; `text` replaces the histogram's JSON text (for what JSON cannot hold)."""
    body = json.dumps({"id": "cmpl-1", "object": "text_completion", "choices": [{"index": 0, "text": " ok ok"}],
                       "usage": {"prompt_tokens": 7, "completion_tokens": 8, "total_tokens": 15},
                       "metrics": {"speculative_decoding": decoding if decoding is not None else metrics()}})
    return body.replace('"acceptance_histogram": [0, 0, 0, 4]', '"acceptance_histogram": %s' % text) if text else body


HUGE = "[%s]" % ", ".join(["0"] * 5_000_000)
HOSTILE = [
    ("the histogram holds Infinity", reply(text="[0, 0, Infinity, 4]"),
     "speculative_decoding.acceptance_histogram[2] is inf, not a count"),
    ("a count given as a string", reply(metrics(acceptance_histogram=[0, "2", 0, 4])),
     "speculative_decoding.acceptance_histogram[1] is a string, not a count"),
    ("an object where a number goes", reply(metrics(mean_acceptance_length={"value": 4})),
     "speculative_decoding.mean_acceptance_length is an object, not a number"),
    ("negative counts", reply(metrics(acceptance_histogram=[-5, 0, 0, 4])),
     "speculative_decoding.acceptance_histogram[0] is negative (-5)"),
    ("100,000 buckets", reply(metrics(acceptance_histogram=[0] * 100_000)),
     "speculative_decoding.acceptance_histogram has 100000 entries, more than the 4 it can have"),
    ("5,000,000 buckets", reply(text=HUGE), None),
    ("5,000,000 buckets, no length said", (reply(text=HUGE), False),
     "the reply is over the 4 MiB a completion's can be: not read further"),
    ("not JSON", "<html><body>502 Bad Gateway</body></html>", None),
]


def free_port():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def test_hostile_replies_are_counted_and_named_and_the_run_goes_on(agent_home, tmp_path):
    target = tmp_path / "target"
    target.mkdir()
    write_json(target / "config.json", {"architectures": ["LlamaForCausalLM"], "hidden_size": 64, "vocab_size": 256,
                                        "num_hidden_layers": 8, "max_position_embeddings": 8192})
    drafter = write_drafter(tmp_path / "drafter", aux_layer_ids=[1, 3, 5])
    engine = hostile_engine.install(tmp_path / "engine")
    # The warm-up's reply, one good reply, the hostile ones, then good ones again.
    replies = hostile_engine.script(tmp_path / "replies.json", [reply(), reply()] + [body for _, body, _ in HOSTILE] + [reply()])
    prompts = tmp_path / "prompts.jsonl"
    prompts.write_text("".join(json.dumps({"prompt": "prompt %d: %s" % (number, what), "category": "hostile" if number else "good"}) + "\n"
                               for number, (what, _, _) in enumerate([("good", None, None)] + HOSTILE)) +
                       json.dumps({"prompt": "prompt 9: good again", "category": "good"}) + "\n")
    result = run_cli("bench", "local", target, "--drafter", drafter, "--k", str(K), "--requests", str(len(HOSTILE) + 2),
                     "--max-tokens", "8", "--prompts", prompts, "--port", free_port(), "--python", sys.executable,
                     "--env", "PYTHONPATH=%s" % engine, "--env", "HOSTILE_REPLIES=%s" % replies, "--json", timeout=300)
    assert result.returncode == 0, result.stdout + result.stderr
    reply_seen = json.loads(result.stdout)

    refused = reply_seen["bad_replies"]
    assert refused["count"] == len(HOSTILE)
    assert [(row["phase"], row["request"], row["category"]) for row in refused["shown"]] == \
        [("K=%d" % K, number, "hostile") for number in range(2, len(HOSTILE) + 2)]
    for row, (what, _, why) in zip(refused["shown"], HOSTILE):
        assert row["first_words"].startswith("prompt %d:" % (row["request"] - 1))
        if why:
            assert row["why"] == why, what
    by_request = {row["request"]: row["why"] for row in refused["shown"]}
    assert by_request[7].startswith("the reply is ") and by_request[7].endswith(" bytes, over the 4 MiB a completion's can be: not read")
    assert by_request[9].startswith("the reply is not JSON")

    # The run went on: the good replies' own figures, nothing of the refused ones in them.
    groups = {group["category"]: group for group in reply_seen["categories"]}
    assert groups["good"]["accept_length"] == K + 1 and groups["good"]["histogram"] == [0, 0, 0, 8]
    assert groups["hostile"]["accept_length"] is None and groups["hostile"]["histogram"] == [0, 0, 0, 0]
    assert reply_seen["missing"] == 0 and reply_seen["spec_tps"] > 0 and reply_seen["baseline_tps"] > 0

    # As `bench` prints it: the count, and each refused reply by its request and first words.
    shown = run_cli("bench", "local", target, "--drafter", drafter, "--k", str(K), "--requests", str(len(HOSTILE) + 2),
                    "--max-tokens", "8", "--prompts", prompts, "--port", free_port(), "--python", sys.executable,
                    "--env", "PYTHONPATH=%s" % engine, "--env", "HOSTILE_REPLIES=%s" % replies, timeout=300)
    assert shown.returncode == 0, shown.stdout + shown.stderr
    lines = shown.stdout.splitlines()
    at = lines.index("refused       %d replies the benchmark could not use (left out of its figures):" % len(HOSTILE))
    assert lines[at + 1] == "  K=3 request 2 [hostile] prompt 1: the histogram holds Infinity: %s" % HOSTILE[0][2]
    assert lines[at + 4] == "  K=3 request 5 [hostile] prompt 4: negative counts: %s" % HOSTILE[3][2]
