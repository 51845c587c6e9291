"""Where this user's link keeper listens: a socket in a directory only this user can open, and
why a place is refused (tui/transport/links.py is how a command talks to the keeper there).

The directory is created 0700: $XDG_RUNTIME_DIR/specdeck, else $TMPDIR/specdeck-links-UID.
That directory is in a place others may write to, so someone else may have made it first (or
made it a symlink, or opened our own to others): a directory that is not a directory of ours
private to us is never used, and the keeper's socket goes to one made afresh
($TMPDIR/specdeck-links-UID-RANDOM), named in a file of our own state directory
($XDG_STATE_HOME/specdeck/links-dir, which only we can write) so that the next command finds
the same keeper. Not in the state directory itself: a socket's path holds ~107 bytes, and a
home shared over NFS would put the keepers of two laptops in one place. When no directory will
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
    """Where this user's keeper sockets may go, best first (none made yet): $XDG_RUNTIME_DIR's
    when it is a directory of ours, then the per-user directory in the temporary directory."""
    base = os.environ.get("XDG_RUNTIME_DIR")
    if base:
        try:
            st = os.stat(base)
            if stat.S_ISDIR(st.st_mode) and st.st_uid == os.getuid():
                yield os.path.join(base, "specdeck")
        except OSError:
            pass
    yield os.path.join(temp_dir(), "specdeck-links-%d" % os.getuid())


def temp_dir():
    return os.environ.get("TMPDIR") or "/tmp"


def private_directory(path):
    """`path` made 0700 if missing; why it may not be used, or None."""
    try:
        os.mkdir(path, 0o700)
    except FileExistsError:
        pass
    except OSError as exc:
        return "cannot make it: %s" % (exc.strerror or exc)
    return not_private(path, directory=True)


def pointer_path():
    """The file naming the fresh directory our keepers use when the usual one may not be used."""
    return os.path.join(state_dir(), "links-dir")


def fresh_directory():
    """The directory named in our state directory when it is still ours and private, else one
    made afresh in the temporary directory and named there; None when none can be made or named
    (a directory the next command could not find would mean a keeper per command)."""
    pointer = pointer_path()
    try:
        with open(pointer, "rb") as f:
            named = f.read(4097).decode("utf-8", "surrogateescape").strip()
    except (OSError, ValueError):
        named = ""
    if os.path.isabs(named) and "\0" not in named and not not_private(named, directory=True):
        return named
    import tempfile

    try:
        made = tempfile.mkdtemp(prefix="specdeck-links-%d-" % os.getuid(), dir=temp_dir())
    except OSError as exc:
        log.info("cannot make a directory for the link keeper in %s: %s", temp_dir(), exc.strerror or exc)
        return None
    try:
        os.makedirs(os.path.dirname(pointer), mode=0o700, exist_ok=True)
        partial = "%s.%d.partial" % (pointer, os.getpid())
        fd = os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
        with os.fdopen(fd, "w", encoding="utf-8", errors="surrogateescape") as f:
            f.write(made + "\n")
        os.replace(partial, pointer)
    except OSError as exc:
        log.info("cannot name the link keeper's directory in %s: %s", pointer, exc.strerror or exc)
        try:
            os.rmdir(made)
        except OSError:
            pass
        return None
    return made


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
    directory = fresh_directory()
    if directory:
        path, why = usable(directory)
        if path:
            return path
        log.info("not keeping links in %s: %s", directory, why)
    log.info("no directory for the link keeper: connecting directly")
    return None
