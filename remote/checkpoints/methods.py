"""Wire methods of checkpoint inspection: a report with the first page of tensors, then pages."""

import os

from ..core.protocol import BadRequest, NotFound, RemoteError
from ..core.wire import method
from .problems import io_error_type


@method("checkpoint.inspect")
def checkpoint_inspect(call):
    """Inspect a safetensors checkpoint (a file, a sharded index or a directory) without reading
    tensor data. Params: `path`, `sha256` (bool: hash every file too), `limit` (tensors in the
    first page, default 2000, at most 5000).
    Reply: the report of `remote/checkpoints/report.py` (`format`, `files`, `eagle3`, `problems`,
    `config`, ...) with `tensors` holding the first page in name order, plus `tensor_count`,
    `tensor_bytes`, `complete` (true when `tensors` is all of them), `groups` (tensors grouped by
    name pattern, e.g. `model.layers.{N}.mlp.experts.{E}.down_proj.weight`: `pattern`, `count`,
    `bytes`, `dtypes`, `shapes`, `more_shapes`, `role`; the 200 largest), `group_count` and
    `handle` (for `checkpoint.tensors`). Only regular files are read: a FIFO or device among the
    checkpoint's files is a problem of the report, one given as `path` is NotACheckpoint.
    NotFound when the path does not exist or is a symlink loop, IOError when it cannot be read,
    BadRequest when it holds a NUL byte."""
    from . import listing

    path = call.path_param("path", required=True)
    limit = _limit(call, listing.FIRST_PAGE_TENSORS, listing.MAX_PAGE_TENSORS)
    try:
        return listing.open_listing(path).summary(limit, sha256=bool(call.params.get("sha256")))
    except listing.report.CheckpointIOError as exc:
        raise RemoteError(io_error_type(exc), str(exc))


@method("checkpoint.tensors")
def checkpoint_tensors(call):
    """One page of a checkpoint's tensors. Params: `handle` (from `checkpoint.inspect`) or `path`
    (inspected again unless a kept listing of it is still current), `offset` (default 0), `limit`
    (default 2000, at most 5000), `filter` (text in the name or the role, any case), `sort`
    (`name`, `size`: largest first, or `dtype`).
    Reply: `{handle, offset, total (tensors matching the filter), tensor_count, filter, sort,
    tensors: [{name, dtype, shape, bytes, role, file?}]}`. NotFound when the handle is no
    longer kept: inspect again, or page by path."""
    from . import listing

    handle = call.param("handle", str)
    path = call.path_param("path")
    offset = call.param("offset", int, 0)
    if offset < 0:
        raise BadRequest("offset must be 0 or more")
    limit = _limit(call, listing.FIRST_PAGE_TENSORS, listing.MAX_PAGE_TENSORS)
    sort = call.param("sort", str, "name")
    if sort not in listing.SORT_KEYS:
        raise BadRequest("sort must be one of %s" % ", ".join(listing.SORT_KEYS))
    if handle is not None:
        kept = listing.kept_listing(handle)
        if kept is None and path is None:
            raise NotFound("no listing %s is kept any more: inspect the checkpoint again" % handle)
    else:
        kept = None
        if path is None:
            raise BadRequest("give a handle or a path")
    if kept is None:
        try:
            kept = listing.open_listing(path)
        except listing.report.CheckpointIOError as exc:
            raise RemoteError(io_error_type(exc), str(exc))
    return kept.page(offset, limit, call.param("filter", str, ""), sort)


def _limit(call, default, most):
    limit = call.param("limit", int, default)
    if not 1 <= limit <= most:
        raise BadRequest("limit must be between 1 and %d" % most)
    return limit


