"""Ship the agent: `remote/` packed as one zipapp named by its content hash, uploaded over
SFTP only when the host lacks that hash."""

import hashlib
import importlib.util
import io
import os
import posixpath
import zipfile

import remote
from remote.core import buildinfo

AGENT_DIR = ".cache/specdeck/agents"  # relative to the login directory, where SFTP and exec start
# Pure-Python field libraries the agent carries (each module with what it imports), so the
# host needs nothing installed: prometheus-client's text parser reads the engines' /metrics
# (its own __init__, which loads the whole client, is replaced by an empty one); nvidia-ml-py's
# pynvml, one file over ctypes, reads NVML (`()`: a single-file module, carried whole).
CARRIED = {"prometheus_client": ("parser.py", "metrics_core.py", "samples.py", "validation.py"), "pynvml": ()}
ZIP_MAIN = b"import sys\nfrom remote.__main__ import main\nsys.exit(main(sys.argv[1:]))\n"
_built = {}


def build_agent():
    """(file name, zipapp bytes); deterministic, so the same sources give the same name."""
    if not _built:
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
        _built["value"] = ("agent-%s-%s-%s.pyz" % (remote.AGENT_VERSION, build, extra), buffer.getvalue())
    return _built["value"]


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


def ensure_agent(transport):
    """The agent's path on the host (relative to home), uploading it first if missing."""
    name, data = build_agent()
    path = posixpath.join(AGENT_DIR, name)
    sftp = transport.open_sftp_client()
    try:
        try:
            if sftp.stat(path).st_size == len(data):
                return path
        except IOError:
            pass
        _makedirs(sftp, AGENT_DIR)
        partial = path + ".partial"
        with sftp.open(partial, "wb") as f:
            f.set_pipelined(True)
            f.write(data)
        sftp.chmod(partial, 0o600)
        sftp.posix_rename(partial, path)
        return path
    finally:
        sftp.close()


def _makedirs(sftp, path):
    current = ""
    for part in path.split("/"):
        current = posixpath.join(current, part) if current else part
        try:
            sftp.stat(current)
        except IOError:
            sftp.mkdir(current, mode=0o700)
