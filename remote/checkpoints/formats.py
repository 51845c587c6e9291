"""Which tool wrote a checkpoint (SpecForge, speculators, the original EAGLE, vLLM, a plain
Hugging Face model), read from its tensor names and config.json, and the name each tensor has
in the speculators layout so that layouts can be matched by role.

Works on names, shapes and config dicts only. Standard library only, Python 3.9+.
"""

import re
from bisect import bisect_left
from itertools import repeat

FORMATS = ("specforge", "speculators", "eagle", "vllm", "hf", "unknown")
FORMAT_DESCRIPTIONS = {
    "specforge": "SpecForge / SGLang EAGLE-3 drafter (LlamaForCausalLMEagle3, midlayer.*)",
    "speculators": "speculators EAGLE-3 drafter (speculators_config, layers.0.*)",
    "eagle": "original EAGLE drafter (SafeAILab layout)",
    "vllm": "vLLM-native EAGLE-3 names (model.*, draft_id_to_target_id)",
    "hf": "plain Hugging Face model (not a drafter)",
    "unknown": "layout not recognised",
}
# The formats whose tensors are an EAGLE drafter's.
EAGLE_FORMATS = ("specforge", "speculators", "eagle", "vllm")


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


def int_field(config, key):
    """config[key] when it is an integer (not a bool), else None."""
    value = config.get(key)
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _architectures(config):
    archs = config.get("architectures") if isinstance(config, dict) else None
    return [a for a in archs if isinstance(a, str)] if isinstance(archs, list) else []


def is_eagle12(shapes):
    """Whether {name: shape} is an EAGLE-1/2 drafter: fc fuses 2 x hidden, no d2t, no midlayer."""
    fc = shapes.get("fc.weight")
    return (fc is not None and len(fc) == 2 and fc[1] == 2 * fc[0] and "d2t" not in shapes
            and not any(n.startswith("midlayer.") for n in shapes))


def _any_starts(names, prefix):
    # Names that know their order answer by bisection; else a map over a C method.
    any_starts = getattr(names, "any_starts", None)
    if any_starts is not None:
        return any_starts(prefix)
    return any(map(str.startswith, names, repeat(prefix)))


# What detect_format asks of the names, every one: the names it looks for, the prefixes, and the
# part of a name it looks inside them for. decisive_names keeps one witness of each.
_ASKED_NAMES = ("model.fc.weight", "draft_id_to_target_id", "fc.weight", "d2t")
_HF_PREFIXES = ("model.layers.", "model.embed_tokens.", "transformer.", "model.decoder.")
_ASKED_PREFIXES = ("midlayer.", "layers.") + _HF_PREFIXES
_HIDDEN_NORM = ".hidden_norm."


def decisive_names(sorted_names):
    """The names of a sorted list that detect_format's answer over all of them depends on: each
    name it looks for, the first name of each prefix it looks for, the first holding a hidden
    norm (and the first of those under model.layers.), and at least one name. detect_format over
    only these (with their shapes) answers as it does over every name."""
    found = [name for name in _ASKED_NAMES if _in_sorted(sorted_names, name)]
    for prefix in _ASKED_PREFIXES:
        at = bisect_left(sorted_names, prefix)
        if at < len(sorted_names) and sorted_names[at].startswith(prefix):
            found.append(sorted_names[at])
    if _HIDDEN_NORM in "\n".join(sorted_names):  # one search rather than one call a name
        hidden = [name for name in sorted_names if _HIDDEN_NORM in name]
        found += hidden[:1] + [name for name in hidden if name.startswith("model.layers.")][:1]
    if not found and sorted_names:
        found.append(sorted_names[0])
    return list(dict.fromkeys(found))


def _in_sorted(sorted_names, name):
    at = bisect_left(sorted_names, name)
    return at < len(sorted_names) and sorted_names[at] == name


def detect_format(shapes, config):
    """One of FORMATS, from tensor names (a dict of name -> shape) and config.json (dict or None)."""
    names = shapes
    config = config if isinstance(config, dict) else {}
    archs = _architectures(config)
    if any(k in config for k in ("speculators_config", "speculators_model_type", "transformer_layer_config")):
        return "speculators"
    if _any_starts(names, "midlayer."):
        # The original EAGLE-3 repository writes the same names but a plain LlamaForCausalLM config.
        if archs and not any("eagle" in a.lower() for a in archs):
            return "eagle"
        return "specforge"
    eagle_marks = ("model.fc.weight" in names or "draft_id_to_target_id" in names
                   or (any(map(str.__contains__, names, repeat(_HIDDEN_NORM)))
                       and any(n.startswith("model.layers.") and _HIDDEN_NORM in n for n in names)))
    if eagle_marks:
        return "vllm"
    if "fc.weight" in names and _any_starts(names, "layers."):
        return "eagle" if is_eagle12(shapes) else "speculators"
    if _any_starts(names, _HF_PREFIXES) \
            or (archs and len(names)):
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
    if fmt not in ("specforge", "eagle"):
        return dict(zip(names, names))  # a target's 100,000+ names keep theirs
    for name in names:
        if name.startswith("midlayer."):
            mapping[name] = "layers.0." + name[len("midlayer."):]
        else:
            mapping[name] = name
    return mapping


def is_eagle3_layout(fmt, shapes):
    """Whether a checkpoint of format `fmt` is laid out as an EAGLE-3 drafter."""
    if fmt in ("specforge", "speculators", "vllm"):
        return True
    return fmt == "eagle" and not is_eagle12(shapes)


def layout_name(canonical, fmt):
    """A speculators-layout name as the checkpoint's own layout would spell it."""
    if fmt in ("specforge", "eagle") and canonical.startswith("layers.0."):
        return "midlayer." + canonical[len("layers.0."):]
    return canonical
