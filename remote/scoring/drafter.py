"""An EAGLE-3 drafter as the scorer runs it, read before any work: its layout (SpecForge/EAGLE
`midlayer.*`, speculators `layers.0.*`, vLLM's own), each tensor it needs by its own name, the
sizes and options of its config, its aux layers and d2t, each checked against the target. What
does not fit is refused in one line (Refused). Standard library only.
"""

import os
import struct

from ..checkpoints import eagle3, formats, locate
from . import tensors


class Refused(ValueError):
    """What cannot be scored, in one line: said before any work starts."""


# The tensors of decoder layer N, by their speculators-layout name.
LAYER_TENSORS = ("self_attn.q_proj.weight", "self_attn.k_proj.weight", "self_attn.v_proj.weight", "self_attn.o_proj.weight",
                 "mlp.gate_proj.weight", "mlp.up_proj.weight", "mlp.down_proj.weight", "input_layernorm.weight",
                 "post_attention_layernorm.weight")
ROPE_TYPES = ("default", "linear", "llama3")
# struct formats of the integer dtypes a d2t may have.
INT_FORMATS = {"I8": "b", "U8": "B", "I16": "h", "U16": "H", "I32": "i", "U32": "I", "I64": "q", "U64": "Q"}


def read_config(path, what):
    problems = []
    config = locate.load_json_file(os.path.join(path, "config.json"), "config", problems) \
        if os.path.exists(os.path.join(path, "config.json")) else None
    if problems:
        raise Refused("%s: %s" % (what, problems[0]["message"]))
    return config


def _int(config, key, default=None):
    value = formats.int_field(config, key)
    return default if value is None else value


