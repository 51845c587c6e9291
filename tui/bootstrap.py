"""Ship the agent: `remote/` packed as one zipapp named by its content hash, uploaded over
SFTP only when the host lacks that hash."""

import io
import posixpath
import zipfile

import remote
from remote.core import buildinfo

AGENT_DIR = ".cache/specdeck/agents"  # relative to the login directory, where SFTP and exec start
ZIP_MAIN = b"import sys\nfrom remote.__main__ import main\nsys.exit(main(sys.argv[1:]))\n"
_built = {}


def build_agent():
    """(file name, zipapp bytes); deterministic, so the same sources give the same name."""
    if not _built:
        build = buildinfo.build_id()
        buffer = io.BytesIO()
        with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as zf:
            for name, data in [("__main__.py", ZIP_MAIN)] + [("remote/" + n, d) for n, d in buildinfo.package_sources()]:
                info = zipfile.ZipInfo(name, date_time=(2020, 1, 1, 0, 0, 0))
                info.external_attr = 0o644 << 16
                info.compress_type = zipfile.ZIP_DEFLATED
                zf.writestr(info, data)
        _built["value"] = ("agent-%s-%s.pyz" % (remote.AGENT_VERSION, build), buffer.getvalue())
    return _built["value"]


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
