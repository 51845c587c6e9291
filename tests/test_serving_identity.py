"""An engine's figures checked against accept length = 1 + the sum of the per-position shares, read
from its log line (the fallback when /metrics cannot be read): vLLM's own line, rounded as it
prints it, agrees; the same line with a position's rate edited disagrees, both figures said."""

from remote.serving import metrics
from tests.helpers.metrics import LOG_LINE


def test_vllms_own_log_line_agrees_and_an_edited_one_is_said_to_disagree():
    own = metrics.parse_log_line(LOG_LINE)["identity"]
    assert own["holds"] is True and own["message"] is None
    rates = LOG_LINE.split("Per-position acceptance rate: ")[1].split(", Avg")[0]
    edited = LOG_LINE.replace(rates, ", ".join(["0.500"] + rates.split(", ")[1:]))
    said = metrics.parse_log_line(edited)["identity"]
    assert said["holds"] is False
    assert said["message"] == "the engine's figures disagree: 1 + \u03a3 shares = %.2f, accept length = %.2f" % (
        said["one_plus_shares"], metrics.parse_log_line(LOG_LINE)["accept_length"])
    assert said["one_plus_shares"] < said["accept_length"] - 0.4