@method("checkpoint.compare")
def checkpoint_compare(call):
    """Compare two checkpoints of this host where they lie (nothing but the result crosses the
    wire): can A initialise B, or, when one is a drafter and the other a target model, can the
    drafter serve the target? Params: `a`, `b` (paths), `max_rows` (tensor rows in the reply, default
    and most 20000), `trained_target` (for a drafter against a target: the target it was
    trained for, whose tokenizer the new one is checked against). Reply: `verdict` `{status: compatible|incompatible, message}`, `reasons`,
    `rows` (`{name, a, b, status: same|values differ|same shape and dtype|shape differs|dtype
    differs|only in A|only in B}`, the differing first when cut; `same` only where the values were
    compared, by the first, middle and last 64 KiB of each tensor), `rows_total`, `values`
    (`{compared, same, differ, not_compared, message}`: counts of the rows of one shape and dtype;
    absent without rows), `config_diff` (`{field, a, b, in}`), `target` and
    `checks` for a drafter against a target, `a`, `b`: `{path, format, tensor_count}`, and
    `tokenizer` (two targets, or the drafter's trained-for target against the new one; null
    otherwise): `{same, message, same_id, other_id, only_old, only_new, examples,
    draft_ids_changed, draft_vocab_size, old, new}` (`same` null when not compared); for two
    drafters `draft_ids_remapped` (B's draft ids whose d2t names another target token than A's,
    null when either has no d2t) and `draft_ids_remapped_text` ("12,345 of 32,000 draft ids now
    name other tokens").
    NotACheckpoint when a path holds no safetensors checkpoint (or is a FIFO or device), NotFound
    when one does not exist or is a symlink loop, IOError when it cannot be read."""
    from . import comparison, listing

    path_a = call.path_param("a", required=True)
    path_b = call.path_param("b", required=True)
    max_rows = call.param("max_rows", int, comparison.MAX_ROWS)
    if not 1 <= max_rows <= comparison.MAX_ROWS:
        raise BadRequest("max_rows must be between 1 and %d" % comparison.MAX_ROWS)
    try:
        trained = call.path_param("trained_target")
        return comparison.compare_paths(path_a, path_b, max_rows, trained or None)
    except comparison.NotACheckpoint as exc:
        raise RemoteError("NotACheckpoint", str(exc))
    except listing.report.CheckpointIOError as exc:
        raise RemoteError(io_error_type(exc), str(exc))


# The coverage job's entry, run under the ML interpreter: the agent's package (or zipapp) first
# on sys.path, never the current directory (as paths.package_argv does for the agent itself).
_COVERAGE_BOOTSTRAP = ("import sys; sys.path[:] = [%r] + [p for p in sys.path if p != '']; "
                       "from remote.checkpoints.coverage_job import main; sys.exit(main(sys.argv[1:]))")
MAX_TEXT_BYTES = 12 * 1024 * 1024  # text sent over the wire (a frame holds 16 MiB); larger: text_path


