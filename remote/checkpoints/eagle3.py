"""EAGLE-3 drafters' dimensions and shape relations: the sizes read off the tensors and
config.json (hidden, target hidden, draft and target vocabularies, heads), the checks between
them, and how the loader will apply hidden_norm.

Works on {canonical name: shape} dicts and config dicts only; formats.py finds the layout and
canonical names first. Standard library only, Python 3.9+.
"""

from .formats import effective_config, int_field, layout_name
from .problems import dim_text, err, shape_text, warn


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


def derive_eagle3(canon, config, problems):
    """The eagle3 report section, checking config.json against the tensors."""
    eff = effective_config(config)
    found = _dims_from_tensors(canon)
    sources = {"hidden_size": "fc.weight / norm.weight", "draft_vocab_size": "lm_head.weight rows / d2t",
               "target_vocab_size": "t2d length / embed_tokens.weight rows",
               "intermediate_size": "the MLP projections", "target_hidden_size": "fc.weight inputs / 3"}
    result = {}
    for key in ("hidden_size", "target_hidden_size", "draft_vocab_size", "target_vocab_size", "intermediate_size"):
        config_key = "vocab_size" if key == "target_vocab_size" else key
        from_config = int_field(eff, config_key)
        if found[key] is not None:
            result[key] = found[key]
            if from_config is not None and from_config != found[key]:
                problems.append(err("config.json says %s %s but the tensors (%s) say %s"
                                     % (config_key, dim_text(from_config), sources[key], dim_text(found[key]))))
        else:
            result[key] = from_config
    if result["target_hidden_size"] is None and found["fc_inputs"] is None:
        result["target_hidden_size"] = result["hidden_size"]  # absent means equal to hidden_size
    heads = int_field(eff, "num_attention_heads")
    kv_heads = int_field(eff, "num_key_value_heads") or heads
    head_dim = int_field(eff, "head_dim")
    if head_dim is None and heads and result["hidden_size"]:
        head_dim = result["hidden_size"] // heads  # the HF Llama default
    standard = _attention_kind(canon) == "standard"
    if standard and heads and head_dim and found["q_rows"] is not None and heads * head_dim != found["q_rows"]:
        problems.append(err("config.json says %d heads x %d = %s, but layer 0's q_proj has %s rows"
                             % (heads, head_dim, dim_text(heads * head_dim), dim_text(found["q_rows"]))))
    if standard and kv_heads and head_dim and found["k_rows"] is not None and kv_heads * head_dim != found["k_rows"]:
        problems.append(err("config.json says %d kv heads x %d = %s, but layer 0's k_proj has %s rows"
                             % (kv_heads, head_dim, dim_text(kv_heads * head_dim), dim_text(found["k_rows"]))))
    result["num_attention_heads"] = heads
    result["num_key_value_heads"] = kv_heads
    result["head_dim"] = head_dim
    result["aux_layer_ids"] = aux_layer_ids_from_config(config)
    if config and "draft_vocab_size" not in eff and result["draft_vocab_size"] and result["target_vocab_size"] \
            and result["draft_vocab_size"] != result["target_vocab_size"]:
        problems.append(warn("config.json has no draft_vocab_size: vLLM would assume the target's %s and fail to "
                              "load lm_head.weight with %s rows"
                              % (dim_text(result["target_vocab_size"]), dim_text(result["draft_vocab_size"]))))
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
        problems.append(err("%s has shape %s, expected %s: %s" % (name, shape_text(shape), shape_text(expected), why)))


