"""EAGLE-3 drafter layouts: which tool wrote a checkpoint, each tensor's canonical (speculators)
name and role, the dimensions derived from shapes and config.json, and the checks between them.

Works on names, shapes and config dicts only; the d2t/t2d check gets its bytes through a reader
the caller passes. Standard library only, Python 3.9+.
"""

import hashlib
import operator
import re
from itertools import repeat

from .safetensors_header import _INT_FORMATS, _d, _err, _shape_text, _warn

FORMATS = ("specforge", "speculators", "eagle", "vllm", "hf", "unknown")
FORMAT_DESCRIPTIONS = {
    "specforge": "SpecForge / SGLang EAGLE-3 drafter (LlamaForCausalLMEagle3, midlayer.*)",
    "speculators": "speculators EAGLE-3 drafter (speculators_config, layers.0.*)",
    "eagle": "original EAGLE drafter (SafeAILab layout)",
    "vllm": "vLLM-native EAGLE-3 names (model.*, draft_id_to_target_id)",
    "hf": "plain Hugging Face model (not a drafter)",
    "unknown": "layout not recognised",
}


# ---------------------------------------------------------------------------------------------
# Layouts: which tool wrote this, and the name each tensor has in the speculators layout


def effective_config(config):
    """config.json flattened: a speculators transformer_layer_config merged under the top level."""
    if not isinstance(config, dict):
        return {}
    layer = config.get("transformer_layer_config")
    merged = dict(layer) if isinstance(layer, dict) else {}
    for key, value in config.items():
        if key != "transformer_layer_config":
            merged[key] = value
    return merged


def _architectures(config):
    archs = config.get("architectures") if isinstance(config, dict) else None
    return [a for a in archs if isinstance(a, str)] if isinstance(archs, list) else []


def _is_eagle12(shapes):
    fc = shapes.get("fc.weight")
    return (fc is not None and len(fc) == 2 and fc[1] == 2 * fc[0] and "d2t" not in shapes
            and not any(n.startswith("midlayer.") for n in shapes))


def detect_format(shapes, config):
    """One of FORMATS, from tensor names (with shapes) and config.json (dict or None)."""
    names = set(shapes)
    config = config if isinstance(config, dict) else {}
    archs = _architectures(config)
    if any(k in config for k in ("speculators_config", "speculators_model_type", "transformer_layer_config")):
        return "speculators"
    if any(map(str.startswith, names, repeat("midlayer."))):  # map: 140,000 names of a MoE target
        # The original EAGLE-3 repository writes the same names but a plain LlamaForCausalLM config.
        if archs and not any("eagle" in a.lower() for a in archs):
            return "eagle"
        return "specforge"
    eagle_marks = ("model.fc.weight" in names or "draft_id_to_target_id" in names
                   or any(n.startswith("model.layers.") and ".hidden_norm." in n for n in names))
    if eagle_marks:
        return "vllm"
    if any(n.startswith("layers.") for n in names) and "fc.weight" in names:
        return "eagle" if _is_eagle12(shapes) else "speculators"
    if any(n.startswith(("model.layers.", "model.embed_tokens.", "transformer.", "model.decoder."))
           for n in names) or (archs and names):
        return "hf"
    return "unknown"


def canonical_names(names, fmt):
    """{name: the name it has in the speculators layout}, so layouts can be matched by role."""
    mapping = {}
    if fmt == "vllm":
        layer_ids = []
        for name in names:
            m = re.match(r"(?:model\.)?layers\.(\d+)\.", name)
            if m:
                layer_ids.append(int(m.group(1)))
        # vLLM numbers draft layers after the target's (start_layer_id = target layer count).
        first = min(layer_ids) if layer_ids else 0
        for name in names:
            canon = name[len("model."):] if name.startswith("model.") else name
            if canon == "draft_id_to_target_id":
                canon = "d2t"
            m = re.match(r"layers\.(\d+)\.(.*)", canon)
            if m:
                canon = "layers.%d.%s" % (int(m.group(1)) - first, m.group(2))
            mapping[name] = canon
        return mapping
    for name in names:
        if fmt in ("specforge", "eagle") and name.startswith("midlayer."):
            mapping[name] = "layers.0." + name[len("midlayer."):]
        else:
            mapping[name] = name
    return mapping