@method("checkpoint.coverage")
def checkpoint_coverage(call):
    """Start a coverage job (kind `coverage`, under the ML interpreter, which needs
    transformers): the share of the target's tokens inside an EAGLE-3 drafter's vocabulary.
    Params: `drafter` (required), and either `target` with `text_path` (a text file on the
    host) or `text` (the text itself, at most 12 MiB), or `server` (a running server job: its
    target, and the tokens it generates for `prompts`, default the benchmark's built-in set,
    `max_tokens` each, default 128); `python` (the ML interpreter), `top` (missing tokens
    listed, default 20), `trust_remote_code` (for a tokenizer that ships its own code).
    Reply: the job. Its progress's `result` (and `checkpoint.coverage_last`): `{coverage,
    tokens, inside, outside, distinct_missing, top_missing: [{id, text, count, share}], bound:
    [{k, accept_length}] (a drafter right whenever the token is in its vocabulary),
    full_vocabulary, source (d2t|t2d|full), draft_vocab_size, target_vocab_size, note,
    drafter, target, text, server, seconds, tokens_per_s, target_tokenizer_size, time}`."""
    import hashlib
    import json
    import uuid

    from ..core import paths
    from ..jobs.store import login_path, resolve_executable
    from . import coverage

    drafter = os.path.abspath(call.path_param("drafter", required=True))
    if not os.path.exists(drafter):
        raise NotFound("no drafter %s on the host" % drafter)
    try:
        _inside, info = coverage.draft_vocabulary(drafter)  # refused now rather than in a job
    except (ValueError, OSError) as exc:
        raise BadRequest("cannot read the drafter's vocabulary: %s" % exc)
    spec = {"drafter": drafter, "top": call.param("top", int, coverage.TOP_MISSING), "trust_remote_code": bool(call.params.get("trust_remote_code")),
            "result_path": coverage.result_path(paths.state_dir(), drafter)}
    spec_dir = os.path.join(paths.state_dir(), "specs")
    os.makedirs(spec_dir, mode=0o700, exist_ok=True)
    server = call.param("server", str)
    if server:
        job = call.daemon.jobs.describe(server)
        meta = job.get("meta") or {}
        if job["kind"] != "server" or job["process_state"] != "running":
            raise BadRequest("job %s is not a running server" % server)
        serving = call.service("serving")  # the serving area's, through the registry: no import of it
        url, why_not = serving.server_url(job)  # a Slurm server: at its node
        if url is None:
            raise BadRequest("server %s cannot be reached yet: %s" % (server, why_not))
        prompts = call.param("prompts", list) or serving.builtin_prompts()
        spec.update(server=server, url=url, model=meta["target"], target=call.param("target", str) or meta["target"],
                    prompts=prompts, max_tokens=call.param("max_tokens", int, 128))
    else:
        spec["target"] = call.param("target", str, required=True)
        text, text_path = call.param("text", str), call.param("text_path", str)
        if (text is None) == (text_path is None):
            raise BadRequest("give text or text_path (one of them), or a server")
        if text is not None:
            if len(text.encode("utf-8")) > MAX_TEXT_BYTES:
                raise BadRequest("text is over %d MiB: copy it to the host and give text_path" % (MAX_TEXT_BYTES >> 20))
            text_path = os.path.join(spec_dir, "coverage-%s.txt" % uuid.uuid4().hex)
            with open(text_path, "w", encoding="utf-8") as f:
                f.write(text)
            spec["text_name"] = call.param("text_name", str) or "text of %d bytes (sha256 %s)" % (
                len(text.encode("utf-8")), hashlib.sha256(text.encode("utf-8")).hexdigest()[:12])
        else:
            text_path = os.path.abspath(os.path.expanduser(text_path))
            if not os.path.isfile(text_path):
                raise NotFound("no text file %s on the host" % text_path)
            spec["text_name"] = text_path
        spec["text_path"] = text_path
    target = os.path.expanduser(spec["target"])
    if os.path.isabs(target) and not os.path.isdir(target):
        raise NotFound("no target directory %s on the host (its tokenizer is read from it)" % target)
    python = call.param("python", str) or call.daemon.hello["capabilities"]["python"]["executable"]
    python = resolve_executable(python, os.path.expanduser("~"), login_path())
    spec_path = os.path.join(spec_dir, "coverage-%s.json" % uuid.uuid4().hex)
    with open(spec_path, "w") as f:
        json.dump(spec, f)
    argv = [python, "-c", _COVERAGE_BOOTSTRAP % paths.package_parent(), spec_path]
    what = spec.get("server") or os.path.basename(spec.get("text_name") or "text")
    meta = {"drafter": drafter, "target": spec["target"], "server": server, "text": spec.get("text_name"), "python": python,
            "source": info["source"]}
    job = call.daemon.jobs.submit(argv, name="coverage %s on %s (%s)" % (os.path.basename(drafter), os.path.basename(spec["target"].rstrip("/")), what),
                                  kind="coverage", meta=meta)
    call.daemon.services.wake("job-events")
    return job


@method("checkpoint.coverage_last")
def checkpoint_coverage_last(call):
    """The last coverage result of a drafter on this host. Params: `drafter`. Reply: `{drafter,
    result}` with result as in `checkpoint.coverage` (null when none was measured)."""
    from ..core import paths
    from ..core.records import read_json
    from . import coverage

    drafter = os.path.abspath(os.path.expanduser(call.param("drafter", str, required=True)))
    return {"drafter": drafter, "result": read_json(coverage.result_path(paths.state_dir(), drafter))}
