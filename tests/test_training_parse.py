"""Training records from real logs: speculators' rich-wrapped output at 80 and 200 columns (a real
CPU run, tests/data), the same records printed by rich's own handler at other widths, SpecForge's
lines as its training script prints them, generic JSON and key=value lines; lines that are not
records are left alone; the accept length a record predicts."""

import io
import logging
import math
import re
from pathlib import Path

import pytest
from rich.console import Console
from rich.logging import RichHandler

from remote.training import curves, logparse

DATA = Path(__file__).parent / "data"


def real(width):
    return (DATA / ("speculators-train-%dcols.log" % width)).read_text()


def steps_in_log(text):
    """global_step values as the log prints them (the last pair of each step record)."""
    return [int(n) for n in re.findall(r"global_step=(\d+)", text)]


@pytest.mark.parametrize("width", [80, 200])
def test_real_speculators_log_gives_every_step_and_validation(width):
    text = real(width)
    records = logparse.parse_text(text)
    steps = [r for r in records if r["kind"] == "step"]
    validation = [r for r in records if r["kind"] == "validation"]
    assert [r["step"] for r in steps] == steps_in_log(text) == list(range(22))
    assert [r["epoch"] for r in validation] == [0, 1]
    # Every per-position series is whole: three drafted positions, each in loss, full and cond acc.
    assert all(len(r["full_acc"]) == len(r["cond_acc"]) == len(r["loss_k"]) == 3 for r in steps)
    assert all(r["step_ms"] > 100 and r["tokens_per_s"] > 1 and r["lr"] > 0 for r in steps)
    assert all(r["time"] is not None for r in records)  # rich's time column, carried to records in the same second


def test_both_widths_read_the_same_numbers():
    narrow = logparse.parse_text(real(80))
    wide = logparse.parse_text(real(200))
    assert len(narrow) == len(wide) == 24
    for a, b in zip(narrow, wide):
        assert a["kind"] == b["kind"] and a["step"] == b["step"] and a["epoch"] == b["epoch"]
        assert set(a["values"]) == set(b["values"])  # no key lost or split at a wrap


def test_numbers_as_printed_including_exponents():
    step1 = logparse.parse_text(real(80))[1]
    # From the log: train/full_acc_0=0.043, train/cond_acc_1=0.250, profile/step_ms=2.23e+03, lr/Muon=9.55e-04
    assert step1["full_acc"][0] == 0.043 and step1["cond_acc"][1] == 0.25
    assert step1["step_ms"] == 2230.0 and step1["lr"] == pytest.approx(9.55e-04)
    assert step1["values"]["train/full_acc_2"] == 0.0  # printed as 0.00e+00
    assert curves.predicted_accept_length(step1) == pytest.approx(1 + 0.043 + 0.011 + 0.0)


def test_lines_that_are_not_records_are_left_alone():
    text = real(80)
    records = logparse.parse_text(text)
    # The configuration dump (dozens of key=value pairs, no loss) and the checkpoint_best line
    # (`loss_epoch=0.072290`) are not training records; neither are progress bars.
    assert "trainer/epochs=2" in text.replace("\n", " ") or "trainer/epochs=2," in text
    assert not any("trainer/epochs" in r["values"] for r in records)
    assert not any("loss_epoch" in r["values"] for r in records)
    for line in ["Epoch 1 100% ━━━━━━━━━ 11/11  [ 0:00:14 < 0:00:00 , 1 it/s ]", "Saving checkpoint to /srv/x/1",
                 "step 3 done", "lr=0.1", "x=1 y=2", "{\"event\": \"start\", \"seed\": 3}", ""]:
        assert logparse.parse_text(line) == [], line


def render(records_text, width):
    """The messages printed through rich's logging handler at `width`, as speculators sets it up."""
    out = io.StringIO()
    console = Console(file=out, width=width, force_terminal=False, color_system=None)
    handler = RichHandler(console=console)
    handler.setFormatter(logging.Formatter("%(message)s", datefmt="[%X]"))
    logger = logging.Logger("metrics")
    logger.addHandler(handler)
    for message in records_text:
        logger.info(message)
    return out.getvalue()


def speculators_number(key, value):
    """A value as speculators' FormatDictFilter prints it: integers (epoch, global_step) as they
    are, floats with 3 decimals or in scientific notation outside [0.001, 999]."""
    if key in ("epoch", "global_step"):
        return "%d" % value
    return "%.2e" % value if abs(value) < 0.001 or abs(value) > 999 else "%.3f" % value


