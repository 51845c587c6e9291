"""`specdeck breakeven` is arithmetic on this machine: its help lists only what it uses, and
it answers without any host."""

import json

from tests.conftest import run_cli


def test_breakeven_help_offers_no_host_options_and_the_sum_needs_no_host(tmp_path):
    shown = run_cli("breakeven", "--help", home=tmp_path, check=0).stdout
    for option in ("--cycle-ms", "--baseline-tps", "--k", "--target-tps", "--json"):
        assert option in shown, option
    for option in ("--python", "--accept-new"):
        assert option not in shown, "%s means nothing for a local calculation" % option

    result = json.loads(run_cli("breakeven", "--cycle-ms", "30", "--baseline-tps", "82", "--json", home=tmp_path, check=0).stdout)
    assert result["break_even_accept_length"] == 2.46  # the notes' 30 ms cycle and 82 tok/s baseline
    refused = run_cli("breakeven", "--cycle-ms", "30", "--baseline-tps", "82", "--python", "python3", home=tmp_path, check=2)
    assert "unrecognized arguments: --python" in refused.stderr
