"""What the served drafter's speculation profile predicts (speculation_profile.json beside it,
written by `specdeck score`): read through the bounded readers (a regular file, at most
MAX_BYTES; a FIFO, a device or a huge file refused in one line), checked field by field, and given
as the accept length and per-position shares it predicts at the K the server runs, with the
profile's age and measurement conditions. A profile that is hostile or wrong (wrong types, rates
outside 0..1, a mean that is not 1 + the sum of its shares, weights newer than the profile) is
refused with why, never shown as a prediction. Standard library only.
"""

import os

from ..checkpoints.locate import load_json_file
from ..scoring.profile import FILE_NAME

MAX_BYTES = 1 << 20  # a profile is a few hundred bytes for any K a drafter runs with
MAX_K = 64
# How far the profile's own mean may be from 1 + the sum of its shares: it rounds each to six places.
OWN_TOLERANCE = 0.001
CONDITION_KEYS = ("dataset", "split", "held_out", "target_model", "target_revision", "num_samples", "num_positions", "temperature",
                  "bound")
WEIGHT_SUFFIXES = (".safetensors", ".bin", ".pt")


def path_of(drafter):
    """Where the profile of a drafter served from `drafter` would be, or None (a hub id, no directory here)."""
    if not isinstance(drafter, str) or not drafter:
        return None
    directory = os.path.expanduser(drafter)
    return os.path.join(directory, FILE_NAME) if os.path.isdir(directory) else None


def signature(path):
    """What says the file changed (its identity, size, time); None when there is none. stat never
    blocks, whatever the path is."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    return (st.st_ino, st.st_size, st.st_mtime_ns, st.st_mode)


class Refused(ValueError):
    """The profile cannot be trusted; the message says why."""


def _number(value, what, low, high):
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value != value or not low <= value <= high:
        raise Refused("%s is %s, not a number in %g..%g" % (what, _shown(value), low, high))
    return float(value)


def _shown(value):
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def _rates(profile, key, k):
    values = profile.get(key)
    if not isinstance(values, list) or len(values) != k:
        raise Refused("%s is %s, not a list of %d rates (num_speculative_tokens)" % (key, _shown(values), k))
    return [_number(v, "%s[%d]" % (key, i), 0.0, 1.0) for i, v in enumerate(values)]


def _checked(profile):
    """(K, marginal, conditional, mean) of a profile, or Refused."""
    k = profile.get("num_speculative_tokens")
    if isinstance(k, bool) or not isinstance(k, int) or not 1 <= k <= MAX_K:
        raise Refused("num_speculative_tokens is %s, not a whole number in 1..%d" % (_shown(k), MAX_K))
    method = profile.get("method")
    if not isinstance(method, str) or len(method) > 64:
        raise Refused("method is %s, not a name" % _shown(method))
    marginal = _rates(profile, "marginal_accept_rates", k)
    conditional = _rates(profile, "conditional_accept_rates", k)
    for i in range(1, k):
        if marginal[i] > marginal[i - 1] + OWN_TOLERANCE:
            raise Refused("marginal_accept_rates rise at position %d (%.3f after %.3f): a chain's shares cannot" % (i, marginal[i], marginal[i - 1]))
    mean = _number(profile.get("mean_accept_length"), "mean_accept_length", 1.0, k + 1.0)
    if abs(mean - (1.0 + sum(marginal))) > OWN_TOLERANCE:
        raise Refused("its figures disagree: mean_accept_length %.3f, 1 + the sum of marginal_accept_rates %.3f" % (mean, 1.0 + sum(marginal)))
    return k, marginal, conditional, mean, method


def _conditions(profile):
    """The measurement conditions worth saying, as plain values (anything else left out)."""
    raw = profile.get("measurement_conditions")
    if not isinstance(raw, dict):
        return {}
    kept = {}
    for key in CONDITION_KEYS:
        value = raw.get(key)
        if isinstance(value, bool) or (isinstance(value, (int, float)) and value == value):
            kept[key] = value
        elif isinstance(value, str):
            kept[key] = value[:300]
    return kept


def _newest_weights(directory):
    """The newest modification time of the drafter's weight files, or None."""
    newest = None
    try:
        entries = os.scandir(directory)
    except OSError:
        return None
    with entries:
        for count, entry in enumerate(entries):
            if count > 10000:  # a directory of files that are not a drafter's: stop looking
                break
            if entry.name.endswith(WEIGHT_SUFFIXES):
                try:
                    newest = max(newest or 0.0, entry.stat().st_mtime)
                except OSError:
                    continue
    return newest


def read(drafter, served_k=None, served_target=None):
    """The prediction for a server of `drafter` at K `served_k`, or None when the drafter has no
    profile: `{path, written_at, method, k, served_k, accept_length, per_position,
    per_position_conditional, mean_accept_length, conditions, notes, error}`. `accept_length` and
    `per_position` are the profile's at the served K (a chain cut after K' drafts: 1 + the first K'
    shares), None when the server drafts more than the profile measured. `error` (all figures
    None): why the profile was refused."""
    path = path_of(drafter)
    if path is None or not os.path.lexists(path):
        return None
    view = {"path": path, "written_at": None, "method": None, "k": None, "served_k": served_k, "accept_length": None, "per_position": [],
            "per_position_conditional": [], "mean_accept_length": None, "conditions": {}, "notes": [], "error": None}
    problems = []
    profile = load_json_file(path, "speculation profile", problems, most_bytes=MAX_BYTES)
    if profile is None:
        view["error"] = "%s refused: %s" % (FILE_NAME, problems[0]["message"] if problems else "not readable")
        return view
    try:
        k, marginal, conditional, mean, method = _checked(profile)
        written_at = os.stat(path).st_mtime
    except Refused as exc:
        view["error"] = "%s refused: %s" % (FILE_NAME, exc)
        return view
    except OSError as exc:
        view["error"] = "%s refused: %s" % (FILE_NAME, exc.strerror or exc)
        return view
    weights = _newest_weights(os.path.dirname(path))
    if weights is not None and weights > written_at:
        view["error"] = ("%s refused: the drafter's weights changed after it was scored (its prediction is of other weights): "
                         "score it again with specdeck score" % FILE_NAME)
        view["written_at"] = written_at
        return view
    view.update(written_at=written_at, method=method, k=k, mean_accept_length=mean, conditions=_conditions(profile))
    shown_k = served_k if isinstance(served_k, int) and served_k >= 1 else k
    if shown_k > k:
        view["notes"].append("the profile measured K=%d, the server drafts %d: no prediction past position %d" % (k, shown_k, k - 1))
        view["per_position"], view["per_position_conditional"] = marginal, conditional
    else:
        view["per_position"], view["per_position_conditional"] = marginal[:shown_k], conditional[:shown_k]
        view["accept_length"] = round(1.0 + sum(marginal[:shown_k]), 6)
    scored_on = view["conditions"].get("target_model")
    if isinstance(scored_on, str) and isinstance(served_target, str) and _target(scored_on) != _target(served_target):
        view["notes"].append("scored against %s, served with %s" % (scored_on, served_target))
    return view


def _target(name):
    return os.path.normpath(os.path.expanduser(name.rstrip("/"))) if name.startswith(("/", "~", ".")) else name.rstrip("/")
