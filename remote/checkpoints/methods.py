"""Wire methods of checkpoint inspection."""

import os

from ..core.protocol import RemoteError
from ..core.wire import method


@method("checkpoint.inspect")
def checkpoint_inspect(call):
    """Inspect a safetensors checkpoint (a file, a sharded index or a directory) without reading
    tensor data. Params: `path`, `sha256` (bool: hash every file too).
    Reply: the report of `remote/checkpoints/report.py` (`format`, `tensors`, `eagle3`, `problems`, ...)."""
    from . import report

    path = os.path.expanduser(call.param("path", str, required=True))
    try:
        return report.inspect(path, sha256=bool(call.params.get("sha256")))
    except report.CheckpointIOError as exc:
        raise RemoteError("IOError", str(exc))
