"""`specdeck breakeven` is arithmetic on this machine, answered without any host; with HOST
SERVER it is that server's line, kept on the host (tests/test_serving_pane.py sets one): its
help says both forms, and options of the one form are refused in the other. Where a line is
judged (advise, the K rows, the Fleet pane), which line it is is said."""

import json

from remote.serving import advice
from tests.helpers.cli import run_cli
from tests.helpers.sweeps import known_sweep as sweep
from tui.fleet import model as fleet_model
from tui.serving import advisor


def test_breakeven_help_says_both_forms_and_the_sum_needs_no_host(tmp_path):
    shown = run_cli("breakeven", "--help", home=tmp_path, check=0).stdout
    for option in ("--cycle-ms", "--baseline-tps", "--k", "--target-tps", "--json", "--set", "--clear", "HOST SERVER"):
        assert option in shown, option

    result = json.loads(run_cli("breakeven", "--cycle-ms", "30", "--baseline-tps", "82", "--json", home=tmp_path, check=0).stdout)
    assert result["break_even_accept_length"] == 2.46  # the notes' 30 ms cycle and 82 tok/s baseline
    refused = run_cli("breakeven", "--cycle-ms", "30", "--baseline-tps", "82", "--python", "python3", home=tmp_path, check=2)
    assert "--python and --accept-new mean nothing without HOST" in refused.stderr
    refused = run_cli("breakeven", "--set", "2.46", home=tmp_path, check=2)
    assert "--set and --clear need the server: specdeck breakeven HOST SERVER --set 2.46" in refused.stderr
    refused = run_cli("breakeven", "gpu01", "j3", "--cycle-ms", "30", "--baseline-tps", "82", home=tmp_path, check=2)
    assert "on a host: --set 30@82" in refused.stderr
    refused = run_cli("breakeven", "gpu01", "j3", "--set", "fast", home=tmp_path, check=2)
    assert "--set takes an accept length (2.46) or CYCLE_MS@BASELINE_TPS (30@82), not 'fast'" in refused.stderr


def test_advise_the_k_rows_and_the_fleet_say_which_line_they_judge_against():
    """Without a sweep the running K is judged against the server's own line, and says so; with
    one each K against its own (the sweep's cycle time), the server's line named beside it; the
    Fleet pane names a line that is not the one set by hand."""
    line = {"accept_length": 2.8, "source": "set", "how": None}
    alone = advice.judge_against(advice.advise(2, [0.6, 0.4], None), line, None)
    [running] = [row for row in alone["per_k"] if row["k"] == 2]
    assert (running["break_even_accept_length"], running["break_even_source"]) == (2.8, "set")
    assert "break-even: this server's line 2.80 (set), for its running K" in advisor.advice_lines(alone)
    swept = advice.judge_against(advice.advise(2, [0.6, 0.4], sweep(), "j12"), line, "j12")
    assert {row["break_even_source"] for row in swept["per_k"]} == {"sweep j12"}
    assert "break-even: each K's from j12's cycle times; this server's line is 2.80 (set)" in advisor.advice_lines(swept)

    server = {"id": "j8", "accept_length": 2.0, "break_even_accept_length": 2.46, "age_s": 0.5, "stale": False}
    assert fleet_model.server_text(dict(server, break_even_source="benchmark j5")) == "j8 2.00/2.46 (benchmark j5)"
    assert fleet_model.server_text(dict(server, break_even_source="set")) == "j8 2.00/2.46"
