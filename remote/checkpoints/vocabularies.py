"""Whether two target models share a tokenizer (the same strings under the same ids), read from
their tokenizer files with the standard library: tokenizer.json (a `tokenizers` model's vocab
and added tokens), tiktoken.model (base64 token and rank a line, as Kimi's models ship) with
tokenizer_config.json's added tokens, or vocab.json. A drafter's d2t holds target ids of the
target it was trained for: under another tokenizer those ids name other strings, and the
drafter proposes tokens the new target never meant.
"""

import base64
import json
import os

from ..core.regular_files import open_regular


def _directory(path):
    path = os.path.expanduser(path)
    return path if os.path.isdir(path) else os.path.dirname(path)


def _load(path):
    with open_regular(path) as f:
        return json.loads(f.read().decode("utf-8"))


def read_vocabulary(path):
    """({token string: id}, the file it came from) of the tokenizer in a model directory, or
    (None, None) when there is none we can read. tiktoken tokens are bytes, kept as their
    base64 text (the same bytes give the same key in both models)."""
    directory = _directory(path)
    vocabulary, source = None, None
    candidate = os.path.join(directory, "tokenizer.json")
    if os.path.isfile(candidate):
        data = _load(candidate)
        vocab = (data.get("model") or {}).get("vocab")
        if isinstance(vocab, list):  # unigram models list [piece, score] in id order
            vocab = dict((entry[0], index) for index, entry in enumerate(vocab))
        if isinstance(vocab, dict):
            vocabulary, source = dict(vocab), candidate
            for token in data.get("added_tokens") or []:
                vocabulary[token["content"]] = token["id"]
    if vocabulary is None:
        candidate = os.path.join(directory, "tiktoken.model")
        if os.path.isfile(candidate):
            vocabulary, source = {}, candidate
            with open_regular(candidate) as f:
                for line in f:
                    parts = line.split()
                    if len(parts) == 2:
                        vocabulary[parts[0].decode("ascii")] = int(parts[1])
    if vocabulary is None:
        candidate = os.path.join(directory, "vocab.json")
        if os.path.isfile(candidate):
            vocabulary, source = dict(_load(candidate)), candidate
    if vocabulary is not None:
        config = os.path.join(directory, "tokenizer_config.json")
        if os.path.isfile(config):
            for token_id, entry in (_load(config).get("added_tokens_decoder") or {}).items():
                if isinstance(entry, dict) and "content" in entry and str(token_id).isdigit():
                    vocabulary[entry["content"]] = int(token_id)
    return vocabulary, source


def _text(token):
    """A tiktoken key (base64 of the bytes) shown as the bytes it stands for, where it decodes."""
    try:
        raw = base64.b64decode(token, validate=True)
        return raw.decode("utf-8")
    except (ValueError, UnicodeDecodeError):
        return token


def compare(old_path, new_path, draft_target_ids=None):
    """Whether the tokenizers of two model directories agree: `{same, old, new: {path, file,
    size}, same_id, other_id, only_old, only_new, examples: [{text, old_id, new_id}],
    draft_ids_changed, draft_vocab_size, message}`. With the drafter's target ids (its d2t
    applied), `draft_ids_changed` counts those that name another string (or none) in the new
    tokenizer. `same` is None when a side has no tokenizer we can read."""
    old, old_file = read_vocabulary(old_path)
    new, new_file = read_vocabulary(new_path)
    result = {"old": {"path": old_path, "file": old_file, "size": len(old) if old is not None else None},
              "new": {"path": new_path, "file": new_file, "size": len(new) if new is not None else None},
              "same": None, "same_id": None, "other_id": None, "only_old": None, "only_new": None, "examples": [],
              "draft_ids_changed": None, "draft_vocab_size": len(draft_target_ids) if draft_target_ids is not None else None}
    if old is None or new is None:
        missing = [path for path, vocab in ((old_path, old), (new_path, new)) if vocab is None]
        result["message"] = "tokenizers not compared: no tokenizer.json, tiktoken.model or vocab.json in %s" % " or ".join(missing)
        return result
    same_id = other_id = 0
    examples = []
    for text, old_id in old.items():
        new_id = new.get(text)
        if new_id == old_id:
            same_id += 1
        elif new_id is not None:
            other_id += 1
            if len(examples) < 5:
                examples.append({"text": _text(text), "old_id": old_id, "new_id": new_id})
    only_old = sum(1 for text in old if text not in new)
    only_new = sum(1 for text in new if text not in old)
    same = other_id == 0 and only_old == 0 and only_new == 0
    result.update(same=same, same_id=same_id, other_id=other_id, only_old=only_old, only_new=only_new, examples=examples)
    if draft_target_ids is not None:
        old_by_id = dict((token_id, text) for text, token_id in old.items())
        new_by_id = dict((token_id, text) for text, token_id in new.items())
        result["draft_ids_changed"] = sum(1 for token_id in draft_target_ids if old_by_id.get(token_id) != new_by_id.get(token_id))
    if same:
        result["message"] = "the targets share a tokenizer: %d tokens, the same ids for the same strings" % len(old)
    else:
        result["message"] = ("the targets' tokenizers differ: %d of %d tokens keep their id, %d have another, %d only in the old, %d only in the new"
                             % (same_id, len(old), other_id, only_old, only_new))
        if result["draft_ids_changed"] is not None:
            result["message"] += ("; the drafter's d2t maps %d of its %d draft tokens to ids that name another string in the new target"
                                  " (run coverage on the new target to see what that costs)" % (result["draft_ids_changed"], len(draft_target_ids)))
    return result