@pytest.mark.parametrize("width", [60, 72, 100, 137, 250])
def test_the_same_records_at_any_width(width):
    original = logparse.parse_text(real(200))
    messages = [", ".join("%s=%s" % (k, speculators_number(k, v)) for k, v in r["values"].items()) for r in original]
    records = logparse.parse_text(render(messages, width))
    assert len(records) == len(original)
    for got, want in zip(records, original):
        assert got["kind"] == want["kind"]
        assert set(got["values"]) == set(want["values"])
        for key, value in want["values"].items():
            assert got["values"][key] == pytest.approx(value, rel=5e-3, abs=5e-6), key


def test_a_folded_token_is_joined_without_a_space():
    # A key longer than the message column: rich folds it mid-token.
    long_key = "train/" + "x" * 70 + "_acc"
    text = render(["%s=0.5, train/loss=1.250, global_step=4" % long_key], 80)
    assert any(len(line.rstrip()) > 0 and not line.startswith(" " * 20) for line in text.splitlines())
    record = logparse.parse_text(text)[0]
    assert record["values"][long_key] == 0.5 and record["loss"] == 1.25 and record["step"] == 4


def test_nan_loss_is_a_record_and_predicts_nothing():
    record = logparse.parse_text(render(["train/loss_0=nan, train/full_acc_0=0.500, train/loss=nan, global_step=9"], 80))[0]
    assert math.isnan(record["loss"]) and record["step"] == 9
    points = curves.history_points("j1", record, 1000.0)
    assert ("training", "loss_nan", {"job": "j1"}, 1.0, 1000.0) in points
    assert not any(p[1] == "loss" for p in points)  # the store keeps finite values only


SPECFORGE = """\
Training Epoch 0: 100%|██████████| 50/50 [00:12<00:00,  4.01it/s]
Train Epoch [1/3], position 0,  Acc: 0.62
Train Epoch [1/3], position 1,  Acc: 0.48
Train Epoch [1/3], position 2,  Acc: 0.35
Train Epoch [1/3], position 0, pLoss: 1.93
Train Epoch [1/3], position 1, pLoss: 2.41
Train Epoch [1/3], position 2, pLoss: 2.87
Evaluating Epoch 0: 100%|██████████| 5/5 [00:01<00:00,  4.20it/s]
Eval Epoch [1/3], position 0,  Acc: 0.60
Eval Epoch [1/3], position 1,  Acc: 0.45
Eval Epoch [1/3], position 2,  Acc: 0.30
Eval Epoch [1/3], position 0, pLoss: 2.01
Eval Epoch [1/3], position 1, pLoss: 2.50
Eval Epoch [1/3], position 2, pLoss: 2.95
"""


def test_specforge_epoch_lines_from_its_training_script():
    train, evaluation = logparse.parse_text(SPECFORGE)
    assert train["kind"] == "step" and train["source"] == "specforge" and train["epoch"] == 0 and train["epochs_total"] == 3
    assert train["acc"] == [0.62, 0.48, 0.35] and train["loss_k"] == [1.93, 2.41, 2.87]
    # SpecForge's acc_i is each position's accuracy after the ones before: the chain is their product.
    assert curves.predicted_accept_length(train) == pytest.approx(1 + 0.62 + 0.62 * 0.48 + 0.62 * 0.48 * 0.35)
    assert evaluation["kind"] == "validation" and evaluation["acc"] == [0.60, 0.45, 0.30]


def test_generic_json_and_key_value_lines():
    text = "\n".join([
        '{"step": 10, "loss": 2.5, "full_acc_0": 0.7, "full_acc_1": 0.4}',
        "[drafter] step=11 loss=2.4000 acc_0=0.5 acc_1=0.5",
        "train/ploss_0=1.5, train/acc_0=0.8, train/lr=1e-4, step=12",
        "epoch 3 finished in 12 s",
    ])
    a, b, c = logparse.parse_text(text)
    assert (a["step"], a["loss"], a["full_acc"]) == (10, 2.5, [0.7, 0.4])
    assert curves.predicted_accept_length(a) == pytest.approx(2.1)
    assert (b["step"], b["loss"], b["acc"]) == (11, 2.4, [0.5, 0.5])
    assert curves.predicted_accept_length(b) == pytest.approx(1.75)
    assert (c["step"], c["acc"], c["loss_k"], c["lr"]) == (12, [0.8], [1.5], 1e-4)


def test_a_record_cut_by_the_end_of_what_was_written_waits_for_its_next_lines():
    lines = real(80).splitlines()
    first = next(i for i, line in enumerate(lines) if "trainer.py:587" in line)
    assembler = logparse.Assembler()
    for line in lines[: first + 5]:
        assembler.feed(line)
    assert assembler.take() == [] and assembler.pending()
    for line in lines[first + 5: first + 40]:
        assembler.feed(line)
    records = assembler.take()
    assert records and records[0]["step"] == 0 and len(records[0]["full_acc"]) == 3