def check_eagle3_shapes(canon, display, dims, problems, fmt=None):
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
            problems.append(err("an EAGLE-3 drafter needs %s, this checkpoint has none" % display.get(name, layout_name(name, fmt))))
    fc = shape("fc.weight")
    if fc is not None and (len(fc) != 2 or fc[1] % 3):
        problems.append(err("%s has shape %s: EAGLE-3's fc fuses three auxiliary hidden states of the target, "
                             "so its inputs must be 3 x the target hidden size" % (show("fc.weight"), shape_text(fc))))
    if h is None:
        return
    for norm in ("norm.weight", "layers.0.hidden_norm.weight", "layers.0.input_layernorm.weight",
                 "layers.0.post_attention_layernorm.weight"):
        _expect(problems, show(norm), shape(norm), [h], "an RMSNorm over the hidden size %s" % dim_text(h))
    for proj in ("q_proj", "k_proj", "v_proj", "qkv_proj", "q_a_proj", "kv_a_proj_with_mqa"):
        name = "layers.0.self_attn.%s.weight" % proj
        s = shape(name)
        if s is not None and (len(s) != 2 or s[1] != 2 * h):
            problems.append(err("%s has shape %s: an EAGLE-3 first layer's %s takes embedding + hidden = "
                                 "2 x %s = %s inputs" % (show(name), shape_text(s), proj, dim_text(h), dim_text(2 * h))))
    q = shape("layers.0.self_attn.q_proj.weight")
    o = shape("layers.0.self_attn.o_proj.weight")
    if o is not None and q is not None and len(q) == 2 and attention == "standard":
        _expect(problems, show("layers.0.self_attn.o_proj.weight"), o, [h, q[0]],
                "o_proj maps the %s attention outputs back to the hidden size %s" % (dim_text(q[0]), dim_text(h)))
    k = shape("layers.0.self_attn.k_proj.weight")
    v = shape("layers.0.self_attn.v_proj.weight")
    if k is not None and v is not None and list(k) != list(v):
        problems.append(err("%s %s and %s %s differ: keys and values have the same heads"
                             % (show("layers.0.self_attn.k_proj.weight"), shape_text(k),
                                show("layers.0.self_attn.v_proj.weight"), shape_text(v))))
    if inter is not None:
        _expect(problems, show("layers.0.mlp.gate_proj.weight"), shape("layers.0.mlp.gate_proj.weight"), [inter, h],
                "the MLP gate maps hidden %s to intermediate %s" % (dim_text(h), dim_text(inter)))
        _expect(problems, show("layers.0.mlp.up_proj.weight"), shape("layers.0.mlp.up_proj.weight"), [inter, h],
                "the MLP up projection maps hidden %s to intermediate %s" % (dim_text(h), dim_text(inter)))
        _expect(problems, show("layers.0.mlp.down_proj.weight"), shape("layers.0.mlp.down_proj.weight"), [h, inter],
                "the MLP down projection maps intermediate %s back to hidden %s" % (dim_text(inter), dim_text(h)))
    if fc is not None and th is not None and len(fc) == 2:
        _expect(problems, show("fc.weight"), fc, [h, 3 * th],
                "fc fuses 3 target hidden states of %s into the hidden size %s" % (dim_text(th), dim_text(h)))
    lm_head = shape("lm_head.weight")
    if lm_head is not None and dv is not None:
        _expect(problems, show("lm_head.weight"), lm_head, [dv, h],
                "the draft LM head maps hidden %s to the %s-token draft vocabulary" % (dim_text(h), dim_text(dv)))
    d2t = shape("d2t")
    if d2t is not None and lm_head is not None and len(lm_head) == 2:
        _expect(problems, show("d2t"), d2t, [lm_head[0]],
                "d2t has one offset per draft token, and lm_head.weight has %s rows" % dim_text(lm_head[0]))
    t2d = shape("t2d")
    if t2d is not None and len(t2d) != 1:
        problems.append(err("%s has shape %s: t2d is one flag per target token" % (show("t2d"), shape_text(t2d))))
    embed = shape("embed_tokens.weight")
    if embed is not None and tv is not None:
        _expect(problems, show("embed_tokens.weight"), embed, [tv, h],
                "embed_tokens embeds the %s target token ids at the hidden size %s" % (dim_text(tv), dim_text(h)))
    norm_fc = shape("input_norm.weight")
    if norm_fc is not None and th is not None:
        _expect(problems, show("input_norm.weight"), norm_fc, [3 * th], "it normalises fc's 3 x %s inputs" % dim_text(th))
    if dv is not None and tv is not None and dv < tv and d2t is None:
        problems.append(err("no d2t: the %s draft-vocabulary logits cannot be mapped to the %s target ids"
                             % (dim_text(dv), dim_text(tv))))
    if dv is not None and tv is not None and dv > tv:
        problems.append(err("the draft vocabulary (%s) is larger than the target vocabulary (%s)" % (dim_text(dv), dim_text(tv))))


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
