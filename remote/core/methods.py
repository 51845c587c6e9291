"""Wire methods of the daemon itself: liveness, its services, streams, and the host's files."""

import errno
import os
import stat
import time

from . import paths, regular_files, streams
from .protocol import BadRequest, NotFound, RemoteError
from .wire import method

FS_LIST_MAX = 5000


@method("ping")
def ping(call):
    """Liveness and round-trip time. Params: none. Reply: `{time}` (the host's clock, s since the epoch)."""
    return {"time": time.time()}


@method("daemon.info")
def daemon_info(call):
    """About the daemon. Params: none. Reply: the hello frame's fields, plus `uptime_s`, `state_dir`
    and `services` (as `daemon.services` gives them)."""
    daemon = call.daemon
    return dict(daemon.hello, uptime_s=time.time() - daemon.started_at, state_dir=paths.state_dir(), services=daemon.services.status())


@method("daemon.services")
def daemon_services(call):
    """The daemon's services and how each is doing. Params: none.
    Reply: `{services: [{name, state: starting|running|retrying|stopped, error, failures, restarts,
    last_ok_at, next_try_at, interval_s, detail}]}`."""
    return {"services": call.daemon.services.status()}


@method("daemon.shutdown")
def daemon_shutdown(call):
    """Stop the daemon (jobs keep running; their supervisors record their ends). Reply: `{stopping: true}`."""
    call.daemon.stopping.set()
    return {"stopping": True}


@method("stream.cancel")
def stream_cancel(call):
    """End an open stream of this connection. Params: `stream` (its id).
    Reply: `{cancelled}` (false when no such stream was open). No end frame follows."""
    return {"cancelled": streams.cancel(call.connection, call.param("stream", str, required=True))}


@method("fs.list")
def fs_list(call):
    """A directory of the host, for the file picker. Params: `path` (default `~`).
    Reply: `{path, parent, entries: [{name, dir, bytes, mtime}], truncated}`: directories first,
    at most 5,000 entries. NotFound when there is no such directory (or the path is a symlink
    loop), BadRequest when it is not a directory or holds a NUL byte."""
    path = os.path.abspath(call.path_param("path", "~"))
    try:
        names = os.listdir(path)
    except FileNotFoundError:
        raise NotFound("no such directory on the host: %s" % path)
    except NotADirectoryError:
        raise BadRequest("not a directory: %s" % path)
    except PermissionError:
        raise RemoteError("PermissionDenied", "permission denied: %s" % path)
    except OSError as exc:
        if exc.errno == errno.ELOOP:  # nothing is there to list, as for a path that does not exist
            raise NotFound(regular_files.error_text(path, exc))
        raise BadRequest(regular_files.error_text(path, exc))  # a name too long, ...
    entries = []
    for name in sorted(names)[:FS_LIST_MAX]:
        try:
            st = os.stat(os.path.join(path, name))
        except OSError:
            continue
        entries.append({"name": name, "dir": stat.S_ISDIR(st.st_mode), "bytes": st.st_size, "mtime": st.st_mtime})
    entries.sort(key=lambda e: (not e["dir"], e["name"]))
    return {"path": path, "parent": os.path.dirname(path), "entries": entries, "truncated": len(names) > FS_LIST_MAX}
