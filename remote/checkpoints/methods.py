"""Wire methods of checkpoint inspection: a report with the first page of tensors, then pages."""

import os

from ..core.protocol import BadRequest, NotFound, RemoteError
from ..core.wire import method


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
    `handle` (for `checkpoint.tensors`)."""
    from . import listing

    path = os.path.expanduser(call.param("path", str, required=True))
    limit = _limit(call, listing.FIRST_PAGE_TENSORS, listing.MAX_PAGE_TENSORS)
    try:
        return listing.open_listing(path).summary(limit, sha256=bool(call.params.get("sha256")))
    except listing.report.CheckpointIOError as exc:
        raise RemoteError("IOError", str(exc))


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
    path = call.param("path", str)
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
            kept = listing.open_listing(os.path.expanduser(path))
        except listing.report.CheckpointIOError as exc:
            raise RemoteError("IOError", str(exc))
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
    and most 20000). Reply: `verdict` `{status: compatible|incompatible, message}`, `reasons`,
    `rows` (`{name, a, b, status: same|shape differs|dtype differs|only in A|only in B}`, the
    differing first when cut), `rows_total`, `config_diff` (`{field, a, b, in}`), `target` and
    `checks` for a drafter against a target, and `a`, `b`: `{path, format, tensor_count}`.
    NotACheckpoint when a path holds no safetensors checkpoint, IOError when it cannot be read."""
    from . import comparison, listing

    path_a = os.path.expanduser(call.param("a", str, required=True))
    path_b = os.path.expanduser(call.param("b", str, required=True))
    max_rows = call.param("max_rows", int, comparison.MAX_ROWS)
    if not 1 <= max_rows <= comparison.MAX_ROWS:
        raise BadRequest("max_rows must be between 1 and %d" % comparison.MAX_ROWS)
    try:
        return comparison.compare_paths(path_a, path_b, max_rows)
    except comparison.NotACheckpoint as exc:
        raise RemoteError("NotACheckpoint", str(exc))
    except listing.report.CheckpointIOError as exc:
        raise RemoteError("IOError", str(exc))
