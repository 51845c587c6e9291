"""`specdeck breakeven` is arithmetic on this machine, answered without any host; with HOST
SERVER it is that server's line, kept on the host (tests/test_serving_pane.py sets one): its
help says both forms, and options of the one form are refused in the other."""

import json

from tests.conftest import run_cli


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
