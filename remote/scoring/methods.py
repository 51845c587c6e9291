"""Wire methods of scoring: start a score job (checked first, refused in one line), and the last
score of a drafter on this host; `submit` starts one over several drafters (a training run's
checkpoints: remote/training/scores.py)."""

import os

from ..core.protocol import BadRequest, NotFound
from ..core.wire import method
from .drafter import Refused

# The job's entry, run under the ML interpreter: the agent's package (or zipapp) first on
# sys.path, never the current directory (as paths.package_argv does for the agent itself).
_BOOTSTRAP = ("import sys; sys.path[:] = [%r] + [p for p in sys.path if p != '']; "
              "from remote.scoring.score_job import main; sys.exit(main(sys.argv[1:]))")
SPLITS = ("val", "train", "all")


def result_path(state_dir, drafter):
    import hashlib

    return os.path.join(state_dir, "scores", hashlib.sha256(os.path.abspath(drafter).encode("utf-8")).hexdigest()[:24] + ".json")


@method("score.start")
def score_start(call):
    """Start a score job (kind `score`, under the ML interpreter, which needs torch): the accept
    length an EAGLE-3 drafter will reach serving `target`, predicted from hidden states the target
    already produced. Params: `drafter`, `target`, `data` (speculators' data directory with
    hidden_states/hs_N.safetensors, or SpecForge's prepare_hidden_states output), `k` (default 5),
    `samples` (score at most N), `vs` (a second drafter scored on the same samples), `split`
    (`val`: speculators' held-out rows, the default where the layout has a split; `train`; `all`),
    `train_ratio` (default 0.9, speculators' own), `device` (`cpu` to keep off the GPU), `python`
    (the ML interpreter). Checked before the job starts: BadRequest in one line when the data has
    no final hidden state of the target (and how to capture it), its layer count is not the
    drafter's aux layers + 1, a hidden size or vocabulary does not fit, a smaller draft vocabulary
    has no d2t, d2t points outside the target's vocabulary. NotFound when a path does not exist.
    Reply: the job. Its progress (`state`, `done`, `total`, `samples_per_s`, `eta_s`) ends with
    `result` (also `score.last`): `{k, predicted_accept_length, predicted_accept_length_per_k:
    [{k, accept_length}], unconditional_shares, conditional_rates, accept_length_histogram
    ({"1".."K+1": chains}), chains, drafters: [the same per drafter, with drafter, histogram,
    chains_cut, bound], samples_scored, samples_chosen, samples_found, samples_skipped,
    positions, off_path_tokens, data, layout, split, held_out, target, target_revision, device,
    device_reason, seconds, samples_per_s, notes, profile: {path, note}, time}`."""
    def existing(key, what, required=True):
        value = call.path_param(key, required=required)
        if value is None:
            return None
        value = os.path.abspath(os.path.expanduser(value))
        if not os.path.exists(value):
            raise NotFound("no %s %s on the host" % (what, value))
        return value

    drafter, target, data = existing("drafter", "drafter"), existing("target", "target"), existing("data", "data directory")
    vs = existing("vs", "drafter", required=False)
    split = call.param("split", str)
    if split is not None and split not in SPLITS:
        raise BadRequest("split must be one of %s" % ", ".join(SPLITS))
    options = {"k": call.param("k", int, 5), "samples": call.param("samples", int), "split": split,
               "train_ratio": call.param("train_ratio", float, 0.9), "device": call.param("device", str),
               "python": call.param("python", str)}
    try:
        return submit(call.daemon, [drafter] + ([vs] if vs else []), target, data, options, kept=1)
    except Refused as exc:
        raise BadRequest(str(exc))


def submit(daemon, drafters, target, data, options, kept=None, name=None, meta=None):
    """Start one score job over `drafters` (paths; the first is the one a plain score names),
    checked first (plan.check: Refused in one line, nothing started). `options`: k (default 5),
    samples, split, train_ratio, device, python (default the agent's). The first `kept` drafters
    (default all) have their result kept where `score.last` finds it and their speculation profile
    written beside them. `meta` is added to the job's. Returns the job."""
    import json
    import uuid

    from ..core import paths
    from ..jobs.store import login_path, resolve_executable
    from . import plan

    k = options.get("k") or 5
    limit = options.get("samples")
    if limit is not None and limit < 1:
        raise Refused("samples must be 1 or more")
    ratio = options.get("train_ratio") or 0.9
    if not 0.0 < ratio < 1.0:
        raise Refused("train_ratio must be between 0 and 1")
    checked = plan.check(drafters[0], target, data, k, drafters[1:])
    state = paths.state_dir()
    kept = len(drafters) if kept is None else kept
    results = [result_path(state, path) for path in drafters[:kept]]
    spec = dict(checked, k=k, samples=limit, split=options.get("split"), train_ratio=ratio, device=options.get("device"),
                result_paths=results,
                profile_fallbacks=[os.path.join(state, "profiles", os.path.basename(path)) for path in results])
    spec_dir = os.path.join(state, "specs")
    os.makedirs(spec_dir, mode=0o700, exist_ok=True)
    spec_path = os.path.join(spec_dir, "score-%s.json" % uuid.uuid4().hex)
    with open(spec_path, "w") as f:
        json.dump(spec, f)
    python = options.get("python") or daemon.hello["capabilities"]["python"]["executable"]
    python = resolve_executable(python, os.path.expanduser("~"), login_path())
    argv = [python, "-c", _BOOTSTRAP % paths.package_parent(), spec_path]
    vs = drafters[1] if len(drafters) == 2 else None
    name = name or "score %s on %s (K=%d%s)" % (os.path.basename(drafters[0]), os.path.basename(target.rstrip("/")), k,
                                                ", vs %s" % os.path.basename(vs) if vs else "")
    job_meta = {"drafter": drafters[0], "target": target, "data": data, "vs": vs, "k": k, "python": python,
                "layout": checked["layout"], "samples_found": checked["samples_found"]}
    if len(drafters) > 2:
        job_meta["drafters"] = list(drafters)
    job_meta.update(meta or {})
    job = daemon.jobs.submit(argv, name=name, kind="score", meta=job_meta)
    daemon.services.wake("job-events")
    return job


@method("score.last")
def score_last(call):
    """The last score of a drafter on this host. Params: `drafter`. Reply: `{drafter, result,
    profile}`: result as in `score.start` (null when it was never scored), profile the
    speculation_profile.json beside it (null when none)."""
    from ..core import paths
    from ..core.records import read_json
    from . import profile

    drafter = os.path.abspath(os.path.expanduser(call.param("drafter", str, required=True)))
    return {"drafter": drafter, "result": read_json(result_path(paths.state_dir(), drafter)), "profile": profile.read_beside(drafter)}
