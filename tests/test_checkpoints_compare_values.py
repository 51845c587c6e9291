"""compare of two drafters of one shape: weights that differ read "values differ" (counted in
the summary), a copy reads "same", and rows whose values were not compared (two machines, a
spent read budget) say "same shape and dtype", never a bare "same"."""

import json
import shutil

from remote.checkpoints import comparison, listing, tensor_values
from tests.checkpoint_fixtures import write_drafter
from tests.helpers.cli import run_cli

WEIGHTS = 13  # a drafter's tensors beside d2t and t2d, which follow the vocabulary, not the weights


def statuses(result):
    return {row["name"]: row["status"] for row in result["rows"]}


def test_compare_tells_other_weights_from_a_copy(tmp_path):
    mine = write_drafter(tmp_path / "mine")
    other = write_drafter(tmp_path / "other", values=1)  # fine-tuned apart: same shapes, other weights
    copy = str(tmp_path / "copy")
    shutil.copytree(mine, copy)
    result = json.loads(run_cli("compare", mine, other, "--json", check=0).stdout)
    assert result["verdict"]["status"] == "compatible"  # the shapes still fit: a drop-in initialisation
    rows = statuses(result)
    assert rows["fc.weight"] == rows["lm_head.weight"] == rows["midlayer.self_attn.q_proj.weight"] == "values differ"
    assert sorted(name for name, status in rows.items() if status == "same") == ["d2t", "t2d"]
    assert result["values"]["compared"] is True and (result["values"]["differ"], result["values"]["same"]) == (WEIGHTS, 2)
    text = run_cli("compare", mine, other, check=0).stdout
    assert "Tensors: 15, 0 differ, %d differ in values, 2 same\n" % WEIGHTS in text
    assert any(line.split()[:3] == ["values", "differ", "fc.weight"] for line in text.splitlines())
    result = json.loads(run_cli("compare", mine, copy, "--json", check=0).stdout)
    assert set(statuses(result).values()) == {"same"} and result["values"]["same"] == 15
    assert "Tensors: 15, 0 differ, 15 same\n" in run_cli("compare", mine, copy, check=0).stdout


def test_the_agent_compares_values_where_both_lie(client, tmp_path):
    mine = write_drafter(tmp_path / "mine")
    other = write_drafter(tmp_path / "other", layout="speculators", values=1)
    result = client.call("checkpoint.compare", {"a": mine, "b": other}, timeout=120)
    row = next(r for r in result["rows"] if r["a"]["name"] == "midlayer.mlp.up_proj.weight")
    assert row["b"]["name"] == "layers.0.mlp.up_proj.weight" and row["status"] == "values differ"
    assert result["values"]["differ"] == WEIGHTS and "13 differ" in result["values"]["message"]
    again = client.call("checkpoint.compare", {"a": mine, "b": mine}, timeout=120)
    assert set(statuses(again).values()) == {"same"}


def test_reports_without_their_bytes_never_say_same(tmp_path):
    # What the console compares when the two checkpoints are on two machines: their reports only.
    reports = [listing.open_listing(write_drafter(tmp_path / name)).summary() for name in ("a", "b")]
    result = comparison.compare_reports(*reports)
    assert set(statuses(result).values()) == {"same shape and dtype"}
    assert result["values"]["compared"] is False and result["values"]["not_compared"] == 15
    from tui.checkpoints.view import format_compare

    text = format_compare(result)
    assert "Tensors: 15, 0 differ, 15 same shape and dtype\n  contents not compared (the checkpoints are on different machines)" in text
    assert not any(line.split()[:1] == ["same"] and line.split()[1:2] != ["shape"] for line in text.splitlines())


def test_rows_past_the_read_budget_say_same_shape_and_dtype(tmp_path):
    found = [listing.open_listing(write_drafter(tmp_path / "a")), listing.open_listing(write_drafter(tmp_path / "b", values=1))]
    rows = comparison.compare_reports(*(f.summary() for f in found))["rows"]
    first = found[0].data_span(rows[0]["a"]["name"])[2]
    judge = tensor_values.Judge(*found, max_read_bytes=2 * first)  # the first row's reads and no more
    try:
        values = comparison.judge_values(rows, judge)
    finally:
        judge.close()
    assert rows[0]["status"] == "values differ"
    assert {row["status"] for row in rows[1:]} == {"same shape and dtype"}
    assert values["differ"] == 1 and values["not_compared"] == 14
    assert "14 of the same shape and dtype not compared (its" in values["message"] and "of reads were spent" in values["message"]


def test_a_cut_short_checkpoint_against_itself_says_same_only_where_its_bytes_are(tmp_path):
    # Compared with itself, nothing is read, yet a tensor whose bytes the file no longer holds
    # is not called the same as itself.
    import glob
    import os

    mine = write_drafter(tmp_path / "mine")
    (weights,) = glob.glob(os.path.join(mine, "*.safetensors"))
    found = listing.open_listing(mine)
    spans = sorted((found.data_span(name)[1], name) for name in found.sorted_columns().names)
    cut_at = spans[-1][0]  # the last tensor's bytes are gone
    os.truncate(weights, cut_at)
    result = comparison.compare_paths(mine, mine)
    rows = statuses(result)
    assert rows[spans[-1][1]] == "same shape and dtype"
    assert {rows[name] for _, name in spans[:-1]} == {"same"}
    assert result["values"]["not_compared"] == 1 and result["values"]["same"] == len(spans) - 1


def test_a_smaller_draft_vocabulary_never_counts_more_remapped_ids_than_it_has(tmp_path):
    # A drafter of 256 draft ids compared with one of 128: at most 128 of B's 128 ids moved, and
    # the line says the vocabulary shrank (before: "256 of 128 draft ids ...").
    write_drafter(tmp_path / "a", seed=0, draft_vocab=256, target_vocab=512)
    write_drafter(tmp_path / "b", seed=1, draft_vocab=128, target_vocab=512)
    found = json.loads(run_cli("compare", tmp_path / "a", tmp_path / "b", "--json").stdout)
    assert 0 < found["draft_ids_remapped"] <= 128
    text = run_cli("compare", tmp_path / "a", tmp_path / "b").stdout
    assert "%d of 128 draft ids now name other tokens (the draft vocabulary went from 256 to 128)" % found["draft_ids_remapped"] in text
