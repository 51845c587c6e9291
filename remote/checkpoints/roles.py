"""What each tensor does, in words, and name patterns for checkpoints with very many tensors.

role() words one tensor from its speculators-layout name (a drafter's roles name the sizes
they map between; a plain model's say which layer and expert). A 64-shard MoE target has
100,000+ tensors but only a few dozen name shapes (`model.layers.{N}.mlp.experts.{E}.down_proj.weight`).
The role of a tensor depends on its shape of name, the numbers in it and (for a drafter's
first layer) whether a number is 0, so RoleNamer words it once per shape and fills the numbers
in after. Standard library only.
"""

import re
from operator import itemgetter


# ---------------------------------------------------------------------------------------------
# One tensor's role


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
        return hf_role(canonical)
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


def hf_role(name):
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


# ---------------------------------------------------------------------------------------------
# Name patterns, and roles worded once per pattern


# A dot-separated part that is all digits: a layer, an expert, a block index.
_NUMBER = re.compile(r"(?<![^.])\d+(?![^.])")
# Placeholders a pattern shows for the number after these parts; others are {I}, {J}, ...
_PLACEHOLDER_AFTER = {"layers": "N", "layer": "N", "h": "N", "blocks": "N", "block": "N",
                      "experts": "E", "expert": "E"}
_OTHER_PLACEHOLDERS = "IJKLM"
# Stand-ins for the numbers while a role is worded: no dimension or count is ever this.
_SENTINEL = 987654321000


def name_pattern(name):
    """`model.layers.{N}.mlp.experts.{E}.w1.weight` for `model.layers.3.mlp.experts.17.w1.weight`."""
    return pattern_text(_NUMBER.sub("{#}", name))


_PATTERN_TEXT = {}


def pattern_text(marked):
    """A name with its numbers marked `{#}`, the marks named by what precedes them."""
    text = _PATTERN_TEXT.get(marked)
    if text is not None:
        return text
    parts = marked.split(".")
    others = iter(_OTHER_PLACEHOLDERS)
    used = set()
    for i, part in enumerate(parts):
        if part != "{#}":
            continue
        letter = _PLACEHOLDER_AFTER.get(parts[i - 1]) if i else None
        if letter is None or letter in used:
            letter = next(others, "X")
        used.add(letter)
        parts[i] = "{%s}" % letter
    text = ".".join(parts)
    if len(_PATTERN_TEXT) < 100000:  # bounded: a checkpoint of random names must not grow it forever
        _PATTERN_TEXT[marked] = text
    return text


# marked_numbers("{#}", name): the name with its numbers marked, and nothing else (for grouping).
marked_numbers = _NUMBER.sub
# The same marks over many names at once: each name joined after "\n.", so that a number part
# always follows a dot and ends at a dot, a newline or the end.
_NUMBER_AFTER_DOT = re.compile(r"\.\d+(?![^.\n])")
_WITHOUT_FIRST = itemgetter(slice(1, None))


def marked_names(names):
    """[marked_numbers("{#}", name) for name in names], in one regular-expression pass."""
    text = "." + "\n.".join(names)
    if text.count("\n") != len(names) - 1:  # a name of its own holds a newline
        return [marked_numbers("{#}", name) for name in names]
    return list(map(_WITHOUT_FIRST, _NUMBER_AFTER_DOT.sub(".{#}", text).split("\n")))


# Digits written "#" in one pass over bytes: names that differ only in their digits share a key.
_DIGITS_AS_MARKS = bytes.maketrans(b"0123456789", b"#" * 10)
_MARKS_AFTER_DOT = re.compile(r"\.#+(?![^.\n])")
_MARKED_OF_KEY = {}


def digit_keys(names):
    """Each name with every digit written "#", in a few passes over bytes, or None when a name is
    not ASCII or holds a "#" or a newline (then marked_names). Names of one key have one
    marked_numbers pattern when every run of marks is a whole number part (marked_of_key)."""
    text = "\n".join(names)
    if not text.isascii() or "#" in text or text.count("\n") != len(names) - 1:
        return None
    return text.encode("ascii").translate(_DIGITS_AS_MARKS).decode("ascii").split("\n")


def marked_of_key(key):
    """The marked_numbers pattern every name of a digit key has, or None when a digit of theirs
    is part of a word ("w1", "fp8": each name is marked on its own)."""
    marked = _MARKED_OF_KEY.get(key)
    if marked is None:
        marked = _MARKS_AFTER_DOT.sub(".{#}", "." + key)[1:]
        if "#" in marked.replace("{#}", ""):
            marked = False
        if len(_MARKED_OF_KEY) < 100000:  # bounded, as _PATTERN_TEXT
            _MARKED_OF_KEY[key] = marked
    return marked or None


def marked_per_name(names):
    """marked_names(names), through digit keys where every key has one pattern."""
    keys = digit_keys(names)
    if keys is not None:
        marks = dict((key, marked_of_key(key)) for key in dict.fromkeys(keys))
        if None not in marks.values():
            return list(map(marks.__getitem__, keys))
    return marked_names(names)


def marked_name(name):
    """(the name with its numbers marked `{#}`, the numbers as written)."""
    return _NUMBER.sub("{#}", name), _NUMBER.findall(name)


class RoleNamer(object):
    """eagle3.role() for every tensor of one checkpoint, worded once per shape of name.

    `canonical` maps a name to its speculators-layout name where they differ (drafters).
    vLLM-native drafters renumber layers, so their roles are worded one by one (they have a
    dozen tensors).
    """

    def __init__(self, fmt, dims, canonical=None):
        self.format = fmt
        self.dims = dims
        self.canonical = canonical or {}
        self.templates = {}

    def direct(self, name):
        return role(self.canonical.get(name, name), self.format, self.dims)

    def role(self, name):
        if "{" in name:
            return self.direct(name)  # braces of its own would confuse the templates
        marked, numbers = marked_name(name)
        if not numbers:
            key = (marked, ())
            text = self.templates.get(key)
            if text is None:
                text = self.templates[key] = self.direct(name)
            return text
        if self.format == "vllm" or any(n[0] == "0" and len(n) > 1 for n in numbers):
            return self.direct(name)  # renumbered layers, or "01": worded as is
        zeros = tuple(n == "0" for n in numbers)
        key = (marked, zeros)
        template = self.templates.get(key)
        if template is None:
            template = self.templates[key] = self._template(marked, zeros)
        return template.format(*numbers)

    def _template(self, marked, zeros):
        """The role of names shaped `marked` as a format string with a field per number."""
        probe_numbers = ["0" if zero else str(_SENTINEL + i) for i, zero in enumerate(zeros)]
        pieces = marked.split("{#}")
        probe = pieces[0] + "".join(n + piece for n, piece in zip(probe_numbers, pieces[1:]))
        text = self.direct(probe).replace("{", "{{").replace("}", "}}")
        for i, zero in enumerate(zeros):
            if not zero:
                text = text.replace(str(_SENTINEL + i), "{%d}" % i)
        return text

    def pattern_role(self, marked):
        """The role of a whole name pattern, numbers shown as the pattern's placeholders."""
        count = marked.count("{#}")
        if not count:
            return self.role(marked)
        if self.format == "vllm":
            return ""
        zeros = (False,) * count
        key = (marked, zeros)
        template = self.templates.get(key)
        if template is None:
            template = self.templates[key] = self._template(marked, zeros)
        placeholders = re.findall(r"\{[A-Z]\}", pattern_text(marked))
        return template.format(*placeholders)