def _is_eagle3_layout(fmt, shapes):
    if fmt in ("specforge", "speculators", "vllm"):
        return True
    return fmt == "eagle" and not _is_eagle12(shapes)


# ---------------------------------------------------------------------------------------------
# EAGLE-3: dimensions, roles, shape relations


def _int_field(config, key):
    value = config.get(key)
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def aux_layer_ids_from_config(config):
    """The aux hidden-state layer ids a drafter's config names, or None when it names none."""
    eff = effective_config(config)
    ids = eff.get("eagle_aux_hidden_state_layer_ids")
    eagle_config = eff.get("eagle_config")
    if ids is None and isinstance(eagle_config, dict):
        ids = eagle_config.get("eagle_aux_hidden_state_layer_ids")
    if isinstance(ids, list) and all(isinstance(i, int) and not isinstance(i, bool) for i in ids):
        return list(ids)
    return None


def default_aux_layer_ids(target_layers):
    """What vLLM uses when a drafter names none: (2, L // 2, L - 3) of the target's L layers."""
    return [2, target_layers // 2, target_layers - 3]


def _dims_from_tensors(canon):
    """Sizes read off the tensors themselves (the truth on disk), keyed like the eagle3 report."""
    def dim(name, axis):
        shape = canon.get(name)
        return shape[axis] if shape is not None and len(shape) > axis else None

    dims = {}
    dims["hidden_size"] = dim("fc.weight", 0) or dim("norm.weight", 0) or dim("layers.0.hidden_norm.weight", 0)
    fc_in = dim("fc.weight", 1)
    dims["fc_inputs"] = fc_in
    dims["target_hidden_size"] = fc_in // 3 if fc_in is not None and fc_in % 3 == 0 else None
    dims["draft_vocab_size"] = dim("lm_head.weight", 0) or dim("d2t", 0)
    dims["target_vocab_size"] = dim("t2d", 0) or dim("embed_tokens.weight", 0)
    dims["intermediate_size"] = dim("layers.0.mlp.gate_proj.weight", 0) or dim("layers.0.mlp.down_proj.weight", 1)
    dims["q_rows"] = dim("layers.0.self_attn.q_proj.weight", 0)
    dims["k_rows"] = dim("layers.0.self_attn.k_proj.weight", 0)
    return dims


def _derive_eagle3(canon, config, problems):
    """The eagle3 report section, checking config.json against the tensors."""
    eff = effective_config(config)
    found = _dims_from_tensors(canon)
    sources = {"hidden_size": "fc.weight / norm.weight", "draft_vocab_size": "lm_head.weight rows / d2t",
               "target_vocab_size": "t2d length / embed_tokens.weight rows",
               "intermediate_size": "the MLP projections", "target_hidden_size": "fc.weight inputs / 3"}
    result = {}
    for key in ("hidden_size", "target_hidden_size", "draft_vocab_size", "target_vocab_size", "intermediate_size"):
        config_key = "vocab_size" if key == "target_vocab_size" else key
        from_config = _int_field(eff, config_key)
        if found[key] is not None:
            result[key] = found[key]
            if from_config is not None and from_config != found[key]:
                problems.append(_err("config.json says %s %s but the tensors (%s) say %s"
                                     % (config_key, _d(from_config), sources[key], _d(found[key]))))
        else:
            result[key] = from_config
    if result["target_hidden_size"] is None and found["fc_inputs"] is None:
        result["target_hidden_size"] = result["hidden_size"]  # absent means equal to hidden_size
    heads = _int_field(eff, "num_attention_heads")
    kv_heads = _int_field(eff, "num_key_value_heads") or heads
    head_dim = _int_field(eff, "head_dim")
    if head_dim is None and heads and result["hidden_size"]:
        head_dim = result["hidden_size"] // heads  # the HF Llama default
    standard = _attention_kind(canon) == "standard"
    if standard and heads and head_dim and found["q_rows"] is not None and heads * head_dim != found["q_rows"]:
        problems.append(_err("config.json says %d heads x %d = %s, but layer 0's q_proj has %s rows"
                             % (heads, head_dim, _d(heads * head_dim), _d(found["q_rows"]))))
    if standard and kv_heads and head_dim and found["k_rows"] is not None and kv_heads * head_dim != found["k_rows"]:
        problems.append(_err("config.json says %d kv heads x %d = %s, but layer 0's k_proj has %s rows"
                             % (kv_heads, head_dim, _d(kv_heads * head_dim), _d(found["k_rows"]))))
    result["num_attention_heads"] = heads
    result["num_key_value_heads"] = kv_heads
    result["head_dim"] = head_dim
    result["aux_layer_ids"] = aux_layer_ids_from_config(config)
    if config and "draft_vocab_size" not in eff and result["draft_vocab_size"] and result["target_vocab_size"] \
            and result["draft_vocab_size"] != result["target_vocab_size"]:
        problems.append(_warn("config.json has no draft_vocab_size: vLLM would assume the target's %s and fail to "
                              "load lm_head.weight with %s rows"
                              % (_d(result["target_vocab_size"]), _d(result["draft_vocab_size"]))))
    return result


def _attention_kind(canon):
    """"standard" (q/k/v), "mla" (DeepSeek latent attention), "fused" (vLLM qkv_proj) or None."""
    if "layers.0.self_attn.kv_a_proj_with_mqa.weight" in canon:
        return "mla"
    if "layers.0.self_attn.qkv_proj.weight" in canon:
        return "fused"
    return "standard"


def _expect(problems, name, shape, expected, why):
    if shape is None:
        return
    if list(shape) != list(expected):
        problems.append(_err("%s has shape %s, expected %s: %s" % (name, _shape_text(shape), _shape_text(expected), why)))


def _layout_name(canonical, fmt):
    """A speculators-layout name as the checkpoint's own layout would spell it."""
    if fmt in ("specforge", "eagle") and canonical.startswith("layers.0."):
        return "midlayer." + canonical[len("layers.0."):]
    return canonical


def _check_eagle3_shapes(canon, display, dims, problems, fmt=None):
    """Shape relations between the tensors of an EAGLE-3 drafter (canon: canonical name -> shape)."""
    h = dims["hidden_size"]
    th = dims["target_hidden_size"]
    inter = dims["intermediate_size"]
    dv = dims["draft_vocab_size"]
    tv = dims["target_vocab_size"]

    def shape(name):
        return canon.get(name)

    def show(name):
        return display.get(name, name)

    required = ["fc.weight", "norm.weight", "lm_head.weight", "layers.0.hidden_norm.weight",
                "layers.0.input_layernorm.weight", "layers.0.post_attention_layernorm.weight",
                "layers.0.self_attn.o_proj.weight"]
    attention = _attention_kind(canon)
    if attention == "mla":  # DeepSeek-style drafters (SpecForge deepseek_eagle3)
        required += ["layers.0.self_attn.kv_a_proj_with_mqa.weight", "layers.0.self_attn.kv_b_proj.weight"]
        if "layers.0.self_attn.q_proj.weight" not in canon:
            required += ["layers.0.self_attn.q_a_proj.weight", "layers.0.self_attn.q_b_proj.weight"]
    elif attention == "standard":
        required += ["layers.0.self_attn.q_proj.weight", "layers.0.self_attn.k_proj.weight",
                     "layers.0.self_attn.v_proj.weight"]
    if not any(n.startswith("layers.0.mlp.experts.") for n in canon):  # MoE drafters have no single MLP
        required.append("layers.0.mlp.down_proj.weight")
        if "layers.0.mlp.gate_up_proj.weight" not in canon:
            required += ["layers.0.mlp.gate_proj.weight", "layers.0.mlp.up_proj.weight"]
    for name in required:
        if name not in canon:
            problems.append(_err("an EAGLE-3 drafter needs %s, this checkpoint has none" % display.get(name, _layout_name(name, fmt))))
    fc = shape("fc.weight")
    if fc is not None and (len(fc) != 2 or fc[1] % 3):
        problems.append(_err("%s has shape %s: EAGLE-3's fc fuses three auxiliary hidden states of the target, "
                             "so its inputs must be 3 x the target hidden size" % (show("fc.weight"), _shape_text(fc))))
    if h is None:
        return
    for norm in ("norm.weight", "layers.0.hidden_norm.weight", "layers.0.input_layernorm.weight",
                 "layers.0.post_attention_layernorm.weight"):
        _expect(problems, show(norm), shape(norm), [h], "an RMSNorm over the hidden size %s" % _d(h))
    for proj in ("q_proj", "k_proj", "v_proj", "qkv_proj", "q_a_proj", "kv_a_proj_with_mqa"):
        name = "layers.0.self_attn.%s.weight" % proj
        s = shape(name)
        if s is not None and (len(s) != 2 or s[1] != 2 * h):
            problems.append(_err("%s has shape %s: an EAGLE-3 first layer's %s takes embedding + hidden = "
                                 "2 x %s = %s inputs" % (show(name), _shape_text(s), proj, _d(h), _d(2 * h))))
    q = shape("layers.0.self_attn.q_proj.weight")
    o = shape("layers.0.self_attn.o_proj.weight")
    if o is not None and q is not None and len(q) == 2 and attention == "standard":
        _expect(problems, show("layers.0.self_attn.o_proj.weight"), o, [h, q[0]],
                "o_proj maps the %s attention outputs back to the hidden size %s" % (_d(q[0]), _d(h)))
    k = shape("layers.0.self_attn.k_proj.weight")
    v = shape("layers.0.self_attn.v_proj.weight")
    if k is not None and v is not None and list(k) != list(v):
        problems.append(_err("%s %s and %s %s differ: keys and values have the same heads"
                             % (show("layers.0.self_attn.k_proj.weight"), _shape_text(k),
                                show("layers.0.self_attn.v_proj.weight"), _shape_text(v))))
    if inter is not None:
        _expect(problems, show("layers.0.mlp.gate_proj.weight"), shape("layers.0.mlp.gate_proj.weight"), [inter, h],
                "the MLP gate maps hidden %s to intermediate %s" % (_d(h), _d(inter)))
        _expect(problems, show("layers.0.mlp.up_proj.weight"), shape("layers.0.mlp.up_proj.weight"), [inter, h],
                "the MLP up projection maps hidden %s to intermediate %s" % (_d(h), _d(inter)))
        _expect(problems, show("layers.0.mlp.down_proj.weight"), shape("layers.0.mlp.down_proj.weight"), [h, inter],
                "the MLP down projection maps intermediate %s back to hidden %s" % (_d(inter), _d(h)))
    if fc is not None and th is not None and len(fc) == 2:
        _expect(problems, show("fc.weight"), fc, [h, 3 * th],
                "fc fuses 3 target hidden states of %s into the hidden size %s" % (_d(th), _d(h)))
    lm_head = shape("lm_head.weight")
    if lm_head is not None and dv is not None:
        _expect(problems, show("lm_head.weight"), lm_head, [dv, h],
                "the draft LM head maps hidden %s to the %s-token draft vocabulary" % (_d(h), _d(dv)))
    d2t = shape("d2t")
    if d2t is not None and lm_head is not None and len(lm_head) == 2:
        _expect(problems, show("d2t"), d2t, [lm_head[0]],
                "d2t has one offset per draft token, and lm_head.weight has %s rows" % _d(lm_head[0]))
    t2d = shape("t2d")
    if t2d is not None and len(t2d) != 1:
        problems.append(_err("%s has shape %s: t2d is one flag per target token" % (show("t2d"), _shape_text(t2d))))
    embed = shape("embed_tokens.weight")
    if embed is not None and tv is not None:
        _expect(problems, show("embed_tokens.weight"), embed, [tv, h],
                "embed_tokens embeds the %s target token ids at the hidden size %s" % (_d(tv), _d(h)))
    norm_fc = shape("input_norm.weight")
    if norm_fc is not None and th is not None:
        _expect(problems, show("input_norm.weight"), norm_fc, [3 * th], "it normalises fc's 3 x %s inputs" % _d(th))
    if dv is not None and tv is not None and dv < tv and d2t is None:
        problems.append(_err("no d2t: the %s draft-vocabulary logits cannot be mapped to the %s target ids"
                             % (_d(dv), _d(tv))))
    if dv is not None and tv is not None and dv > tv:
        problems.append(_err("the draft vocabulary (%s) is larger than the target vocabulary (%s)" % (_d(dv), _d(tv))))


def role(canonical, fmt, dims):
    """What a tensor does, in words that are right, from its speculators-layout name."""
    dims = dims or {}
    h = dims.get("hidden_size")
    th = dims.get("target_hidden_size") or h
    dv = dims.get("draft_vocab_size")
    tv = dims.get("target_vocab_size")
    inter = dims.get("intermediate_size")
    heads = dims.get("num_attention_heads")
    kv = dims.get("num_key_value_heads")
    hd = dims.get("head_dim")

    def num(value, fallback):
        return str(value) if value else fallback

    if fmt == "hf":
        return _hf_role(canonical)
    eagle12 = dims.get("eagle12")
    m = re.match(r"layers\.(\d+)\.(.*)", canonical)
    layer, rest = (int(m.group(1)), m.group(2)) if m else (None, canonical)
    first = layer == 0
    two_h = "2 x %s" % num(h, "hidden")
    if rest == "fc.weight":
        if eagle12:
            return "fuses the token embedding with the target's last hidden state (%s -> %s)" % (two_h, num(h, "hidden"))
        return ("fuses 3 auxiliary hidden states of the target (3 x %s -> %s); not QKV"
                % (num(th, "target hidden"), num(h, "hidden")))
    if rest == "fc.bias":
        return "bias of fc"
    if rest == "d2t":
        return "draft id -> target id offsets: target = draft + d2t[draft] (%s draft ids)" % num(dv, "all")
    if rest == "t2d":
        return "marks the %s target ids (of %s) the draft vocabulary keeps" % (num(dv, "draft-vocabulary"), num(tv, "all"))
    if rest == "lm_head.weight":
        return "draft LM head: hidden %s -> %s draft-vocabulary logits" % (num(h, ""), num(dv, "the")) if not eagle12 \
            else "LM head (hidden -> vocabulary logits)"
    if rest == "norm.weight":
        return "final RMSNorm before lm_head"
    if rest == "embed_tokens.weight":
        return "token embeddings (%s target ids x %s); often shared from the target" % (num(tv, "all"), num(h, "hidden"))
    if rest == "input_norm.weight":
        return "RMSNorm over the 3 concatenated aux hidden states before fc (norm_before_fc)"
    if rest == "mask_hidden":
        return "hidden state used for masked positions in parallel drafting"
    heads_text = "%s heads x %s" % (num(heads, "?"), num(hd, "?")) if heads else "the heads"
    kv_text = "%s kv heads x %s" % (num(kv, "?"), num(hd, "?")) if kv else "the kv heads"
    inputs = "embedding+hidden (%s)" % two_h if first and not eagle12 else num(h, "hidden")
    table = {
        "hidden_norm.weight": "RMSNorm on the incoming hidden state (fused target features or the previous step)",
        "input_layernorm.weight": ("RMSNorm on the token embedding before it joins the hidden state" if first and not eagle12
                                   else "RMSNorm before attention"),
        "post_attention_layernorm.weight": "RMSNorm before the MLP",
        "self_attn.q_proj.weight": "attention query: %s -> %s" % (inputs, heads_text),
        "self_attn.k_proj.weight": "attention key: %s -> %s" % (inputs, kv_text),
        "self_attn.v_proj.weight": "attention value: %s -> %s" % (inputs, kv_text),
        "self_attn.qkv_proj.weight": "fused query/key/value (vLLM): %s -> q, k and v heads" % inputs,
        "self_attn.o_proj.weight": "attention output: %s -> hidden %s" % (heads_text, num(h, "")),
        "mlp.gate_proj.weight": "MLP gate: hidden %s -> %s" % (num(h, ""), num(inter, "intermediate")),
        "mlp.up_proj.weight": "MLP up: hidden %s -> %s" % (num(h, ""), num(inter, "intermediate")),
        "mlp.gate_up_proj.weight": ("fused MLP gate and up (vLLM): hidden %s -> 2 x %s"
                                    % (num(h, ""), num(inter, "intermediate"))),
        "mlp.down_proj.weight": "MLP down: %s -> hidden %s" % (num(inter, "intermediate"), num(h, "")),
        "self_attn.q_norm.weight": "RMSNorm on each query head (Qwen3-style)",
        "self_attn.k_norm.weight": "RMSNorm on each key head (Qwen3-style)",
        "self_attn.q_a_proj.weight": "MLA query down-projection: %s -> query latent" % inputs,
        "self_attn.q_a_layernorm.weight": "RMSNorm on the MLA query latent",
        "self_attn.q_b_proj.weight": "MLA query up-projection: latent -> %s" % heads_text,
        "self_attn.kv_a_proj_with_mqa.weight": "MLA key/value latent + shared rope key: %s -> latent" % inputs,
        "self_attn.kv_a_layernorm.weight": "RMSNorm on the MLA key/value latent",
        "self_attn.kv_b_proj.weight": "MLA key/value up-projection: latent -> per-head keys and values",
        "mlp.gate.weight": "MoE router: hidden -> expert scores",
    }
    text = table.get(rest)
    if text is None and rest.endswith(".bias"):
        text = "bias of %s" % rest[:-len(".bias")]
    if text is None:
        expert = re.match(r"mlp\.(?:shared_)?experts?\.(?:(\d+)\.)?(gate_proj|up_proj|down_proj)\.weight$", rest)
        if expert:
            which = "shared expert" if "shared" in rest else "expert %s" % expert.group(1)
            text = "MoE %s: MLP %s" % (which, expert.group(2).replace("_proj", ""))
    if text is None:
        return ""
    return text if layer in (0, None) else "layer %d: %s" % (layer, text)


_HF_ROLES = (
    ("embed_tokens.weight", "token embeddings"),
    ("lm_head.weight", "LM head (hidden -> vocabulary logits)"),
    ("self_attn.q_proj.weight", "attention query projection"),
    ("self_attn.k_proj.weight", "attention key projection"),
    ("self_attn.v_proj.weight", "attention value projection"),
    ("self_attn.o_proj.weight", "attention output projection"),
    ("input_layernorm.weight", "RMSNorm before attention"),
    ("post_attention_layernorm.weight", "RMSNorm before the MLP"),
    ("gate_proj.weight", "MLP gate projection"),
    ("up_proj.weight", "MLP up projection"),
    ("down_proj.weight", "MLP down projection"),
)


def _hf_role(name):
    for suffix, text in _HF_ROLES:
        if name.endswith(suffix):
            m = re.search(r"layers\.(\d+)\.", name)
            expert = re.search(r"experts\.(\d+)\.", name)
            prefix = "layer %s: " % m.group(1) if m else ""
            if expert:
                prefix += "expert %s " % expert.group(1)
            return prefix + text
    if name in ("model.norm.weight", "norm.weight"):
        return "final RMSNorm"
    return ""


def effective_norm_before_residual(fmt, config):
    """Whether hidden_norm applies before the residual is taken, as the loader will run it.

    SpecForge / SGLang (and the original EAGLE-3) take the residual before hidden_norm, which is
    norm_before_residual = false, and their configs do not carry the field. speculators configs
    carry it (speculators' own training sets it true); vLLM reads it and defaults to false.
    """
    eff = effective_config(config)
    value = eff.get("norm_before_residual")
    if fmt in ("specforge", "eagle"):
        return False
    return bool(value) if isinstance(value, bool) else False


# ---------------------------------------------------------------------------------------------
# d2t / t2d: the vocabulary maps, read for real (kilobytes)


def _check_vocab_maps(d2t, t2d, dims, display, problems, read_ints):
    """Checks target = draft + d2t[draft] lands on exactly the ids t2d marks; returns a digest.

    The common case (all is well) runs on C-level builtins only: a 163,840-entry t2d and a
    32,000-entry d2t check in a few milliseconds. Details are worked out only for a failure.
    read_ints(tensor) reads a map's (raw bytes, values), or None when it cannot be read.
    """
    d2t_read = read_ints(d2t) if d2t else None
    if d2t and d2t["dtype"] not in _INT_FORMATS:
        problems.append(_warn("%s has dtype %s; expected integer offsets (I64)" % (display["d2t"], d2t["dtype"])))
    if d2t_read is None:
        return None
    d2t_raw, offsets = d2t_read
    tv = dims.get("target_vocab_size")
    targets = list(map(operator.add, range(len(offsets)), offsets))
    name = display["d2t"]
    inside = targets
    if tv is not None and targets and (min(targets) < 0 or max(targets) >= tv):
        outside = [(d, t) for d, t in enumerate(targets) if not 0 <= t < tv]
        inside = [t for t in targets if 0 <= t < tv]
        d, t = outside[0]
        problems.append(_err("%s maps %s draft ids outside the target vocabulary of %s (draft id %d -> target id %d)"
                             % (name, _d(len(outside)), _d(tv), d, t)))
    distinct = set(targets)
    if len(distinct) != len(targets):
        seen = {}
        for draft, target in enumerate(targets):
            if target in seen:
                problems.append(_err("%s maps draft ids %d and %d to the same target id %d"
                                     % (name, seen[target], draft, target)))
                break
            seen[target] = draft
    t2d_raw = b""
    t2d_read = read_ints(t2d) if t2d else None
    if t2d is None:
        problems.append(_warn("d2t without t2d: the vocabulary maps could not be checked against each other"))
    elif t2d_read is None:
        problems.append(_warn("%s (dtype %s) could not be read; the vocabulary maps were not checked"
                              % (display["t2d"], t2d["dtype"])))
    else:
        t2d_raw, flags = t2d_read
        t2d_name = display["t2d"]
        kept = len(flags) - flags.count(0)
        if kept != len(targets):
            problems.append(_err("%s has %s true entries, but the draft vocabulary has %s (the length of %s)"
                                 % (t2d_name, _d(kept), _d(len(targets)), name)))
        in_flags = [t for t in inside if 0 <= t < len(flags)] if inside is not targets or tv != len(flags) else inside
        looked_up = operator.itemgetter(*in_flags)(flags) if len(in_flags) > 1 else tuple(flags[t] for t in in_flags)
        if 0 in looked_up:
            unmarked = [(d, t) for d, t in enumerate(targets) if 0 <= t < len(flags) and not flags[t]]
            d, t = unmarked[0]
            problems.append(_err("%s is false at %s target ids that %s maps to (draft id %d -> target id %d)"
                                 % (t2d_name, _d(len(unmarked)), name, d, t)))
        elif kept > len(distinct):
            stray = next(i for i, flag in enumerate(flags) if flag and i not in distinct)
            problems.append(_err("%s is true at target id %d, which no draft id maps to" % (t2d_name, stray)))
    return hashlib.sha256(d2t_raw + b"|" + t2d_raw).hexdigest()
