"""Tensor roles and name patterns for checkpoints with very many tensors.

A 64-shard MoE target has 100,000+ tensors but only a few dozen name shapes
(`model.layers.{N}.mlp.experts.{E}.down_proj.weight`). The role of a tensor depends on its
shape of name, the numbers in it and (for a drafter's first layer) whether a number is 0, so
it is worded once per shape and the numbers are filled in after. Standard library only.
"""

import re

from .eagle3 import role

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
