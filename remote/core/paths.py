"""Where the agent keeps its state on the host, and how to run the agent again.

Everything lives under one private directory of the user's (mode 0700): the daemon's socket
and lock, its log, and one directory per job. By default that is ~/.cache/specdeck. A
SPECDECK_HOME that does not exist yet is created 0700; one that exists is never chmodded
(it may be /tmp, or a directory shared on purpose): it is used as it is when it is already
private to this user, and otherwise the state goes in a private subdirectory of it,
`specdeck-UID`.

A unix socket path holds ~107 bytes. When the state directory is too deep for it, the socket
goes in TMPDIR/specdeck-UID, or, when someone else owns that or it is not private, in a
fresh private directory (mkdtemp) whose path is noted in the state directory so that the
daemon and every relay agree on it. (Not XDG_RUNTIME_DIR: logind removes it when the user's
last session ends, and the daemon must outlive sessions.)
"""

import os
import stat
import sys

SOCKET_NAME = "daemon.sock"
SOCKET_DIR_NOTE = "socket-dir"  # in the state directory: where the socket lives when not there


class UnsafeDirectory(OSError):
    """A directory we would keep state or the socket in is not private to this user."""


def _why_not_private(path, follow_symlinks=False):
    """None when `path` is a real directory of this user that nobody else can enter, else why not."""
    try:
        st = os.stat(path, follow_symlinks=follow_symlinks)
    except FileNotFoundError:
        return "it does not exist"
    if not stat.S_ISDIR(st.st_mode):
        return "it is not a directory"
    if st.st_uid != os.getuid():
        return "it belongs to uid %d, not this user (uid %d)" % (st.st_uid, os.getuid())
    if st.st_mode & 0o077:
        return "its mode is %04o, not private" % stat.S_IMODE(st.st_mode)
    return None


def _private_dir(path):
    """Create `path` 0700 if missing; return it when it is private to us, else raise UnsafeDirectory."""
    try:
        os.mkdir(path, 0o700)
    except FileExistsError:
        pass
    why = _why_not_private(path)
    if why:
        raise UnsafeDirectory("%s cannot hold specdeck's state: %s" % (path, why))
    return path


def state_dir():
    home = os.environ.get("SPECDECK_HOME")
    if not home:
        root = os.path.join(os.path.expanduser("~"), ".cache", "specdeck")
        os.makedirs(root, mode=0o700, exist_ok=True)
        if os.lstat(root).st_uid == os.getuid():
            os.chmod(root, 0o700)  # specdeck's own directory: keep it private
        return root
    if not os.path.lexists(home):
        os.makedirs(os.path.dirname(os.path.abspath(home)), exist_ok=True)
        return _private_dir(home)
    if _why_not_private(home, follow_symlinks=True) is None:
        return home
    # Someone else's, shared or world-writable (a 1777 /tmp): leave its mode alone, use our own corner.
    return _private_dir(os.path.join(home, "specdeck-%d" % os.getuid()))


def jobs_dir():
    path = os.path.join(state_dir(), "jobs")
    os.makedirs(path, mode=0o700, exist_ok=True)
    return path


def _warn(message):
    # Once per process: the relay's stderr reaches the console only when the relay fails, the
    # daemon's goes to its log.
    if not _warned:
        _warned.append(message)
        sys.stderr.write("specdeck: %s\n" % message)


_warned = []


def _noted_socket_dir(note):
    """The directory noted by an earlier choice, if it is still private; a stale note is removed."""
    try:
        with open(note) as f:
            noted = f.read().strip()
    except OSError:
        return None
    if noted and _why_not_private(noted) is None:
        return noted
    try:
        os.unlink(note)
    except OSError:
        pass
    return None


def usual_socket_dir(state):
    """Where a deep state directory's socket goes: a directory in TMPDIR of this user and this
    state directory (two state directories of one user never share a socket)."""
    import hashlib
    import tempfile

    digest = hashlib.sha256(os.path.abspath(state).encode("utf-8", "surrogateescape")).hexdigest()[:12]
    return os.path.join(tempfile.gettempdir(), "specdeck-%d.%s" % (os.getuid(), digest))


def socket_path():
    import tempfile  # only for a deep state directory; the console's commands import this module too

    state = state_dir()
    path = os.path.join(state, SOCKET_NAME)
    # sun_path holds 107 bytes; a deep state directory puts the socket in a private place in TMPDIR.
    if len(path.encode()) < 100:
        return path
    note = os.path.join(state, SOCKET_DIR_NOTE)
    for _ in range(3):
        noted = _noted_socket_dir(note)
        if noted:
            return os.path.join(noted, SOCKET_NAME)
        usual = usual_socket_dir(state)
        try:
            os.mkdir(usual, 0o700)
        except FileExistsError:
            pass
        why = _why_not_private(usual)
        if why is None:
            return os.path.join(usual, SOCKET_NAME)
        fresh = tempfile.mkdtemp(prefix="specdeck-%d-" % os.getuid())  # 0700, ours
        # First writer wins (link never replaces): a daemon and a relay choosing at the same
        # moment end up on the same directory.
        draft = "%s.%d" % (note, os.getpid())
        with open(draft, "w") as f:
            f.write(fresh + "\n")
        try:
            os.link(draft, note)
        except FileExistsError:
            os.rmdir(fresh)
            continue
        finally:
            os.unlink(draft)
        _warn("not using %s for the daemon's socket: %s; using %s instead" % (usual, why, fresh))
        return os.path.join(fresh, SOCKET_NAME)
    raise UnsafeDirectory("could not settle on a private directory for the daemon's socket (see %s)" % note)


# Run with -c rather than -m: `python -m remote` puts the current directory first on sys.path,
# so a remote/ folder there (planted in a shared or world-writable directory) would run in the
# agent's place, as the relay, the daemon and every job's supervisor. -I also leaves out the
# PYTHON* variables and the user's site; the package's own parent directory goes first instead.
_BOOTSTRAP = ("import sys; sys.path[:] = [%r] + [p for p in sys.path if p != '']; "
              "from remote.__main__ import main; sys.exit(main(sys.argv[1:]))")


def package_parent():
    """The directory that holds this `remote` package."""
    return os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def package_argv(python, user_site=False):
    """The argv prefix that runs this package's agent under `python`, never code from the current
    directory. Isolated (-I) unless `user_site`: a job step that imports the user's own libraries
    (huggingface_hub installed with --user) keeps the user's site and PYTHONPATH, like the zipapp."""
    return [python] + ([] if user_site else ["-I"]) + ["-c", _BOOTSTRAP % package_parent()]


def agent_argv(user_site=False):
    """The argv prefix that runs this very agent again (zipapp or package)."""
    main = sys.modules.get("__main__")
    archive = getattr(getattr(main, "__loader__", None), "archive", None)
    if archive:
        return [sys.executable, os.path.abspath(archive)]
    zip_path = os.path.abspath(sys.argv[0]) if sys.argv and sys.argv[0].endswith(".pyz") else None
    if zip_path and os.path.isfile(zip_path):
        return [sys.executable, zip_path]
    return package_argv(sys.executable, user_site)


def agent_env():
    """Environment for agent subprocesses (the argv of agent_argv finds the package by itself)."""
    return dict(os.environ)
