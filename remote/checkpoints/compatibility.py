"""Compatibility verdicts from inspect reports: compare (can drafter A initialise drafter B?) and
check_against_target (can this drafter serve the target whose config.json is given?), which
compare uses when one side is a target model, and serving uses before it starts a server.
"""

import json
from itertools import compress, repeat
from operator import itemgetter

from .eagle3 import default_aux_layer_ids
from .formats import FORMAT_DESCRIPTIONS, canonical_names, effective_config, int_field
from .problems import dim_text, shape_text

# Config fields that differ between any two checkpoints and say nothing about compatibility.
_CONFIG_NOISE = {"_name_or_path", "transformers_version", "speculators_version", "auto_map",
                 "_commit_hash"}

_DIM_WORDS = {
    "hidden_size": "hidden size",
    "target_hidden_size": "target hidden size (fc fuses 3 x this)",
    "draft_vocab_size": "draft vocabulary",
    "target_vocab_size": "target vocabulary",
    "intermediate_size": "MLP intermediate size",
    "num_attention_heads": "attention heads",
    "num_key_value_heads": "kv heads",
    "head_dim": "head dim",
}
_SHAPE_CAUSE = (
    ("fc.weight", "hidden size or target hidden size differs"),
    ("lm_head.weight", "draft vocabulary or hidden size differs"),
    ("d2t", "draft vocabulary differs"),
    ("t2d", "target vocabulary differs"),
    ("embed_tokens.weight", "target vocabulary or hidden size differs"),
    ("mlp.", "intermediate or hidden size differs"),
    ("self_attn.", "heads, head dim or hidden size differ"),
    ("norm", "hidden size differs"),
)
# Tensors a drafter may lack without harm: they come from elsewhere at load time.
_OPTIONAL = {"embed_tokens.weight": "shared from the target at load time",
             "t2d": "only needed for training; serving uses d2t"}

# A row's status when both sides hold the tensor with one shape and dtype: what a comparison of
# two reports can say (SAME_SHAPE), and, where the values were compared too, SAME or VALUES_DIFFER.
SAME_SHAPE = "same shape and dtype"
SAME = "same"
VALUES_DIFFER = "values differ"
# Statuses of rows that hold nothing a reader must look at.
MATCHING = (SAME, SAME_SHAPE)


def _tensor_side(t):
    if not t:
        return None
    # A bare tensor (listing.Listing.bare_tensors: a comparison's own copy) is already this dict.
    return t if len(t) == 3 else {"name": t["name"], "shape": t["shape"], "dtype": t["dtype"]}


def _canonical_tensors(report):
    tensors = report.get("tensors", [])
    names = list(map(itemgetter("name"), tensors))
    return dict(zip(map(canonical_names(names, report.get("format", "unknown")).__getitem__, names), tensors))


def is_target_model(report):
    """Whether a report is of a target model (not a drafter): no EAGLE-3 tensors, and a
    config.json with the hidden_size and vocab_size a drafter is checked against."""
    if report.get("eagle3") is not None or report.get("format") not in ("hf", "unknown"):
        return False
    tc = _target_text_config(report.get("config"))
    return int_field(tc, "hidden_size") is not None and int_field(tc, "vocab_size") is not None


