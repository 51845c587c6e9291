"""The speculation profile of a scored drafter, speculation_profile.json beside it, spelled as
NVIDIA Model-Optimizer's proposal spells it (specdec_bench / ar_validate / export): method,
num_speculative_tokens, conditional_accept_rates (P(draft i+1 accepted | the first i were)),
marginal_accept_rates (P(the first i+1 all accepted)), mean_accept_length (counting the target's
bonus token), acceptance_length_histogram ({accept length: chains}, lengths 1..K+1) and
measurement_conditions; so that other tools read it. Standard library only.
"""

import os

from ..core.records import read_json, write_json

FILE_NAME = "speculation_profile.json"


def build(result, index):
    """The profile of drafter `index` of a score result (score_job.build_result)."""
    figures = result["drafters"][index]
    return {
        "method": "eagle3",
        "num_speculative_tokens": result["k"],
        "verification_method": "longest_prefix",
        "accept_length_model": "chain_analytic",
        "conditional_accept_rates": [_round(x) for x in figures["conditional_rates"]],
        "marginal_accept_rates": [_round(x) for x in figures["unconditional_shares"]],
        "mean_accept_length": _round(figures["predicted_accept_length"]),
        "acceptance_length_histogram": figures["accept_length_histogram"],
        "measurement_conditions": {
            "dataset": result["data"],
            "layout": result["layout"],
            "split": result["split"],
            "held_out": result["held_out"],
            "target_model": result["target"],
            "target_revision": result["target_revision"],
            "aux_hidden_state_layer_ids": figures["aux_layer_ids"],
            "num_samples": result["samples_scored"],
            "num_positions": figures["chains"],
            "temperature": 0.0,
            "validation": "offline: the EAGLE-3 draft chain over the target's recorded hidden states, each draft "
                          "compared with the target's greedy choice (specdeck score)",
            "bound": figures["bound"],
        },
    }


def _round(value):
    return None if value is None else round(value, 6)


def write_beside(drafter, profile, fallback):
    """Writes the profile into the drafter's directory, or, where that cannot be written (a
    read-only store), to `fallback`; returns {path, note}."""
    path = os.path.join(drafter, FILE_NAME)
    try:
        write_json(path, profile)
        return {"path": path, "note": None}
    except OSError as exc:
        if not fallback:
            return {"path": None, "note": "not written beside the drafter: %s" % (exc.strerror or exc)}
        os.makedirs(os.path.dirname(fallback), mode=0o700, exist_ok=True)
        write_json(fallback, profile)
        return {"path": fallback, "note": "the drafter's directory cannot be written (%s): kept at %s" % (exc.strerror or exc, fallback)}


def read_beside(drafter):
    """The profile beside a drafter, or None."""
    return read_json(os.path.join(drafter, FILE_NAME))
