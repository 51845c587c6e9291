"""The environment a job gets: the user's login environment on this host, asked of the login
shell, never the environment of whichever process happened to start the daemon (a job
submitted from a shell without HF_TOKEN must not see the token of the shell that started
the daemon). Also where a job's executable is found: on that login PATH.
"""

import os
import shutil
import subprocess
import threading
import time

from ..core.protocol import BadRequest

CACHE_S = 60.0
LOGIN_SHELL_TIMEOUT_S = 15
# Set by the shell itself or meaningless outside it.
SHELL_OWN = ("_", "SHLVL", "PWD", "OLDPWD")
# What the login shell starts from, as login(1) and sshd give it.
DEFAULT_PATH = "/usr/local/bin:/usr/bin:/bin"
ROOT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
# A change to any of these shows at the next submit, cache or not.
STARTUP_FILES = (
    "/etc/profile", "/etc/profile.d", "/etc/environment", "/etc/bash.bashrc", "/etc/zsh/zprofile",
    "~/.profile", "~/.bash_profile", "~/.bash_login", "~/.bashrc", "~/.zprofile", "~/.zshenv", "~/.zlogin",
    "~/.config/fish/config.fish",
)

_cache_lock = threading.Lock()
_cache = {"key": None, "at": 0.0, "environment": None}


def _account():
    import pwd

    entry = pwd.getpwuid(os.getuid())
    # HOME as the daemon has it (sshd sets it from the account; a relocated home counts).
    home = os.environ.get("HOME")
    if not home or not os.path.isabs(home) or not os.path.isdir(home):
        home = entry.pw_dir
    return entry.pw_name, home, entry.pw_shell or "/bin/sh"


def _startup_marks(home):
    marks = []
    for name in STARTUP_FILES:
        try:
            st = os.stat(name.replace("~", home, 1) if name.startswith("~") else name)
            marks.append((st.st_mtime_ns, st.st_size))
        except OSError:
            marks.append(None)
    return tuple(marks)


def base_environment():
    """What a login starts from: who the user is, where they live, a standard PATH."""
    user, home, shell = _account()
    return {"HOME": home, "USER": user, "LOGNAME": user, "SHELL": shell, "PATH": ROOT_PATH if os.getuid() == 0 else DEFAULT_PATH}


def login_environment():
    """The environment of a login shell of this user, as a new dict; cached for CACHE_S while
    no startup file changes (a login shell costs from milliseconds to a second)."""
    base = base_environment()
    key = (base["HOME"], base["SHELL"], _startup_marks(base["HOME"]))
    with _cache_lock:
        if _cache["key"] == key and time.monotonic() - _cache["at"] < CACHE_S:
            return dict(_cache["environment"])
    environment = _ask_login_shell(base) or base
    with _cache_lock:
        _cache.update(key=key, at=time.monotonic(), environment=environment)
    return dict(environment)


def _ask_login_shell(base):
    marker = "specdeck-environment-%s" % os.urandom(8).hex()
    try:
        out = subprocess.run(
            # `exec env -0` reads the same in sh, bash, zsh and fish; the marker skips whatever
            # the profile prints first.
            [base["SHELL"], "-l", "-c", "echo %s; exec env -0" % marker],
            env=base,
            cwd=base["HOME"],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            timeout=LOGIN_SHELL_TIMEOUT_S,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    start = out.stdout.rfind(marker.encode() + b"\n")
    if start < 0:
        return None
    data = out.stdout[start + len(marker) + 1 :]
    items = data.split(b"\0") if b"\0" in data else data.split(b"\n")  # an `env` without -0
    environment = {}
    for item in items:
        name, sep, value = item.decode("utf-8", "surrogateescape").partition("=")
        if sep and name and name not in SHELL_OWN:
            environment[name] = value
    if not environment.get("PATH"):
        return None
    return environment


def login_path():
    """The PATH of the user's login shell (a venv added to ~/.profile counts at once)."""
    return login_environment()["PATH"]


def resolve_executable(name, cwd, search_path):
    """Absolute path of an executable, or BadRequest naming what was not found."""
    if os.sep in name:
        candidate = os.path.normpath(os.path.join(cwd, os.path.expanduser(name)))
        if not os.path.exists(candidate):
            raise BadRequest("command not found: %s (no such file)" % candidate)
        if os.path.isdir(candidate) or not os.access(candidate, os.X_OK):
            raise BadRequest("command not executable: %s" % candidate)
        return candidate
    found = shutil.which(name, path=search_path)
    if not found:
        raise BadRequest("command not found on the host's login PATH: %s" % name)
    return os.path.abspath(found)
