"""Draft-vocabulary coverage: an EAGLE-3 drafter proposes only tokens of its own vocabulary (the
target ids its d2t maps to: `target = draft + d2t[draft]`), so a target token outside it is
never accepted, however good the drafter. The share of a text's target tokens inside the draft
vocabulary bounds acceptance at every position, and a chain that must stop at the first token
outside it bounds the accept length at each K. This module is the arithmetic and the drafter's
side (standard library only); coverage_job.py tokenizes under the host's ML interpreter.
"""

import hashlib
import os

from .collect import collect
from .formats import EAGLE_FORMATS, canonical_names
from .vocab_maps import read_ints

TOP_MISSING = 20
BOUND_KS = (1, 2, 3, 4, 5, 6, 7, 8)


def vocab_map_tensors(drafter):
    """(d2t, t2d) of a drafter's files, as collect's tensor dicts (None for one it lacks)."""
    got = collect(drafter)
    names = list(got.columns.names)
    canon = canonical_names(names, got.format) if got.format in EAGLE_FORMATS else dict((n, n) for n in names)
    by_canon = dict((canon[name], got.tensor_dict(i)) for i, name in enumerate(names) if name in canon)
    return by_canon.get("d2t"), by_canon.get("t2d")


def draft_offsets(drafter):
    """The drafter's d2t offsets (`target = draft + d2t[draft]`), or None when it has no d2t;
    ValueError when its d2t cannot be read."""
    return _offsets(drafter, vocab_map_tensors(drafter)[0])


def _offsets(drafter, d2t):
    if d2t is None:
        return None
    read = read_ints(d2t)
    if read is None:
        raise ValueError("%s's d2t (dtype %s) could not be read" % (drafter, d2t["dtype"]))
    return read[1]


def draft_vocabulary(drafter):
    """(the set of target ids the drafter can propose, or None for every id; a dict saying
    from what: `{source: d2t|t2d|full, draft_vocab_size, target_vocab_size}`). A drafter with
    neither d2t nor t2d drafts over the whole target vocabulary."""
    d2t, t2d = vocab_map_tensors(drafter)
    target_vocab = t2d["shape"][0] if t2d and t2d.get("shape") else None
    if d2t is not None:
        offsets = _offsets(drafter, d2t)
        ids = set(draft + offset for draft, offset in enumerate(offsets))
        return ids, {"source": "d2t", "draft_vocab_size": len(offsets), "target_vocab_size": target_vocab}
    if t2d is not None:
        read = read_ints(t2d)
        if read is None:
            raise ValueError("%s's t2d (dtype %s) could not be read" % (drafter, t2d["dtype"]))
        flags = read[1]
        ids = set(i for i, flag in enumerate(flags) if flag)
        return ids, {"source": "t2d", "draft_vocab_size": len(ids), "target_vocab_size": len(flags)}
    return None, {"source": "full", "draft_vocab_size": None, "target_vocab_size": None}


def chain_bound(sequences, inside, ks=BOUND_KS):
    """The accept length at each K of a drafter that is right whenever the target's next token
    is in its vocabulary, on these token sequences (of in-vocabulary flags): each cycle accepts
    the drafts up to the first token outside (at most K) and the target adds one, so a cycle
    yields the run of inside tokens from where it starts, capped at K, plus one. `[{k,
    accept_length}]`."""
    runs = []
    for flags in sequences:
        # The run of inside tokens starting at each position, counted once from the end: each K
        # then steps from cycle to cycle, not token by token.
        run, length = [0] * (len(flags) + 1), len(flags)
        for position in range(length - 1, -1, -1):
            if flags[position]:
                run[position] = run[position + 1] + 1
        runs.append((run, length))
    result = []
    for k in ks:
        tokens = cycles = 0
        for run, length in runs:
            position = 0
            while position < length:
                accepted = min(run[position], k)
                tokens += min(accepted + 1, length - position)  # the text's end cuts the last cycle
                position += accepted + 1
                cycles += 1
        result.append({"k": k, "accept_length": tokens / cycles if cycles else None})
    return result


def summarize(sequences, inside, decode, info, top=TOP_MISSING):
    """The coverage of token `sequences` (lists of target ids) by the draft vocabulary `inside`
    (None: every id): `{coverage, tokens, inside, outside, distinct_missing, top_missing:
    [{id, text, count, share}], bound: [{k, accept_length}], full_vocabulary, source,
    draft_vocab_size, target_vocab_size, note}`; `decode(id)` gives a token's text."""
    total = sum(len(sequence) for sequence in sequences)
    if inside is None:
        return {"coverage": 1.0, "tokens": total, "inside": total, "outside": 0, "distinct_missing": 0, "top_missing": [],
                "bound": [{"k": k, "accept_length": float(k + 1)} for k in BOUND_KS], "full_vocabulary": True,
                "source": "full", "draft_vocab_size": None, "target_vocab_size": None,
                "note": "the drafter has no d2t/t2d: it drafts over the target's whole vocabulary, so coverage is 1 by construction"}
    flags = [[token in inside for token in sequence] for sequence in sequences]
    missing = {}
    for sequence, sequence_flags in zip(sequences, flags):
        for token, flag in zip(sequence, sequence_flags):
            if not flag:
                missing[token] = missing.get(token, 0) + 1
    outside = sum(missing.values())
    ranked = sorted(missing.items(), key=lambda item: (-item[1], item[0]))[:top]
    return {
        "coverage": (total - outside) / total if total else None, "tokens": total, "inside": total - outside, "outside": outside,
        "distinct_missing": len(missing),
        "top_missing": [{"id": token, "text": decode(token), "count": count, "share": count / total} for token, count in ranked],
        "bound": chain_bound(flags, inside), "full_vocabulary": False, "source": info["source"],
        "draft_vocab_size": info["draft_vocab_size"], "target_vocab_size": info["target_vocab_size"],
        "note": "a target token outside the draft vocabulary is never accepted: the bound is a drafter right whenever it can be",
    }


def result_path(state_dir, drafter):
    """Where the last coverage of a drafter is kept on the host (one file per drafter path)."""
    key = hashlib.sha256(os.path.abspath(drafter).encode()).hexdigest()[:16]
    return os.path.join(state_dir, "coverage", "%s.json" % key)
