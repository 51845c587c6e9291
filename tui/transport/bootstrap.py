"""Ship the agent: `remote/` packed as one zipapp named by its content hash, sent to the host
only when the host lacks it.

No SFTP: the relay's own exec channel carries the agent. The command SSH runs is a small boot
program (BOOT, run with `python3 -I -c`) given the agent's name, size and sha256. When the
host's copy (~/.cache/specdeck/agents/NAME) has that size and hash, the boot runs it in the
same process, so a cached agent costs nothing but the exec; otherwise the boot writes UPLOAD
on stdout, reads exactly SIZE bytes from stdin, checks the hash, writes the file atomically
(0600, in 0700 directories) and runs it. SFTP took four round trips before the exec (channel
open, subsystem, version, stat) on every connection; the boot takes none when the agent is
cached and one (the marker, then the bytes) when it is not. The link (tui/transport/connection.py's
SSHLink) answers the marker before the client reads the hello.
"""

import hashlib
import importlib.util
import io
import os
import shlex
import zipfile

import remote
from remote.core import buildinfo

AGENT_DIR = ".cache/specdeck/agents"  # relative to the login directory, where exec starts
# Pure-Python field libraries the agent carries (each module with what it imports), so the
# host needs nothing installed: prometheus-client's text parser reads the engines' /metrics
# (its own __init__, which loads the whole client, is replaced by an empty one); nvidia-ml-py's
# pynvml, one file over ctypes, reads NVML (`()`: a single-file module, carried whole).
CARRIED = {"prometheus_client": ("parser.py", "metrics_core.py", "samples.py", "validation.py"), "pynvml": ()}
ZIP_MAIN = b"import sys\nfrom remote.__main__ import main\nsys.exit(main(sys.argv[1:]))\n"
UPLOAD = b"specdeck-boot: send the agent\n"  # the boot's one line on stdout when it lacks the agent
_built = {}

# Runs on the host's own python (any 3.x reads it; the agent itself then asks for 3.9+). It
# goes through the login shell as one line (see boot_command), so it holds no `!` (csh's history)
# and each error is one line on stderr, which the link reports. The agent's directory is
# checked to be the user's and closed to others: a file planted there would run as the relay.
# The zipapp runs the way `python agent.pyz` runs it (runpy: its path first on sys.path and in
# sys.argv[0], the loader's archive set), so the relay starts the daemon from the same file.
BOOT = r'''
import hashlib, os, sys
name, size, digest = sys.argv[1], int(sys.argv[2]), sys.argv[3]
folder = os.path.join(os.path.expanduser("~"), ".cache", "specdeck", "agents")
path = os.path.join(folder, name)
def cached():
    try:
        with open(path, "rb") as f:
            data = f.read(size + 1)
    except OSError:
        return False
    return len(data) == size and hashlib.sha256(data).hexdigest() == digest
if not cached():
    os.write(1, UPLOAD)
    chunks, left = [], size
    while left > 0:
        chunk = os.read(0, min(left, 1 << 16))
        if not chunk:
            sys.exit("specdeck boot: the upload of the agent ended after %d of %d bytes" % (size - left, size))
        chunks.append(chunk)
        left -= len(chunk)
    data = b"".join(chunks)
    if not hashlib.sha256(data).hexdigest() == digest:
        sys.exit("specdeck boot: the agent arrived damaged (its sha256 differs)")
    current = os.path.expanduser("~")
    for part in (".cache", "specdeck", "agents"):
        current = os.path.join(current, part)
        try:
            os.mkdir(current, 0o700)
        except FileExistsError:
            pass
    st = os.lstat(folder)
    if not st.st_uid == os.getuid() or st.st_mode & 0o022 or not os.path.isdir(folder) or os.path.islink(folder):
        sys.exit("specdeck boot: %s is not a private directory of this user: refusing to keep the agent there" % folder)
    partial = "%s.%d.partial" % (path, os.getpid())
    fd = os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "wb") as f:
        f.write(data)
    os.replace(partial, path)
sys.argv = [path] + sys.argv[4:]
sys.path[:] = [p for p in sys.path if p not in ("", ".", os.getcwd())]
import runpy
runpy.run_path(path, run_name="__main__")
'''.replace("UPLOAD", 'b"%s\\n"' % UPLOAD.decode().strip())


def build_agent():
    """(file name, zipapp bytes); deterministic, so the same sources give the same name. The
    last build is kept on this laptop (tui/transport/agent_cache.py) and read back while its
    sources stay as they were."""
    if not _built:
        from . import agent_cache

        key = agent_cache.stamp(build_inputs(), remote.AGENT_VERSION)
        built = agent_cache.load(key)
        if built is None:
            built = _build()
            agent_cache.keep(key, built)
        _built["value"] = built
    name, data, _digest = _built["value"]
    return name, data


def build_inputs():
    """Every file a build reads: the agent's package, the carried libraries, this module."""
    paths = [os.path.dirname(os.path.abspath(remote.__file__)), os.path.abspath(__file__)]
    for package in sorted(CARRIED):
        spec = importlib.util.find_spec(package)
        if spec is not None:
            paths.append(list(spec.submodule_search_locations)[0] if spec.submodule_search_locations else spec.origin)
    return paths


def _build():
    """(file name, zipapp bytes, sha256), built now."""
    build = buildinfo.build_id()
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as zf:
        carried = carried_sources()
        for name, data in [("__main__.py", ZIP_MAIN)] + [("remote/" + n, d) for n, d in buildinfo.package_sources()] + carried:
            info = zipfile.ZipInfo(name, date_time=(2020, 1, 1, 0, 0, 0))
            info.external_attr = 0o644 << 16
            info.compress_type = zipfile.ZIP_DEFLATED
            zf.writestr(info, data)
    # The carried libraries name the file too: a new parser version is a new upload.
    extra = hashlib.sha256(b"".join(n.encode() + d for n, d in carried)).hexdigest()[:6]
    data = buffer.getvalue()
    return "agent-%s-%s-%s.pyz" % (remote.AGENT_VERSION, build, extra), data, hashlib.sha256(data).hexdigest()


def boot_command(python, agent_args):
    """(the shell command that boots the agent with `python` and runs `agent_args` in it, the
    zipapp's bytes to send when the boot asks for them). One line, every word quoted."""
    build_agent()
    name, data, digest = _built["value"]
    # A double-quoted literal: BOOT holds no single quote, so the shell's quoting stays one pair.
    source = 'exec("%s")' % BOOT.strip().replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
    return shlex.join([python, "-I", "-c", source, name, str(len(data)), digest] + list(agent_args)), data


def carried_sources():
    """[(name in the zip, bytes)] of the CARRIED modules, read from this laptop's installs; a
    library missing here is left out (the agent then says what it lacks when it needs it)."""
    sources = []
    for package, modules in sorted(CARRIED.items()):
        spec = importlib.util.find_spec(package)
        if spec is None:
            continue
        if not modules:
            with open(spec.origin, "rb") as f:
                sources.append(("%s.py" % package, f.read()))
            continue
        if not spec.submodule_search_locations:
            continue
        directory = list(spec.submodule_search_locations)[0]
        sources.append(("%s/__init__.py" % package, b'"""Only the modules specdeck\'s agent needs, carried in its zipapp."""\n'))
        for module in modules:
            with open(os.path.join(directory, module), "rb") as f:
                sources.append(("%s/%s" % (package, module), f.read()))
    return sources