def read(path, target):
    """The drafter at `path` as the job needs it (a JSON-able dict), checked against `target`
    (target.read's dict). Raises Refused."""
    what = "drafter %s" % path
    if not os.path.isdir(path):
        raise Refused("%s is not a directory" % what)
    config = read_config(path, what) or {}
    try:
        spans = tensors.all_names(path)
    except tensors.TensorsError as exc:
        raise Refused("%s: %s" % (what, exc))
    shapes = dict((name, list(span.shape)) for name, span in spans.items())
    fmt = formats.detect_format(shapes, config)
    if not formats.is_eagle3_layout(fmt, shapes):
        raise Refused("%s is not an EAGLE-3 drafter (its tensors read as %s)" % (what, fmt))
    canonical = formats.canonical_names(list(spans), fmt)
    by_canon = dict((canon, name) for name, canon in canonical.items())
    eff = formats.effective_config(config)

    def need(canon):
        name = by_canon.get(canon)
        if name is None:
            raise Refused("%s has no %s" % (what, formats.layout_name(canon, fmt)))
        return name

    layers = 0
    while "layers.%d.self_attn.q_proj.weight" % layers in by_canon:
        layers += 1
    if layers == 0:
        raise Refused("%s has no decoder layer (%s)" % (what, formats.layout_name("layers.0.self_attn.q_proj.weight", fmt)))
    names = {"fc": need("fc.weight"), "norm": need("norm.weight"), "lm_head": need("lm_head.weight"),
             "hidden_norm": need("layers.0.hidden_norm.weight"), "layers": []}
    for index in range(layers):
        names["layers"].append(dict((tensor, need("layers.%d.%s" % (index, tensor))) for tensor in LAYER_TENSORS))
    for optional, canon in (("d2t", "d2t"), ("embed", "embed_tokens.weight"), ("input_norm", "input_norm.weight")):
        names[optional] = by_canon.get(canon)
    names["fc_norm"] = [by_canon[c] for c in sorted(c for c in by_canon if c.startswith("fc_norm.") and c.endswith(".weight"))]

    hidden = shapes[names["norm"]][0]
    fc_out, fc_in = shapes[names["fc"]]
    draft_vocab = shapes[names["lm_head"]][0]
    target_hidden = target["hidden_size"]
    heads = _int(eff, "num_attention_heads")
    if heads is None or heads <= 0:
        raise Refused("%s: config.json names no num_attention_heads" % what)
    kv_heads = _int(eff, "num_key_value_heads", heads)
    head_dim = _int(eff, "head_dim") or hidden // heads
    q_rows = shapes[names["layers"][0]["self_attn.q_proj.weight"]][0]
    if q_rows != heads * head_dim:
        raise Refused("%s: q_proj has %d rows, not heads x head_dim = %d x %d" % (what, q_rows, heads, head_dim))
    if fc_out != hidden:
        raise Refused("%s: fc gives %d, not the drafter's hidden size %d" % (what, fc_out, hidden))
    if fc_in % target_hidden:
        raise Refused("%s: fc takes %d inputs, which is no whole number of the target's hidden size %d: the drafter "
                      "was made for a target of another hidden size" % (what, fc_in, target_hidden))
    aux_count = fc_in // target_hidden
    aux_ids = eagle3.aux_layer_ids_from_config(config)
    aux_said = "config"
    if aux_ids is None:
        aux_ids, aux_said = eagle3.default_aux_layer_ids(target["num_hidden_layers"]), "vLLM's default"
    if len(aux_ids) != aux_count:
        raise Refused("%s: fc fuses %d states of the target (%d inputs / hidden %d) but its config names %d aux layers %s"
                      % (what, aux_count, fc_in, target_hidden, len(aux_ids), aux_ids))
    if hidden != target_hidden and names["embed"] is None:
        raise Refused("%s: hidden size %d differs from the target's %d and it has no embed_tokens of its own: the "
                      "target's embeddings do not fit it" % (what, hidden, target_hidden))
    if names["embed"] is not None and shapes[names["embed"]][1] != hidden:
        raise Refused("%s: embed_tokens is %s wide, not its hidden size %d" % (what, shapes[names["embed"]][1], hidden))

    target_vocab = target["vocab_size"]
    d2t_span = spans.get(names["d2t"]) if names["d2t"] else None
    if draft_vocab > target_vocab:
        raise Refused("%s: its draft vocabulary (%d) is larger than the target's (%d)" % (what, draft_vocab, target_vocab))
    if draft_vocab < target_vocab and d2t_span is None:
        raise Refused("%s: its draft vocabulary (%d) is smaller than the target's (%d) and it has no d2t to map "
                      "draft ids to target ids" % (what, draft_vocab, target_vocab))
    if d2t_span is not None:
        _check_d2t(what, d2t_span, draft_vocab, target_vocab)
    rope = eff.get("rope_scaling") or eff.get("rope_parameters") or {}
    rope = rope if isinstance(rope, dict) else {}
    rope_type = rope.get("rope_type") or rope.get("type") or "default"
    if rope_type not in ROPE_TYPES:
        raise Refused("%s: its rope scaling %r is not one the scorer runs (%s)" % (what, rope_type, ", ".join(ROPE_TYPES)))
    theta = eff.get("rope_theta") or rope.get("rope_theta") or 10000.0
    return {
        "path": path, "format": fmt, "names": names, "hidden_size": hidden, "draft_vocab_size": draft_vocab,
        "layers": layers, "heads": heads, "kv_heads": kv_heads, "head_dim": head_dim,
        "rms_norm_eps": float(eff.get("rms_norm_eps") or 1e-6), "rope_theta": float(theta),
        "rope": dict(rope, rope_type=rope_type), "aux_layer_ids": list(aux_ids), "aux_layer_ids_from": aux_said,
        "aux_count": aux_count, "norm_before_residual": eagle3.effective_norm_before_residual(fmt, config),
        "norm_output": bool(eff.get("norm_output")), "has_d2t": d2t_span is not None,
        "embed_from": "drafter" if names["embed"] else "target",
        "dtype": spans[names["fc"]].dtype, "weight_bytes": sum(span.nbytes for span in spans.values()),
    }


def _check_d2t(what, span, draft_vocab, target_vocab):
    """d2t maps every draft id into the target vocabulary (target = draft + d2t[draft])."""
    code = INT_FORMATS.get(span.dtype)
    if code is None or len(span.shape) != 1:
        raise Refused("%s: d2t is %s %s, not a vector of integer offsets" % (what, span.dtype, list(span.shape)))
    if span.shape[0] != draft_vocab:
        raise Refused("%s: d2t has %d entries but the draft vocabulary (lm_head rows) has %d" % (what, span.shape[0], draft_vocab))
    try:
        raw = tensors.read_span(span, deadline_s=60.0)
    except tensors.TensorsError as exc:
        raise Refused("%s: %s" % (what, exc))
    offsets = struct.unpack("<%d%s" % (span.shape[0], code), bytes(raw))
    for draft, offset in enumerate(offsets):
        target_id = draft + offset
        if not 0 <= target_id < target_vocab:
            outside = sum(1 for d, o in enumerate(offsets) if not 0 <= d + o < target_vocab)
            raise Refused("%s: d2t maps %d draft ids outside the target's vocabulary of %d (draft id %d -> target id %d)"
                          % (what, outside, target_vocab, draft, target_id))
