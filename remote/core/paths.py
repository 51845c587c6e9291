"""Where the agent keeps its state on the host, and how to run the agent again.

Everything lives under one directory of the user's (SPECDECK_HOME, default
~/.cache/specdeck), mode 0700: the daemon's socket and lock, its log, and one
directory per job.
"""

import os
import sys

SOCKET_NAME = "daemon.sock"


def state_dir():
    root = os.environ.get("SPECDECK_HOME") or os.path.join(os.path.expanduser("~"), ".cache", "specdeck")
    os.makedirs(root, mode=0o700, exist_ok=True)
    os.chmod(root, 0o700)
    return root


def jobs_dir():
    path = os.path.join(state_dir(), "jobs")
    os.makedirs(path, mode=0o700, exist_ok=True)
    return path


def socket_path():
    path = os.path.join(state_dir(), SOCKET_NAME)
    # sun_path holds 107 bytes; a deep home directory falls back to a private dir in /tmp.
    if len(path.encode()) < 100:
        return path
    fallback = os.path.join("/tmp", "specdeck-%d" % os.getuid())
    os.makedirs(fallback, mode=0o700, exist_ok=True)
    st = os.lstat(fallback)
    if st.st_uid != os.getuid() or (st.st_mode & 0o077):
        raise RuntimeError("%s is not a private directory of this user" % fallback)
    return os.path.join(fallback, SOCKET_NAME)


def agent_argv():
    """The argv prefix that runs this very agent again (zipapp or package)."""
    main = sys.modules.get("__main__")
    archive = getattr(getattr(main, "__loader__", None), "archive", None)
    if archive:
        return [sys.executable, os.path.abspath(archive)]
    zip_path = os.path.abspath(sys.argv[0]) if sys.argv and sys.argv[0].endswith(".pyz") else None
    if zip_path and os.path.isfile(zip_path):
        return [sys.executable, zip_path]
    return [sys.executable, "-m", "remote"]


def agent_env():
    """Environment for agent subprocesses: the package must stay importable when run with -m."""
    env = dict(os.environ)
    if agent_argv()[1:2] == ["-m"]:
        package_parent = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
        env["PYTHONPATH"] = os.pathsep.join(p for p in (package_parent, env.get("PYTHONPATH")) if p)
    return env
