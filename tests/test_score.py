"""`specdeck score` for real: the local agent starts the score job under the speculators venv's
python (torch, pyarrow), which scores tests/serving_fixtures.py's drafters on hidden states of
its tiny target that vLLM on the CPU captured with the final layer
(tests/data/score-tiny, made by benchmarks/record_score_data.sh). The agreeing drafter gives
exactly K+1 on data free of spoilers, the random one 1.00, the spoiler mix the value its rows
give; what cannot be scored is refused in one line before a job starts; bad samples are named
and skipped; a directory of 100,000 samples is listed and scored with progress and bounded memory."""

import json
import os
import shutil
import struct
from pathlib import Path

import pytest

from tests import serving_fixtures
from tests.helpers.cli import run_cli
from tests.helpers.training import speculators_python  # noqa: F401  (a fixture)

pytestmark = pytest.mark.timeout(900)
DATA = Path(__file__).resolve().parent / "data" / "score-tiny"
K = 3
ANSWER = 24  # the recorded rows end in the target's 24-token answer (the loss mask's part)


@pytest.fixture(scope="module")
def made(tmp_path_factory, speculators_python):
    """Copies of the tiny target and drafters (the profile is written beside a drafter), a
    laptop HOME whose `local` host runs the agent here, and the ML interpreter."""
    python = speculators_python
    models = serving_fixtures.models(os.path.dirname(serving_fixtures.VLLM_VENV), serving_fixtures.require_vllm())
    root = tmp_path_factory.mktemp("score")
    for key, name in (("target", "target"), ("drafter_agree", "agree"), ("drafter_random", "random")):
        shutil.copytree(models[key], str(root / name))
    home = root / "home"
    home.mkdir()
    yield {"root": root, "home": home, "python": python}
    run_cli("daemon", "local", "--stop", home=home, timeout=60)


def score(made, drafter, data=DATA, *options, check=0):
    reply = run_cli("score", "local", str(made["root"] / drafter), "--target", str(made["root"] / "target"), "--data", str(data),
                    "--k", K, "--python", made["python"], "--wait", "--json", *options, home=made["home"], timeout=600, check=check)
    return json.loads(reply.stdout) if check == 0 else reply


