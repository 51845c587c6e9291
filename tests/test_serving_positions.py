"""Per-position acceptance both ways (remote/serving/positions.py): the conditional rate from the
unconditional shares, undefined where no draft reached a position; the shares of drafts that
reached each position from per-request steps when K changed; the K a server's command line sets."""

from remote.serving import positions
from tui.serving import position_text
from tui.widgets.position_heat import CONDITIONAL, UNCONDITIONAL, grid


def test_conditional_rate_is_the_share_over_the_one_before_and_undefined_after_a_zero():
    assert positions.conditional([0.8, 0.4, 0.0, 0.0]) == [0.8, 0.5, 0.0, None]
    assert position_text.rates([0.8, 0.5, 0.0, None]) == "0.80 0.50 0.00 undefined"


def test_steps_that_drafted_fewer_are_left_out_of_the_positions_they_never_drafted():
    # Ten steps: one drafted 3 and accepted 3, nine drafted 2 and accepted 2 (K fell with the batch).
    shares, rates, drafted_at = positions.from_steps([3] + [2] * 9, [3] + [2] * 9)
    assert shares == [1.0, 1.0, 1.0] and rates == [1.0, 1.0, 1.0] and drafted_at == [10, 10, 1]
    unknown = positions.over_requests([{"num_spec_tokens": 3, "num_spec_steps": 11, "num_draft_tokens": 22, "acceptance_histogram": [0, 0, 11, 0]}])
    assert unknown["per_position"] == [] and unknown["per_position_note"].startswith("not knowable")


def test_a_dynamic_k_in_the_last_speculative_config_names_the_k_and_judges_the_counters():
    argv = ["--speculative-config", '{"num_speculative_tokens": 3}',
            "--speculative-config", '{"num_speculative_tokens": 3, "num_speculative_tokens_per_batch_size": [[1, 1, 3], [2, 8, 2]]}']
    schedule, k = positions.schedule_from_argv(argv)
    assert schedule == [[1, 1, 3], [2, 8, 2]] and k == 3
    full = positions.both_ways({"per_position": [1.0, 1.0, 1.0], "num_drafts": 10, "num_draft_tokens": 30}, schedule, k)
    assert full["per_position_conditional"] == [1.0] * 3 and full["k_in_force"] == "K by batch size: 1-1 K=3, 2-8 K=2 (at most 3)"
    fewer = positions.both_ways({"per_position": [1.0, 1.0, 0.2], "num_drafts": 10, "num_draft_tokens": 22}, schedule, k)
    assert fewer["per_position"] == [] and fewer["per_position_counter"] == [1.0, 1.0, 0.2]
    assert "not knowable" in "\n".join(position_text.lines(fewer))


def test_position_by_time_cells_are_conditional_or_unconditional_as_asked():
    series = {0: [[90.0, 0.5, 0.5, 0.5]], 1: [[90.0, 0.25, 0.25, 0.25]], 2: [[90.0, 0.0, 0.0, 0.0]], 3: [[90.0, 0.0, 0.0, 0.0]]}
    _, rows = grid(series, 100.0, 100.0, 4, CONDITIONAL)
    assert [row[3] for row in rows] == [0.5, 0.5, 0.0, None] and rows[0][0] is False  # no point in the first cell
    _, rows = grid(series, 100.0, 100.0, 4, UNCONDITIONAL)
    assert [row[3] for row in rows] == [0.5, 0.25, 0.0, 0.0]
