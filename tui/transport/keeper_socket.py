"""Where this user's link keeper listens: a socket in a directory only this user can open, and
why a place is refused (tui/transport/links.py is how a command talks to the keeper there).

The directory is created 0700: $XDG_RUNTIME_DIR/specdeck, else $TMPDIR/specdeck-links-UID, else
$XDG_STATE_HOME/specdeck/links (a socket's path holds ~107 bytes: a deep home may not fit). A
directory is used only where nobody else could have made it or could swap it: ours, 0700, and
every directory above it ours or root's and writable by others only with the sticky bit (a
shared scratch TMPDIR is passed over). The peer of every connection is checked besides
(remote/core/peer.py): nothing is sent to a socket another user holds. When no directory will
do, a command connects itself, as when no keeper can be started: a note under --verbose, never
an error. One keeper serves one user with one HOME and one config file (they name its SSH
settings, keys, known_hosts and how long links stay): the socket's name is a hash of them and
of this code's version, so an upgraded specdeck never takes a link from an older keeper.
"""

import os
import stat

from .. import logs
from ..places import config_path, state_dir

log = logs.get("tui.links")

MAX_SOCKET_PATH_BYTES = 100  # sun_path holds ~107 bytes
# In the socket's name: a client and a keeper of another protocol never meet.
PROTOCOL = "2"


def directories():
    """Where this user's keeper sockets may go, best first (none made yet): $XDG_RUNTIME_DIR's,
    the per-user directory in the temporary directory, then one in our own state directory; each
    only where no other user could replace it (unsafe_ancestry)."""
    base = os.environ.get("XDG_RUNTIME_DIR")
    if base:
        yield os.path.join(base, "specdeck")
    yield os.path.join(temp_dir(), "specdeck-links-%d" % os.getuid())
    yield os.path.join(state_dir(), "links")


def temp_dir():
    return os.environ.get("TMPDIR") or "/tmp"


def unsafe_ancestry(path):
    """Why a directory made at `path` could be swapped by another user, or None: every directory
    above it must belong to this user or root and be open to nobody else's writes but with the
    sticky bit (/tmp's 1777): a parent another user can write lets them rename our directory and
    put theirs in its place between any check and the connect."""
    here = os.path.dirname(os.path.abspath(path))
    while True:
        try:
            st = os.stat(here)
        except FileNotFoundError:
            st = None  # made by us, 0700, when the socket's directory is made
        except OSError as exc:
            return "cannot look at %s: %s" % (here, exc.strerror or exc)
        if st is None:
            pass
        elif st.st_uid not in (0, os.getuid()):
            return "%s belongs to uid %d: another user could replace what is in it" % (here, st.st_uid)
        elif st.st_mode & 0o022 and not st.st_mode & stat.S_ISVTX:
            return "%s (mode %04o) may be written by others without the sticky bit: they could replace what is in it" % (
                here, stat.S_IMODE(st.st_mode))
        parent = os.path.dirname(here)
        if parent == here:
            return None
        here = parent


def private_directory(path):
    """`path` made 0700 if missing; why it may not be used, or None."""
    why = unsafe_ancestry(path)
    if why:
        return why
    try:
        os.makedirs(path, 0o700)
    except FileExistsError:
        pass
    except OSError as exc:
        return "cannot make it: %s" % (exc.strerror or exc)
    return not_private(path, directory=True)


def not_private(path, directory):
    """Why `path` (a directory, or the keeper's socket) may not be used, or None."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return None if not directory else "it does not exist"
    except OSError as exc:
        return "cannot look at it: %s" % (exc.strerror or exc)
    kind_ok = stat.S_ISDIR(st.st_mode) if directory else stat.S_ISSOCK(st.st_mode)
    if not kind_ok:
        return "it is not a %s" % ("directory" if directory else "socket")
    if st.st_uid != os.getuid():
        return "it belongs to uid %d, not this user (uid %d)" % (st.st_uid, os.getuid())
    if st.st_mode & 0o077:
        return "its mode is %04o: others may open it" % stat.S_IMODE(st.st_mode)
    return None


def identity():
    """What one keeper serves: this HOME, this config file, this code."""
    from remote import AGENT_VERSION


    here = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    ssh_config = os.environ.get("SPECDECK_SSH_CONFIG", "")
    text = "\0".join([os.path.expanduser("~"), config_path(), ssh_config, here, AGENT_VERSION, PROTOCOL])
    return "%012x" % (fnv1a_64(text.encode("utf-8", "surrogateescape")) >> 16)


def fnv1a_64(data):
    """FNV-1a, 64 bits: a name for a few hundred bytes, not a secret. hashlib's sha256 would load
    OpenSSL, ~4 ms of every command's start for a dozen hex digits."""
    value = 0xCBF29CE484222325
    for byte in data:
        value = ((value ^ byte) * 0x100000001B3) & 0xFFFFFFFFFFFFFFFF
    return value


def socket_path():
    """The keeper's socket (listened on or not), or None when no directory will do: the command
    then connects itself, and says why under --verbose only."""
    name = "keeper-%s.sock" % identity()

    def usable(directory):
        path = os.path.join(directory, name)
        if len(path.encode("utf-8", "surrogateescape")) > MAX_SOCKET_PATH_BYTES:
            return None, "the socket's path would be too long for a Unix socket"
        why = private_directory(directory) or not_private(path, directory=False)
        return (None, why) if why else (path, None)

    for directory in directories():
        path, why = usable(directory)
        if path:
            return path
        log.info("not keeping links in %s: %s", directory, why)
    log.info("no directory for the link keeper: connecting directly")
    return None