def rows(data=DATA):
    """[(token ids, loss mask)] of the recorded samples, read here from their files."""
    from remote.scoring import tensors

    found = []
    for index in range(8):
        spans = tensors.header_spans(str(data / "hidden_states" / ("hs_%d.safetensors" % index)))
        raw = bytes(tensors.read_span(spans["token_ids"]))
        tokens = list(struct.unpack("<%dq" % (len(raw) // 8), raw))
        found.append((tokens, [0] * (len(tokens) - ANSWER) + [1] * ANSWER))
    return found


def even_rows(tmp_path):
    """The data with only its rows free of spoilers (the even ones), as speculators lays it out."""
    data = tmp_path / "even"
    shutil.copytree(str(DATA), str(data))
    for index in (1, 3, 5, 7):
        (data / "hidden_states" / ("hs_%d.safetensors" % index)).unlink()
    return data


def test_the_agreeing_drafter_scores_exactly_k_plus_1_and_the_random_one_1(made, tmp_path):
    data = even_rows(tmp_path)
    agree = score(made, "agree", data, "--split", "all")
    assert agree["predicted_accept_length"] == K + 1
    assert agree["unconditional_shares"] == [1.0] * K and agree["conditional_rates"] == [1.0] * K
    assert [row["accept_length"] for row in agree["predicted_accept_length_per_k"]] == [2.0, 3.0, 4.0]
    expected_chains = sum(sum(1 for a in range(len(t) - K) if m[a + 1]) for t, m in rows()[0::2])
    assert agree["chains"] == expected_chains and agree["accept_length_histogram"] == {"1": 0, "2": 0, "3": 0, "4": expected_chains}
    assert agree["samples_scored"] == 4 and agree["off_path_tokens"] == 0  # the answers are the target's own choices
    random = score(made, "random", data, "--split", "all")
    assert random["predicted_accept_length"] == 1.0 and random["accept_length_histogram"]["1"] == expected_chains


def test_the_spoiler_mix_scores_its_known_value_and_writes_the_profile(made):
    result = score(made, "agree", DATA, "--split", "all")
    chains = spoiled = 0
    for tokens, mask in rows():
        for a in range(len(tokens) - K):
            if mask[a + 1]:
                chains += 1
                spoiled += tokens[a] in serving_fixtures.SPOILER_TOKENS  # its first draft is the spoiler's
    assert spoiled == 4
    assert result["chains"] == chains
    assert result["predicted_accept_length"] == pytest.approx(((chains - spoiled) * (K + 1) + spoiled) / float(chains), abs=1e-12)
    assert result["accept_length_histogram"] == {"1": spoiled, "2": 0, "3": 0, "4": chains - spoiled}
    assert any("training and validation rows" in note for note in result["notes"])  # --split all: told
    profile = json.loads((made["root"] / "agree" / "speculation_profile.json").read_text())
    assert profile["method"] == "eagle3" and profile["num_speculative_tokens"] == K
    assert profile["marginal_accept_rates"] == [round(x, 6) for x in result["unconditional_shares"]]
    assert profile["conditional_accept_rates"] == [round(x, 6) for x in result["conditional_rates"]]
    assert profile["mean_accept_length"] == round(result["predicted_accept_length"], 6)
    assert profile["acceptance_length_histogram"] == result["accept_length_histogram"]
    conditions = profile["measurement_conditions"]
    assert conditions["held_out"] is False and conditions["aux_hidden_state_layer_ids"] == [1, 2, 3]
    assert conditions["num_samples"] == 8 and conditions["target_model"] == str(made["root"] / "target")


def test_held_out_rows_by_default_and_two_drafters_side_by_side(made):
    result = score(made, "agree", DATA, "--vs", str(made["root"] / "random"))
    assert result["split"] == "val" and result["samples_scored"] == 1  # speculators' last 10%: row 7 of 8
    first, second = result["drafters"]
    assert first["chains"] == second["chains"] == result["chains"]
    assert first["accept_length_histogram"]["1"] == 1 and second["predicted_accept_length"] == 1.0
    text = run_cli("score", "local", str(made["root"] / "agree"), "--target", str(made["root"] / "target"), "--data", str(DATA),
                   "--k", K, "--python", made["python"], "--wait", "--vs", str(made["root"] / "random"), home=made["home"],
                   timeout=600, check=0).stdout
    header = text.splitlines()[2]  # after the job id and the headline
    assert "agree" in header and "random" in header
    assert "    1  %.3f" % first["unconditional_shares"][0] in text


def _write_safetensors(path, tensors_):
    """A safetensors file of (name, dtype, shape, bytes), written here."""
    header, offset, blobs = {}, 0, []
    for name, dtype, shape, raw in tensors_:
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [offset, offset + len(raw)]}
        offset += len(raw)
        blobs.append(raw)
    text = json.dumps(header).encode()
    path.write_bytes(struct.pack("<Q", len(text)) + text + b"".join(blobs))


def test_data_without_the_final_layer_is_refused_saying_how_to_capture_it(made, tmp_path):
    from remote.scoring import tensors

    data = tmp_path / "aux-only"
    shutil.copytree(str(DATA), str(data))
    for hs in (data / "hidden_states").iterdir():
        spans = tensors.header_spans(str(hs))
        tokens = bytes(tensors.read_span(spans["token_ids"]))
        states = bytes(tensors.read_span(spans["hidden_states"]))
        seq, layers, hidden = spans["hidden_states"].shape
        row = layers * hidden * 4
        aux = b"".join(states[i * row:i * row + 3 * hidden * 4] for i in range(seq))
        _write_safetensors(hs, [("hidden_states", "F32", [seq, 3, hidden], aux), ("token_ids", "I64", [seq], tokens)])
    reply = score(made, "agree", data, check=2)
    error = json.loads(reply.stderr)["error"]
    assert error["type"] == "BadRequest" and "\n" not in error["message"]
    assert "--include-last-layer" in error["message"] and "layer id 4" in error["message"]
    jobs = json.loads(run_cli("jobs", "local", "--json", home=made["home"], check=0).stdout)
    assert not any(job["kind"] == "score" and str(data) in json.dumps(job.get("meta")) for job in jobs)  # nothing started


def test_a_d2t_outside_the_target_vocabulary_and_a_fifo_shard_are_refused(made, tmp_path):
    from remote.scoring import tensors

    bad = tmp_path / "bad-d2t"
    shutil.copytree(str(made["root"] / "agree"), str(bad))
    span = tensors.header_spans(str(bad / "model.safetensors"))["d2t"]
    with open(str(bad / "model.safetensors"), "r+b") as f:
        f.seek(span.start + 8 * 5)
        f.write(struct.pack("<q", 10 ** 6))  # draft id 5 -> target id 1,000,005
    reply = run_cli("score", "local", str(bad), "--target", str(made["root"] / "target"), "--data", str(DATA), "--python",
                    made["python"], "--wait", home=made["home"], timeout=120, check=2)
    assert "d2t maps 1 draft ids outside the target's vocabulary of 512 (draft id 5 -> target id 1000005)" in reply.stderr
    fifo_target = tmp_path / "fifo-target"
    shutil.copytree(str(made["root"] / "target"), str(fifo_target))
    (fifo_target / "model.safetensors").unlink()
    os.mkfifo(str(fifo_target / "model.safetensors"))
    reply = run_cli("score", "local", str(made["root"] / "agree"), "--target", str(fifo_target), "--data", str(DATA), "--python",
                    made["python"], "--wait", home=made["home"], timeout=120, check=2)
    assert "FIFO" in reply.stderr and reply.stderr.count("\n") == 1


def test_a_truncated_sample_and_one_of_nan_states_are_named_and_skipped(made, tmp_path):
    from remote.scoring import tensors

    data = even_rows(tmp_path)
    truncated = data / "hidden_states" / "hs_2.safetensors"
    truncated.write_bytes(truncated.read_bytes()[:-1000])
    nan = data / "hidden_states" / "hs_4.safetensors"
    span = tensors.header_spans(str(nan))["hidden_states"]
    with open(str(nan), "r+b") as f:
        f.seek(span.start + 4 * 300)
        f.write(struct.pack("<f", float("nan")))
    result = score(made, "agree", data, "--split", "all")
    assert result["samples_scored"] == 2 and result["samples_skipped"] == 2
    assert result["predicted_accept_length"] == K + 1  # the good samples' figure, untouched
    note = next(n for n in result["notes"] if "samples skipped" in n)
    assert "hs_2.safetensors: file is shorter than its header says" in note and "1,000 bytes missing" in note
    assert "hs_4.safetensors: its hidden states hold NaN" in note


def test_a_directory_of_100000_samples_is_listed_scored_with_progress_and_bounded_memory(made, tmp_path):
    small = even_rows(tmp_path)
    big = tmp_path / "big" / "hidden_states"
    big.mkdir(parents=True)
    for index in range(100000):  # hard links: 100,000 samples on disk for the price of two
        if index % 50000 == 0:  # a file takes at most 65,000 links on ext4
            source = str(tmp_path / ("sample-%d" % index))
            shutil.copyfile(str(small / "hidden_states" / "hs_0.safetensors"), source)
        os.link(source, str(big / ("hs_%d.safetensors" % index)))
    few = score(made, "agree", small, "--split", "all", "--samples", "200")
    many = score(made, "agree", big.parent, "--samples", "200")
    assert many["samples_found"] == 100000 and many["samples_scored"] == 200
    # No data set beside them: no loss mask, every position of hs_0 scored, its prompt too (said).
    tokens = rows()[0][0]
    assert many["chains"] == 200 * (len(tokens) - K)
    assert any("split is not known" in note for note in many["notes"])
    assert any("lower bound" in note for note in many["notes"]) and many["drafters"][0]["bound"] == "lower"
    # Listing 100,000 samples costs their names, not their contents: within 64 MiB of scoring four.
    assert many["peak_rss_bytes"] - few["peak_rss_bytes"] < 64 * 1024 * 1024