def compare(report_a, report_b):
    """Side by side: can drafter A initialise drafter B (e.g. the K2 drafter for a K2.5 fine-tune)?

    Works from two inspect reports, so A and B may come from different hosts. Tensors are matched
    by role across layouts (SpecForge midlayer.X = speculators layers.0.X = vLLM model.layers.N.X);
    a row of one shape and dtype on both sides is SAME_SHAPE: reports hold no values, so whether
    they are the same is for the caller that can read both (comparison.compare_paths).
    When one side is a drafter and the other a target model (is_target_model), the drafter is
    checked against the target instead (check_against_target): `target` names the target's side
    and `checks` the checks made; `rows` and `config_diff` are then empty.
    """
    for drafter, target, side in ((report_a, report_b, "B"), (report_b, report_a, "A")):
        if drafter.get("eagle3") is not None and is_target_model(target):
            result = check_against_target(drafter, target.get("config"))
            result.update({"target": side, "rows": [], "config_diff": []})
            head = ("%s drafter can serve the target %s" if result["verdict"] == "compatible"
                    else "%s drafter cannot serve the target %s") % ("A's" if side == "B" else "B's", side)
            result["reasons"] = ["%s: %s" % (head, result["reasons"][0])] + result["reasons"][1:]
            return result
    broken, dims, missing, shapes, notes = [], [], [], [], []
    fmt_a, fmt_b = report_a.get("format", "unknown"), report_b.get("format", "unknown")
    ea, eb = report_a.get("eagle3"), report_b.get("eagle3")
    for side, report, e in (("A", report_a, ea), ("B", report_b, eb)):
        if e is None:
            broken.append("%s is not an EAGLE-3 drafter (format %s: %s)"
                          % (side, report.get("format"), FORMAT_DESCRIPTIONS.get(report.get("format"), "")))
        errors = [p["message"] for p in report.get("problems", []) if p.get("level") == "error"]
        if errors:
            broken.append("%s has %d error%s in its files, first: %s"
                          % (side, len(errors), "s" if len(errors) > 1 else "", errors[0]))
    if fmt_a != fmt_b:
        notes.append("layouts differ: A is %s (%s), B is %s (%s); tensors are matched by role and must be "
                     "renamed when loading" % (fmt_a, _NAMING.get(fmt_a, "?"), fmt_b, _NAMING.get(fmt_b, "?")))
    if ea and eb:
        for key, words in _DIM_WORDS.items():
            if ea.get(key) is not None and eb.get(key) is not None and ea[key] != eb[key]:
                dims.append("%s differs: A %s, B %s" % (words, dim_text(ea[key]), dim_text(eb[key])))
    ca, cb = _canonical_tensors(report_a), _canonical_tensors(report_b)
    rows = []
    keys = _in_row_order(set(ca) | set(cb))
    sides_a, sides_b = list(map(ca.get, keys)), list(map(cb.get, keys))
    for key, a, b in zip(keys, sides_a, sides_b):
        if a == b and len(a) == 3:
            # The same bare tensor on both sides (a target against itself or a copy: all 100,000+ of them).
            rows.append({"name": a["name"], "a": a, "b": b, "status": SAME_SHAPE})
            continue
        if a and b:
            status = "shape differs" if a["shape"] != b["shape"] else "dtype differs" if a["dtype"] != b["dtype"] else SAME_SHAPE
            name = a["name"] if a["name"] == b["name"] else "%s = %s" % (a["name"], b["name"])
        else:
            status = "only in A" if a else "only in B"
            name = (a or b)["name"]
        rows.append({"name": name, "a": _tensor_side(a), "b": _tensor_side(b), "status": status})
        if status == "shape differs":
            cause = next((c for k, c in _SHAPE_CAUSE if k in key), "")
            shapes.append("%s: A %s, B %s%s" % (name, shape_text(a["shape"]), shape_text(b["shape"]),
                                                (" (%s)" % cause) if cause else ""))
        elif status == "only in B":
            if key in _OPTIONAL:
                notes.append("%s only in B: A has none (%s)" % (b["name"], _OPTIONAL[key]))
            else:
                missing.append("B has %s, A has none: B's copy would start from random values" % b["name"])
        elif status == "only in A":
            notes.append("%s only in A: not used by B%s"
                         % (a["name"], " (B: %s)" % _OPTIONAL[key] if key in _OPTIONAL else ""))
        elif status == "dtype differs":
            notes.append("%s: dtype %s in A, %s in B: cast when loading" % (name, a["dtype"], b["dtype"]))
    if len(shapes) > 5:
        shapes = shapes[:5] + ["and %d more tensors differ in shape" % (len(shapes) - 5)]
    fatal = broken + dims + missing + shapes
    pitfalls = _pitfalls(report_a, report_b, ea, eb) if ea and eb else []
    if fatal:
        summary = "not a drop-in initialisation: " + fatal[0]
    else:
        summary = "drop-in initialisation: every tensor B needs is in A with the same shape"
    return {"verdict": "incompatible" if fatal else "compatible",
            "reasons": [summary] + fatal[1:] + notes + ["pitfall: " + p for p in pitfalls],
            "rows": rows, "config_diff": _config_diff(report_a.get("config"), report_b.get("config"))}


_NAMING = {"specforge": "midlayer.*", "eagle": "midlayer.* or layers.0.*", "speculators": "layers.0.*",
           "vllm": "model.layers.N.*", "hf": "model.layers.*", "unknown": "?"}


_ROW_PREFIXES = ("fc.", "layers.", "norm.", "lm_head.", "d2t", "t2d", "embed_tokens.")


def _row_order(canonical):
    for i, prefix in enumerate(_ROW_PREFIXES):
        if canonical.startswith(prefix):
            return (i, canonical)
    return (len(_ROW_PREFIXES), canonical)


def _in_row_order(keys):
    """sorted(keys, key=_row_order), a drafter's parts first; a target's 100,000+ names, which
    start with none of them, are sorted as they are (in C) after those that do."""
    ordered = sorted(keys)
    starts = list(map(str.startswith, ordered, repeat(_ROW_PREFIXES)))
    if True not in starts:
        return ordered
    head = sorted(compress(ordered, starts), key=_row_order)
    return head + [key for key, start in zip(ordered, starts) if not start]


