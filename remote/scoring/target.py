"""The three tensors of the target the scorer reads, and nothing else of it: embed_tokens (the
drafter's input embeddings when it has none), the final norm and lm_head (the target's own
greedy choice from its last-layer state), found by name through the shard index. Standard
library only.
"""

import os

from ..checkpoints import formats
from . import tensors
from .drafter import Refused, read_config

# Where text models and the language part of multimodal ones keep them.
PREFIXES = ("model.", "model.language_model.", "language_model.model.", "")
HEAD_NAMES = ("lm_head.weight", "language_model.lm_head.weight", "model.lm_head.weight")


def read(path):
    """The target at `path`: its sizes and the spans of its three tensors. Raises Refused."""
    what = "target %s" % path
    if not os.path.isdir(path):
        raise Refused("%s is not a directory" % what)
    config = read_config(path, what)
    if config is None:
        raise Refused("%s has no config.json" % what)
    text = config.get("text_config") if isinstance(config.get("text_config"), dict) else config
    layers = formats.int_field(text, "num_hidden_layers")
    hidden = formats.int_field(text, "hidden_size")
    if layers is None or hidden is None:
        raise Refused("%s: config.json names no num_hidden_layers or hidden_size" % what)
    embed_names = [p + "embed_tokens.weight" for p in PREFIXES]
    norm_names = [p + "norm.weight" for p in PREFIXES]
    try:
        spans = tensors.locate_tensors(path, embed_names + norm_names + list(HEAD_NAMES))
    except tensors.TensorsError as exc:
        raise Refused("%s: %s" % (what, exc))
    embed = next((spans[n] for n in embed_names if n in spans), None)
    norm = next((spans[n] for n in norm_names if n in spans), None)
    head = next((spans[n] for n in HEAD_NAMES if n in spans), None)
    tied = bool(text.get("tie_word_embeddings", config.get("tie_word_embeddings")))
    if head is None and (tied or embed is not None and not any(n in spans for n in HEAD_NAMES)):
        head = embed  # tied: lm_head is the embedding matrix
    for name, span in (("embed_tokens", embed), ("the final norm", norm), ("lm_head", head)):
        if span is None:
            raise Refused("%s has no %s among its tensors" % (what, name))
    vocab = head.shape[0]
    if head.shape[1] != hidden or norm.shape[0] != hidden or embed.shape[1] != hidden:
        raise Refused("%s: lm_head %s, norm %s or embed_tokens %s do not match its hidden size %d"
                      % (what, list(head.shape), list(norm.shape), list(embed.shape), hidden))
    return {"path": path, "num_hidden_layers": layers, "hidden_size": hidden, "vocab_size": vocab,
            "rms_norm_eps": float(text.get("rms_norm_eps") or 1e-6), "spans": {"embed": embed._asdict(), "norm": norm._asdict(),
                                                                              "lm_head": head._asdict()},
            "tensor_bytes": embed.nbytes + norm.nbytes + (0 if head is embed else head.nbytes),
            "revision": _revision(path)}


def _revision(path):
    """The hub revision a downloaded target came from, where its directory says (a commit hash in
    a hub cache path, or a .metadata file), else None."""
    parts = os.path.normpath(path).split(os.sep)
    if "snapshots" in parts[:-1]:
        return parts[parts.index("snapshots") + 1]
    return None
