"""d2t / t2d, an EAGLE-3 drafter's vocabulary maps, read for real (kilobytes) and checked against
each other: every draft id lands on a target id inside the vocabulary that t2d marks, and t2d
marks no other. Standard library only, Python 3.9+.
"""

import operator
import struct

from ..core.regular_files import open_regular
from .dtypes import INT_FORMATS
from .header_json import read_exact
from .problems import dim_text, err, warn

# d2t / t2d are read for the vocabulary check only when they are at most this large.
MAX_VOCAB_MAP_BYTES = 64 * 1024 * 1024


def read_ints(tensor):
    """(raw bytes, values) of a small 1-D integer/bool tensor, or None when it cannot be read.

    One-byte kinds come back as the bytes themselves (indexing them gives ints).
    """
    code = INT_FORMATS.get(tensor["dtype"])
    if code is None or tensor["bytes"] is None or tensor["bytes"] > MAX_VOCAB_MAP_BYTES:
        return None
    try:
        with open_regular(tensor["file"]) as f:
            f.seek(tensor["data_start"] + tensor["begin"])
            raw = read_exact(f, tensor["bytes"])
    except OSError:
        return None
    if len(raw) != tensor["bytes"]:
        return None
    if code == "B":
        return raw, raw
    return raw, struct.unpack("<%d%s" % (len(raw) // struct.calcsize(code), code), raw)


def check_vocab_maps(d2t, t2d, dims, display, problems):
    """Checks target = draft + d2t[draft] lands on exactly the ids t2d marks; returns a digest.

    The common case (all is well) runs on C-level builtins only: a 163,840-entry t2d and a
    32,000-entry d2t check in a few milliseconds. Details are worked out only for a failure.
    """
    d2t_read = read_ints(d2t) if d2t else None
    if d2t and d2t["dtype"] not in INT_FORMATS:
        problems.append(warn("%s has dtype %s; expected integer offsets (I64)" % (display["d2t"], d2t["dtype"])))
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
        problems.append(err("%s maps %s draft ids outside the target vocabulary of %s (draft id %d -> target id %d)"
                             % (name, dim_text(len(outside)), dim_text(tv), d, t)))
    distinct = set(targets)
    if len(distinct) != len(targets):
        seen = {}
        for draft, target in enumerate(targets):
            if target in seen:
                problems.append(err("%s maps draft ids %d and %d to the same target id %d"
                                     % (name, seen[target], draft, target)))
                break
            seen[target] = draft
    t2d_raw = b""
    t2d_read = read_ints(t2d) if t2d else None
    if t2d is None:
        problems.append(warn("d2t without t2d: the vocabulary maps could not be checked against each other"))
    elif t2d_read is None:
        problems.append(warn("%s (dtype %s) could not be read; the vocabulary maps were not checked"
                              % (display["t2d"], t2d["dtype"])))
    else:
        t2d_raw, flags = t2d_read
        t2d_name = display["t2d"]
        kept = len(flags) - flags.count(0)
        if kept != len(targets):
            problems.append(err("%s has %s true entries, but the draft vocabulary has %s (the length of %s)"
                                 % (t2d_name, dim_text(kept), dim_text(len(targets)), name)))
        in_flags = [t for t in inside if 0 <= t < len(flags)] if inside is not targets or tv != len(flags) else inside
        looked_up = operator.itemgetter(*in_flags)(flags) if len(in_flags) > 1 else tuple(flags[t] for t in in_flags)
        if 0 in looked_up:
            unmarked = [(d, t) for d, t in enumerate(targets) if 0 <= t < len(flags) and not flags[t]]
            d, t = unmarked[0]
            problems.append(err("%s is false at %s target ids that %s maps to (draft id %d -> target id %d)"
                                 % (t2d_name, dim_text(len(unmarked)), name, d, t)))
        elif kept > len(distinct):
            stray = next(i for i, flag in enumerate(flags) if flag and i not in distinct)
            problems.append(err("%s is true at target id %d, which no draft id maps to" % (t2d_name, stray)))
    import hashlib  # a drafter's maps only: a target's listing never loads OpenSSL

    return hashlib.sha256(d2t_raw + b"|" + t2d_raw).hexdigest()
