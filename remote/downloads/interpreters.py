"""Interpreters on this host that have huggingface_hub, for the answer to "the interpreter you
named lacks it": the usual homes of a venv or a conda env, the environment the user's login
shell activates, and the shebang of an `hf`/`huggingface-cli` on the login PATH, each probed
with a quick `import huggingface_hub`."""

import glob
import os
import shutil
import subprocess
import threading

from ..jobs.login_env import login_environment

PROBE_TIMEOUT_S = 15.0
MAX_CANDIDATES = 48
# Relative to the home directory; each names a python that may have its own site-packages.
HOME_GLOBS = (
    ".venv*/bin/python", "venv*/bin/python", ".virtualenvs/*/bin/python", "*/.venv/bin/python",
    "miniconda3/bin/python", "miniconda3/envs/*/bin/python", "anaconda3/bin/python", "anaconda3/envs/*/bin/python",
    "miniforge3/bin/python", "miniforge3/envs/*/bin/python", "mambaforge/bin/python", "mambaforge/envs/*/bin/python",
    ".conda/envs/*/bin/python", ".pyenv/versions/*/bin/python", ".local/bin/python3",
)
SYSTEM_GLOBS = ("/opt/conda/bin/python", "/opt/conda/envs/*/bin/python")


def shebang_interpreter(script, search_path):
    """The python a console script runs under, from its first line (`#!/usr/bin/env python3` too)."""
    try:
        with open(script, "rb") as f:
            first = f.readline(512).decode("utf-8", "replace").strip()
    except OSError:
        return None
    if not first.startswith("#!"):
        return None
    words = first[2:].split()
    if not words:
        return None
    if os.path.basename(words[0]) == "env" and len(words) > 1:
        return shutil.which(words[-1], path=search_path)
    return words[0]


def candidates(environment):
    """Paths of interpreters worth probing, most telling first, without repeats. `environment`:
    the login one (its PATH, and the CONDA_PREFIX or VIRTUAL_ENV the profile activates)."""
    home = os.path.expanduser("~")
    search_path = environment.get("PATH") or os.environ.get("PATH", "")
    found = []
    for tool in ("hf", "huggingface-cli"):
        script = shutil.which(tool, path=search_path)
        if script:
            found.append(shebang_interpreter(script, search_path))
    for prefix in (environment.get("VIRTUAL_ENV"), environment.get("CONDA_PREFIX"),
                   os.environ.get("VIRTUAL_ENV"), os.environ.get("CONDA_PREFIX")):
        if prefix:
            found.append(os.path.join(prefix, "bin", "python"))
    for pattern in HOME_GLOBS:
        found += sorted(glob.glob(os.path.join(home, pattern)))
    for pattern in SYSTEM_GLOBS:
        found += sorted(glob.glob(pattern))
    for name in ("python3", "python"):
        found.append(shutil.which(name, path=search_path))
    unique = []
    for path in found:
        if path and os.path.isabs(path) and path not in unique and os.access(path, os.X_OK) and not os.path.isdir(path):
            unique.append(path)
    return unique[:MAX_CANDIDATES]


def _probe(path):
    """huggingface_hub's version under `path`, or None."""
    try:
        out = subprocess.run([path, "-c", "import huggingface_hub as h; print(h.__version__)"], stdin=subprocess.DEVNULL,
                             stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, timeout=PROBE_TIMEOUT_S)
    except (OSError, subprocess.SubprocessError):
        return None
    lines = out.stdout.decode("utf-8", "replace").split()
    return lines[-1] if out.returncode == 0 and lines else None


def with_huggingface_hub(exclude=()):
    """[(path, version)] of this host's interpreters that import huggingface_hub, in candidate
    order; all probed at once, so the answer costs one slow import, not one per candidate."""
    paths = [p for p in candidates(login_environment()) if p not in exclude]
    versions = [None] * len(paths)

    def probe(index):
        versions[index] = _probe(paths[index])

    threads = [threading.Thread(target=probe, args=(i,), daemon=True) for i in range(len(paths))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return [(path, version) for path, version in zip(paths, versions) if version]


def missing_hub_message(interpreter, found):
    """One line: who lacks huggingface_hub, who has it, and how to remember one for this host.
    `HOST` stays a word: the console puts the host's name in, as the user calls it."""
    if not found:
        return ("huggingface_hub is not installed for %s, nor for any other interpreter found on this host (login "
                "PATH, hf's shebang, conda and virtualenvs): pip install huggingface_hub into one, then remember it "
                "with `specdeck config HOST --ml-python PATH`" % interpreter)
    first = found[0][0]
    listed = ", ".join("%s (huggingface_hub %s)" % pair for pair in found[:3])
    more = " and %d more" % (len(found) - 3) if len(found) > 3 else ""
    return ("huggingface_hub is not installed for %s; on this host it is in %s%s: remember one for this host with "
            "`specdeck config HOST --ml-python %s` (or pass --host-python once)" % (interpreter, listed, more, first))