def _pitfalls(report_a, report_b, ea, eb):
    found = []
    nbr_a, nbr_b = ea.get("norm_before_residual"), eb.get("norm_before_residual")
    if nbr_a is not None and nbr_b is not None and nbr_a != nbr_b:
        found.append("norm_before_residual: A runs %s, B runs %s. SpecForge/SGLang drafters take the residual before "
                     "hidden_norm (false) and do not write the field; speculators configs write it (speculators' "
                     "training sets true) and vLLM assumes false when it is absent. Set it explicitly in B's config "
                     "to match how A was trained." % (str(nbr_a).lower(), str(nbr_b).lower()))
    ids_a, ids_b = ea.get("aux_layer_ids"), eb.get("aux_layer_ids")
    if ids_a != ids_b:
        found.append("aux layer ids: A %s, B %s (none = vLLM's default (2, L//2, L-3) of the target); fc.weight was "
                     "trained on A's layers" % (ids_a or "none", ids_b or "none"))
    map_a, map_b = ea.get("vocab_map_sha256"), eb.get("vocab_map_sha256")
    if map_a and map_b and map_a != map_b:
        found.append("d2t/t2d differ: row i of A's lm_head.weight stands for a different target token than in B; "
                     "carry A's d2t and t2d over together with lm_head.weight")
    embed_a, embed_b = ea.get("embed_tokens"), eb.get("embed_tokens")
    if embed_a != embed_b:
        found.append("embed_tokens: %s in A, %s in B" % (embed_a, embed_b))
    cfg_a, cfg_b = effective_config(report_a.get("config")), effective_config(report_b.get("config"))
    for key in ("rope_theta", "rope_scaling", "rms_norm_eps", "max_position_embeddings"):
        if key in cfg_a and key in cfg_b and cfg_a[key] != cfg_b[key]:
            found.append("%s: A %s, B %s" % (key, json.dumps(cfg_a[key]), json.dumps(cfg_b[key])))
    return found


def _config_diff(config_a, config_b):
    a, b = effective_config(config_a), effective_config(config_b)
    diff = []
    for key in sorted(set(a) | set(b)):
        if key in _CONFIG_NOISE:
            continue
        if a.get(key, _MISSING) != b.get(key, _MISSING):
            diff.append({"field": key, "a": a.get(key), "b": b.get(key),
                         "in": "both" if key in a and key in b else "A" if key in a else "B"})
    return diff


_MISSING = object()


def _target_text_config(target_config):
    if isinstance(target_config, dict) and "hidden_size" not in target_config \
            and isinstance(target_config.get("text_config"), dict):
        return target_config["text_config"]  # multimodal wrappers keep the LM's fields here
    return target_config if isinstance(target_config, dict) else {}


def check_against_target(report, target_config):
    """Can this drafter serve the target whose config.json is target_config?

    Checks the hidden size fc expects, the vocabulary d2t maps into, and that the aux layer ids
    lie within the target's layers (vLLM's default (2, L//2, L-3) when the drafter names none).
    """
    tc = _target_text_config(target_config)
    e = report.get("eagle3")
    checks = []

    def check(name, ok, message):
        checks.append({"check": name, "ok": ok, "message": message})

    if e is None:
        check("eagle3", False, "not an EAGLE-3 drafter (format %s)" % report.get("format"))
        return {"verdict": "incompatible", "reasons": [c["message"] for c in checks], "checks": checks,
                "aux_layer_ids": None, "aux_layer_ids_source": None}
    th, tv, layers = int_field(tc, "hidden_size"), int_field(tc, "vocab_size"), int_field(tc, "num_hidden_layers")
    dth, dh = e.get("target_hidden_size"), e.get("hidden_size")
    if th is None:
        check("hidden_size", False, "the target config has no hidden_size")
    elif dth is not None:
        check("hidden_size", dth == th, "fc.weight fuses 3 x %s target features; the target's hidden_size is %s"
              % (dim_text(dth), dim_text(th)))
    if th is not None and dh is not None and e.get("embed_tokens") != "present":
        check("embedding", dh == th, "the drafter has no embed_tokens and shares the target's %s-wide embedding; "
              "its hidden size is %s" % (dim_text(th), dim_text(dh)))
    dtv, dv = e.get("target_vocab_size"), e.get("draft_vocab_size")
    if tv is None:
        check("vocab_size", False, "the target config has no vocab_size")
    else:
        if dtv is not None:
            check("vocab_size", dtv == tv, "the drafter maps into a %s-token target vocabulary (t2d); the target's "
                  "vocab_size is %s" % (dim_text(dtv), dim_text(tv)))
        if dv is not None and dv > tv:
            check("draft_vocab_size", False, "the draft vocabulary (%s) is larger than the target's (%s)" % (dim_text(dv), dim_text(tv)))
    ids = e.get("aux_layer_ids")
    source = "config"
    if layers is None:
        check("aux_layer_ids", False, "the target config has no num_hidden_layers: aux layer ids cannot be checked")
    else:
        if ids is None:
            ids, source = default_aux_layer_ids(layers), "vllm default (2, L//2, L-3)"
        outside = [i for i in ids if not 0 <= i < layers]
        where = "from the drafter's config" if source == "config" else "vLLM's default for a %d-layer target" % layers
        if outside:
            check("aux_layer_ids", False, "aux layer ids %s (%s) include %s, outside the target's %d layers (0..%d)"
                  % (ids, where, outside, layers, layers - 1))
        else:
            check("aux_layer_ids", True, "aux layer ids %s (%s) lie within the target's %d layers" % (ids, where, layers))
    failed = [c["message"] for c in checks if not c["ok"]]
    verdict = "incompatible" if failed else "compatible"
    reasons = failed if failed else [c["message"] for c in checks]
    return {"verdict": verdict, "reasons": reasons, "checks": checks, "aux_layer_ids": ids, "aux_layer_ids_source": source}
