"""The download job: fetch a repo's files from the hub onto this host, then verify them.

Runs on the GPU host as a detached process of its own, under an interpreter that has
huggingface_hub (imported lazily here, so the stdlib-only agent can import this module and
still get a clear answer when it is missing). Entry point `main(argv)`:

  download SPEC.json        resolve, fetch (resuming what is there), verify; exit 0 verified,
                            1 mismatch or corrupt, 2 any other failure
  download-plan SPEC.json   one JSON line: the files, sizes, hashes, free space, or the error
  verify SPEC.json          verify an existing directory without downloading; the last stdout
                            line is the verdict as JSON

SPEC: {"repo": "org/name", "repo_type": "model"|"dataset", "revision": null|str,
       "files": [...], "include": [globs], "exclude": [globs], "local_dir": str,
       "endpoint": null|str}
Selection: explicit `files` are always taken (a missing one is an error); `include` globs (fnmatch,
a trailing "/" means the whole folder) add matching repo files; with neither, every file is taken;
`exclude` globs drop glob-selected files.

How the bytes move. huggingface_hub's metadata calls (repo_info for the commit, then the
paginated tree listing, or get_paths_info when only explicit files are asked for) give each
file's size, git blob id and LFS sha256 at that commit; the plan then HEADs the smallest file,
since a gated repo's listing is public but its files are not. The bytes come from the same
`resolve/{commit}/{path}` URL that hf_hub_download uses, but through our own ranged GET: since
huggingface_hub 2.x, hf_hub_download writes to a process-unique temporary file and deletes it on
failure, so a second run can no longer continue a partial file. Here a partial file lives where
huggingface_hub 1.x keeps it, `local_dir/.cache/huggingface/download/<hash>.<etag>.incomplete`,
and a second run sends `Range: bytes=<have>-`. Finished files get the same `.metadata` record
hf_hub_download writes, so `hf download --local-dir` sees them as up to date. Each file is hashed
while it arrives (sha256 for LFS files, the git blob sha1 for the others) in a thread of its own,
so verification after the last byte compares digests instead of reading gigabytes again.

progress.json (in $SPECDECK_JOB_DIR, replaced atomically, at most ~4 times a second):
  {"job": "download"|"verify", "repo", "repo_type", "revision", "local_dir",
   "state": "queued"|"resolving"|"downloading"|"verifying"|"verified"|"mismatch"|"corrupt"|"failed",
   "files": [{"path", "bytes_total", "bytes_done", "bytes_checked", "state"}],
   "bytes_total", "bytes_done", "bytes_checked", "rate_bytes_per_s", "eta_s",
   "verdict": null|{"status": "verified"|"mismatch"|"corrupt"|"error", "message", "file"?},
   "error": null|str, "started_at", "updated_at"}     (times: seconds since the epoch)
File states: queued, checking (hashing a file already there), present (already there and
right), downloading, downloaded, retrying, verifying, verified, mismatch, missing, failed.
`bytes_done` counts bytes on disk (resumed and present ones included); the rate counts only
bytes received by this run; `bytes_checked` counts bytes hashed.

SIGTERM/SIGINT stop the job (exit 2, partial files kept for the next run); SIGHUP does not, so
a job started under nohup outlives its shell. Environment knobs: SPECDECK_DOWNLOAD_WORKERS
(files in parallel, 4), SPECDECK_DOWNLOAD_RETRIES (per file, 5, reset whenever bytes arrive).

No token ever reaches the log, progress.json or an error message: every string that leaves this
module is scrubbed of the token huggingface_hub finds (HF_TOKEN or the host's login).
"""

from __future__ import annotations

import base64
import collections
import fnmatch
import hashlib
import http.client
import json
import os
import queue
import re
import signal
import socket
import sys
import threading
import time
import urllib.error
import urllib.parse
import urllib.request

try:  # the agent runs on Linux hosts; keep the module importable elsewhere
    import fcntl
except ImportError:  # pragma: no cover
    fcntl = None

GB = 1000 ** 3
HASH_BLOCK = 4 * 1024 * 1024  # one reusable buffer for hashing files on disk
NET_CHUNK = 4 * 1024 * 1024  # one network read
NET_BUFFERS = 4  # buffers in flight between the receiving and the hashing thread, per file
READ_SLICE = 256 * 1024  # one socket read, written to disk at once
STOP_GRACE = 2.0  # seconds a stopped job waits for reads blocked on a stalled link
PROGRESS_INTERVAL = 0.25
RATE_WINDOW = 5.0
DEFAULT_WORKERS = 4
DEFAULT_RETRIES = 5  # per file, reset whenever bytes arrive (env SPECDECK_DOWNLOAD_RETRIES)
READ_TIMEOUT = 60.0
MAX_REDIRECTS = 10
USER_AGENT_LIBRARY = "specdeck"

PLAN_ERROR_TYPES = (
    "RepoNotFound", "FileNotFound", "RevisionNotFound", "AuthRequired", "NetworkUnreachable",
    "NoSpace", "BadRequest", "MissingDependency", "HubError", "InternalError",
)


# --------------------------------------------------------------------------- errors, secrets, log


class PlanError(Exception):
    """A failure with a type from PLAN_ERROR_TYPES and one human line."""

    def __init__(self, type_, message, **extra):
        super().__init__(message)
        self.type = type_
        self.message = message
        self.extra = extra

    def to_json(self):
        d = {"type": self.type, "message": scrub(self.message)}
        d.update(self.extra)
        return d


class _Stopped(Exception):
    pass


class _Transient(Exception):
    """A network hiccup worth retrying from the bytes we have."""


class _Secrets:
    def __init__(self):
        self.values = set()

    def add(self, value):
        if isinstance(value, str) and len(value.strip()) >= 6:
            self.values.add(value.strip())

    def scrub(self, text):
        if not isinstance(text, str):
            text = str(text)
        for v in sorted(self.values, key=len, reverse=True):
            if v in text:
                text = text.replace(v, "<token>")
        text = re.sub(r"\bhf_[A-Za-z0-9]{16,}", "hf_<token>", text)
        text = re.sub(r"(?i)(bearer\s+)[^\s'\",]+", r"\1<token>", text)
        return text


_SECRETS = _Secrets()
for _name in ("HF_TOKEN", "HUGGING_FACE_HUB_TOKEN"):
    _SECRETS.add(os.environ.get(_name))


def scrub(text):
    """`text` without any token this process knows of."""
    return _SECRETS.scrub(text)


def one_line(text, limit=400):
    text = " ".join(str(text).split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


_LOG_LOCK = threading.Lock()


def log(message):
    line = "%s %s" % (time.strftime("%H:%M:%S"), scrub(message))
    with _LOG_LOCK:
        try:
            sys.stdout.write(line + "\n")
            sys.stdout.flush()
        except (OSError, ValueError):
            pass


def fmt_gb(n):
    """2382319104 -> '2.38 GB'."""
    if n is None:
        return "? GB"
    if n >= 10 ** 8 or n == 0:
        return "%.2f GB" % (n / GB)
    return "%.3g GB" % (n / GB)


def fmt_size(n):
    """2382319104 -> '2.38 GB (2,382,319,104 bytes)'; small sizes in bytes only."""
    if n < 10 ** 6:
        return "%s bytes" % format(n, ",")
    return "%s (%s bytes)" % (fmt_gb(n), format(n, ","))


def short(digest):
    return (digest or "?")[:12] + ".."


# --------------------------------------------------------------------------- spec


def load_spec(path):
    try:
        with open(path, encoding="utf-8") as f:
            spec = json.load(f)
    except OSError as e:
        raise PlanError("BadRequest", "cannot read spec %s: %s" % (path, e.strerror or e))
    except ValueError as e:
        raise PlanError("BadRequest", "spec %s is not JSON: %s" % (path, e))
    return normalize_spec(spec)


def normalize_spec(spec):
    if not isinstance(spec, dict):
        raise PlanError("BadRequest", "spec must be a JSON object")
    out = dict(spec)
    repo = spec.get("repo")
    if not isinstance(repo, str) or not re.fullmatch(r"[A-Za-z0-9][\w.\-]*(/[\w.\-]+)?", repo or "") \
            or ".." in repo:
        raise PlanError("BadRequest", "repo must look like org/name, got %r" % (repo,))
    repo_type = spec.get("repo_type") or "model"
    if repo_type not in ("model", "dataset"):
        raise PlanError("BadRequest", "repo_type must be model or dataset, got %r" % (repo_type,))
    revision = spec.get("revision")
    if revision is not None and (not isinstance(revision, str) or not revision.strip()):
        raise PlanError("BadRequest", "revision must be null or a non-empty string")
    files = spec.get("files") or []
    include = spec.get("include") or []
    exclude = spec.get("exclude") or []
    for name, value in (("files", files), ("include", include), ("exclude", exclude)):
        if not isinstance(value, list) or not all(isinstance(v, str) and v for v in value):
            raise PlanError("BadRequest", "%s must be a list of non-empty strings" % name)
    clean = []
    for f in files:
        p = f.replace("\\", "/").lstrip("/")
        if p.startswith("./"):
            p = p[2:]
        if not p or any(part in ("", ".", "..") for part in p.split("/")):
            raise PlanError("BadRequest", "bad file path %r" % (f,))
        if p not in clean:
            clean.append(p)
    local_dir = spec.get("local_dir")
    if not isinstance(local_dir, str) or not local_dir.strip():
        raise PlanError("BadRequest", "local_dir must be a non-empty path")
    endpoint = spec.get("endpoint")
    if endpoint is not None:
        if not isinstance(endpoint, str) or not re.match(r"^https?://[^/\s]+", endpoint):
            raise PlanError("BadRequest", "endpoint must be null or an http(s) URL, got %r" % (endpoint,))
        endpoint = endpoint.rstrip("/")
    out.update(repo=repo, repo_type=repo_type, revision=revision, files=clean, include=list(include),
               exclude=list(exclude), local_dir=os.path.abspath(os.path.expanduser(local_dir)),
               endpoint=endpoint)
    return out


def _matches(path, patterns):
    for p in patterns:
        if p.endswith("/"):
            p += "*"
        if fnmatch.fnmatch(path, p):
            return True
    return False


def select_paths(all_paths, spec):
    """The repo paths the spec asks for, in repo order; raises FileNotFound for a missing one."""
    files, include, exclude = spec["files"], spec["include"], spec["exclude"]
    known = set(all_paths)
    missing = [f for f in files if f not in known]
    folders = [f for f in missing if any(p.startswith(f.rstrip("/") + "/") for p in all_paths)]
    if folders:
        raise PlanError("BadRequest", "%s is a folder in %s; name its files or use include [\"%s/\"]"
                        % (folders[0], spec["repo"], folders[0].rstrip("/")))
    if missing:
        raise PlanError("FileNotFound", "%s not found in %s at %s" % (
            ", ".join(missing[:5]) + (" (+%d more)" % (len(missing) - 5) if len(missing) > 5 else ""),
            spec["repo"], spec.get("_revision_label") or spec.get("revision") or "main"))
    chosen = set(files)
    if include or not files:
        for p in all_paths:
            if (not include or _matches(p, include)) and not _matches(p, exclude):
                chosen.add(p)
    return [p for p in all_paths if p in chosen]


# --------------------------------------------------------------------------- huggingface_hub glue


def _import_hf():
    try:
        import huggingface_hub  # noqa: F401 (lazy on purpose)
    except ImportError:
        raise PlanError("MissingDependency", "huggingface_hub is not installed for %s; run downloads with an "
                        "interpreter that has it (pip install huggingface_hub)" % sys.executable)
    return huggingface_hub


def _token(hf):
    token = None
    try:
        getter = getattr(hf, "get_token", None)
        if getter is None:
            getter = hf.HfFolder.get_token
        token = getter()
    except Exception:
        token = None
    _SECRETS.add(token)
    return token


def _endpoint(hf, spec):
    if spec.get("endpoint"):
        return spec["endpoint"]
    return hf.constants.ENDPOINT.rstrip("/")


def _hf_headers(hf):
    from huggingface_hub.utils import build_hf_headers

    headers = dict(build_hf_headers(library_name=USER_AGENT_LIBRARY, library_version=_agent_version()))
    for v in headers.values():
        if isinstance(v, str) and v.lower().startswith("bearer "):
            _SECRETS.add(v[7:])
    return headers


def _agent_version():
    try:
        from . import AGENT_VERSION
        return AGENT_VERSION
    except ImportError:
        return "0"


def _exc_names(exc):
    return {c.__name__ for c in type(exc).__mro__}


def _walk_causes(exc):
    seen = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        yield exc
        exc = exc.__cause__ or exc.__context__


def classify(exc, spec, what=None, have_token=None):
    """Turn an exception from huggingface_hub (any version) or from the network into a PlanError."""
    if isinstance(exc, PlanError):
        return exc
    repo = spec["repo"]
    rev = spec.get("revision") or "main"
    kind = "dataset " if spec.get("repo_type") == "dataset" else ""
    where = spec.get("_endpoint_label") or "the hub"
    names = _exc_names(exc)
    resp = getattr(exc, "response", None)
    status = getattr(resp, "status_code", None)
    code = None
    try:
        code = resp.headers.get("X-Error-Code") if resp is not None else None
    except Exception:
        code = None
    login_hint = "set HF_TOKEN or run `hf auth login` on this host"
    try:
        server_message = resp.headers.get("X-Error-Message") if resp is not None else None
    except Exception:
        server_message = None
    if server_message and "invalid credentials" in server_message.lower():
        return PlanError("AuthRequired", "the hub refused this host's token (invalid credentials); %s" % login_hint)
    if "GatedRepoError" in names or code == "GatedRepo":
        return PlanError("AuthRequired", "%s%s is gated: accept its conditions on the hub with your account, then %s"
                         % (kind, repo, login_hint if not have_token else "check that this host's token belongs to it"))
    if "RevisionNotFoundError" in names or code == "RevisionNotFound":
        return PlanError("RevisionNotFound", "revision %s not found in %s%s" % (rev, kind, repo))
    if names & {"EntryNotFoundError", "RemoteEntryNotFoundError"} or code == "EntryNotFound":
        return PlanError("FileNotFound", "%s not found in %s%s at %s" % (what or "file", kind, repo, rev))
    if "RepositoryNotFoundError" in names or code == "RepoNotFound":
        hint = "" if have_token else " (if it is private: %s)" % login_hint
        return PlanError("RepoNotFound", "%srepository %s not found on %s%s" % (kind, repo, where, hint))
    if status in (401, 403):
        return PlanError("AuthRequired", "%s%s: access denied (HTTP %d); %s" % (kind, repo, status, login_hint))
    if "OfflineModeIsEnabled" in names:
        return PlanError("NetworkUnreachable", "HF_HUB_OFFLINE is set on this host; cannot reach %s" % where)
    if status == 400 or "BadRequestError" in names:
        return PlanError("BadRequest", "the hub refused the request for %s: %s" % (repo, one_line(_first_line(exc))))
    if status is not None and status >= 500:
        return PlanError("NetworkUnreachable", "%s answered HTTP %d for %s; try again later" % (where, status, repo))
    if status is not None:
        return PlanError("HubError", "%s answered HTTP %d for %s: %s" % (where, status, repo, _first_line(exc)))
    for e in _walk_causes(exc):
        n = _exc_names(e)
        if n & {"ConnectError", "ConnectionError", "ConnectTimeout", "ReadTimeout", "TimeoutException",
                "Timeout", "ProxyError", "NetworkError", "SSLError", "RemoteProtocolError", "URLError",
                "ProtocolError", "MaxRetryError", "NewConnectionError"} or isinstance(e, (OSError, socket.timeout)):
            return PlanError("NetworkUnreachable", "cannot reach %s: %s" % (where, one_line(_first_line(e))))
    return PlanError("HubError", "%s: %s" % (type(exc).__name__, one_line(_first_line(exc))))


def _first_line(exc):
    text = str(exc).strip()
    for line in text.splitlines():
        if line.strip():
            return scrub(line.strip())
    return type(exc).__name__


class RemoteFile:
    __slots__ = ("path", "size", "sha256", "blob_id")

    def __init__(self, path, size, sha256, blob_id):
        self.path = path
        self.size = size
        self.sha256 = sha256
        self.blob_id = blob_id

    @property
    def etag(self):
        return self.sha256 or self.blob_id

    def to_json(self):
        d = {"path": self.path, "size": self.size}
        if self.sha256:
            d["sha256"] = self.sha256
        if self.blob_id:
            d["blob_id"] = self.blob_id
        return d


class Resolved:
    def __init__(self, revision, files, all_paths, source="hub"):
        self.revision = revision
        self.files = files
        self.all_paths = all_paths
        self.source = source


def _lfs_sha256(lfs):
    if lfs is None:
        return None
    if isinstance(lfs, dict):
        return lfs.get("sha256") or lfs.get("oid")
    return getattr(lfs, "sha256", None) or getattr(lfs, "oid", None)


def resolve(spec, hf):
    """Ask the hub for the commit and for the selected files' sizes and hashes."""
    api = hf.HfApi(endpoint=spec.get("endpoint"), library_name=USER_AGENT_LIBRARY)
    repo, repo_type = spec["repo"], spec["repo_type"]
    rev = spec.get("revision") or "main"
    spec["_endpoint_label"] = _endpoint(hf, spec)
    explicit_only = bool(spec["files"]) and not spec["include"]
    info = api.repo_info(repo, repo_type=repo_type, revision=rev)
    sha = getattr(info, "sha", None)
    if not sha:
        raise PlanError("HubError", "the hub gave no commit for %s at %s" % (repo, rev))
    spec["_revision_label"] = rev if rev == sha else "%s (%s)" % (rev, sha[:7])
    all_paths = [s.rfilename for s in (getattr(info, "siblings", None) or [])]
    if explicit_only:
        if all_paths:
            select_paths(all_paths, spec)  # names the missing files, if any
        entries = api.get_paths_info(repo, spec["files"], repo_type=repo_type, revision=sha)
        found = {}
        for e in entries:
            if not hasattr(e, "size") or getattr(e, "blob_id", None) is None and getattr(e, "lfs", None) is None:
                raise PlanError("BadRequest", "%s is a folder in %s; use include [\"%s/*\"]" % (e.path, repo, e.path))
            found[e.path] = RemoteFile(e.path, e.size, _lfs_sha256(e.lfs), getattr(e, "blob_id", None))
        missing = [f for f in spec["files"] if f not in found]
        if missing:
            raise PlanError("FileNotFound", "%s not found in %s at %s" % (", ".join(missing), repo,
                                                                          spec["_revision_label"]))
        files = [found[f] for f in spec["files"]]
        if not all_paths:
            all_paths = list(spec["files"])
    else:
        # The tree listing is paginated, so it is complete even for repos with many files.
        by_path = {}
        for e in api.list_repo_tree(repo, repo_type=repo_type, revision=sha, recursive=True):
            if getattr(e, "size", None) is not None and hasattr(e, "blob_id"):
                by_path[e.path] = e
        all_paths = sorted(by_path)
        chosen = select_paths(all_paths, spec)
        files = [RemoteFile(p, by_path[p].size, _lfs_sha256(by_path[p].lfs), by_path[p].blob_id) for p in chosen]
    if not files:
        raise PlanError("FileNotFound", "no file of %s at %s matches include %s exclude %s (%d files in the repo)"
                        % (repo, spec["_revision_label"], spec["include"] or ["*"], spec["exclude"], len(all_paths)))
    return Resolved(sha, files, all_paths)


def resolve_url(endpoint, spec, revision, path):
    prefix = "datasets/" if spec["repo_type"] == "dataset" else ""
    return "%s/%s%s/resolve/%s/%s" % (endpoint, prefix, spec["repo"], urllib.parse.quote(revision, safe=""),
                                      urllib.parse.quote(path))


# --------------------------------------------------------------------------- HTTP


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, req, fp, code, msg, headers, newurl):
        return None


def _ssl_context():
    """The CA bundle the requests/httpx-based hub clients would use: an explicit one from the
    environment, else certifi's when installed, else the system's."""
    import ssl

    for name in ("REQUESTS_CA_BUNDLE", "SSL_CERT_FILE", "CURL_CA_BUNDLE"):
        path = os.environ.get(name)
        if path and os.path.exists(path):
            return ssl.create_default_context(cafile=path)
    try:
        import certifi

        return ssl.create_default_context(cafile=certifi.where())
    except Exception:
        return ssl.create_default_context()


_OPENER = None


def _opener():
    global _OPENER
    if _OPENER is None:
        _OPENER = urllib.request.build_opener(_NoRedirect(), urllib.request.HTTPSHandler(context=_ssl_context()))
    return _OPENER


def _origin(url):
    s = urllib.parse.urlsplit(url)
    return "%s://%s" % (s.scheme, s.netloc)


def hub_origins(hf):
    """Origins that may see the token: the endpoint in use and huggingface_hub's default one
    (a mirror may redirect there)."""
    consts = hf.constants
    return {_origin(e) for e in (consts.ENDPOINT, getattr(consts, "_HF_DEFAULT_ENDPOINT", None)) if e}


def http_open(url, headers, method="GET", timeout=READ_TIMEOUT, follow=True, trusted=()):
    """Open `url`; follows redirects by hand so that the token never goes to another host
    (a CDN) than the hub's (`url`'s origin, or one in `trusted`). Returns the final response
    (errors are returned, not raised)."""
    headers = dict(headers)
    first_origin = _origin(url)
    for _ in range(MAX_REDIRECTS + 1):
        req = urllib.request.Request(url, headers=headers, method=method)
        try:
            resp = _opener().open(req, timeout=timeout)
        except urllib.error.HTTPError as e:
            resp = e
        code = resp.getcode()
        if follow and code in (301, 302, 303, 307, 308) and resp.headers.get("Location"):
            target = urllib.parse.urljoin(url, resp.headers["Location"])
            try:
                resp.close()
            except Exception:
                pass
            if _origin(target) != first_origin and _origin(target) not in trusted:
                headers = {k: v for k, v in headers.items() if k.lower() != "authorization"}
            url = target
            continue
        return resp
    raise _Transient("too many redirects from %s" % first_origin)


def _http_error(resp, spec, path, have_token):
    """A PlanError for a failed answer about one file."""
    code = resp.getcode()
    err = resp.headers.get("X-Error-Code")

    class _Resp:
        status_code = code
        headers = {"X-Error-Code": err, "X-Error-Message": resp.headers.get("X-Error-Message")}

    class _HttpErr(Exception):
        response = _Resp()

    return classify(_HttpErr("HTTP %d" % code), spec, what=path, have_token=have_token)


# --------------------------------------------------------------------------- local layout (as huggingface_hub)


def _short_hash(name):
    return base64.urlsafe_b64encode(hashlib.sha1(name.encode()).digest()).decode()


class LocalPaths:
    """Where hf_hub_download(local_dir=...) keeps a file, its metadata, lock and partial file."""

    def __init__(self, local_dir, path):
        parts = path.split("/")
        self.final = os.path.join(local_dir, *parts)
        self.meta = os.path.join(local_dir, ".cache", "huggingface", "download", *parts) + ".metadata"
        self.lock = self.meta[: -len(".metadata")] + ".lock"
        self.meta_dir = os.path.dirname(self.meta)
        self.meta_name = os.path.basename(self.meta)

    def incomplete(self, etag):
        return os.path.join(self.meta_dir, "%s.%s.incomplete" % (_short_hash(self.meta_name), etag))

    def stray_incompletes(self, etag):
        """Partial files of the same version left by huggingface_hub 2.x (<hash>.<etag>.<uuid>.incomplete)."""
        prefix = "%s.%s." % (_short_hash(self.meta_name), etag)
        try:
            names = os.listdir(self.meta_dir)
        except OSError:
            return []
        return [os.path.join(self.meta_dir, n) for n in names
                if n.startswith(prefix) and n.endswith(".incomplete") and n != prefix + "incomplete"]


def write_metadata(paths, commit, etag):
    os.makedirs(paths.meta_dir, exist_ok=True)
    tmp = paths.meta + ".tmp%d" % os.getpid()
    with open(tmp, "w") as f:
        f.write("%s\n%s\n%s\n" % (commit, etag, time.time()))
    os.replace(tmp, paths.meta)


def read_metadata(local_dir):
    """{path: (commit, etag)} from the .metadata records under local_dir."""
    root = os.path.join(local_dir, ".cache", "huggingface", "download")
    out = {}
    for dirpath, _dirs, names in os.walk(root):
        for n in names:
            if not n.endswith(".metadata"):
                continue
            full = os.path.join(dirpath, n)
            rel = os.path.relpath(full, root)[: -len(".metadata")].replace(os.sep, "/")
            try:
                with open(full) as f:
                    commit = f.readline().strip()
                    etag = f.readline().strip()
            except OSError:
                continue
            if etag:
                out[rel] = (commit, etag)
    return out


class _FileLock:
    """The same per-file lock hf_hub_download takes, so two downloads into one folder take turns."""

    def __init__(self, path, stop):
        self.path = path
        self.stop = stop
        self.fd = None

    def __enter__(self):
        if fcntl is None:
            return self
        os.makedirs(os.path.dirname(self.path), exist_ok=True)
        self.fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o664)
        waited = False
        while True:
            try:
                fcntl.flock(self.fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                return self
            except BlockingIOError:
                pass
            except OSError as e:  # a filesystem without flock (some Lustre/NFS mounts): go on unlocked
                log("no file locking on this filesystem (%s); not guarding against a second downloader" % e)
                os.close(self.fd)
                self.fd = None
                return self
            if not waited:
                log("waiting for another process downloading into %s" % self.path[: -len(".lock")])
                waited = True
            if self.stop.wait(0.5):
                os.close(self.fd)
                self.fd = None
                raise _Stopped()

    def __exit__(self, *exc):
        if self.fd is not None:
            try:
                fcntl.flock(self.fd, fcntl.LOCK_UN)
            finally:
                os.close(self.fd)
            self.fd = None


# --------------------------------------------------------------------------- hashing


def new_hasher(rf, size=None):
    """sha256 for LFS files; for the others git's blob id: sha1(b"blob <size>\\0" + data)."""
    if rf.sha256:
        return hashlib.sha256()
    h = hashlib.sha1()
    h.update(b"blob %d\0" % (rf.size if size is None else size))
    return h


def hash_file(path, hasher, limit=None, progress=None, stop=None, buf=None):
    """Feed `hasher` the first `limit` bytes of `path` (all when None), 4 MiB at a time."""
    buf = buf if buf is not None else bytearray(HASH_BLOCK)
    view = memoryview(buf)
    left = limit
    with open(path, "rb", buffering=0) as f:
        while left is None or left > 0:
            if stop is not None and stop.is_set():
                raise _Stopped()
            want = len(buf) if left is None else min(len(buf), left)
            n = f.readinto(view[:want])
            if not n:
                break
            hasher.update(view[:n])
            if left is not None:
                left -= n
            if progress is not None:
                progress(n)
    return hasher


class StreamHasher:
    """Hashes what is being written in a thread of its own; first the bytes already on disk."""

    def __init__(self, rf, prefix_path=None, prefix_len=0, on_hashed=None):
        self.hasher = new_hasher(rf)
        self.free = queue.Queue()
        for _ in range(NET_BUFFERS):
            self.free.put(bytearray(NET_CHUNK))
        self.work = queue.Queue()
        self.error = None
        self.on_hashed = on_hashed
        self.prefix_path = prefix_path
        self.prefix_len = prefix_len
        self.thread = threading.Thread(target=self._run, name="hash", daemon=True)
        self.thread.start()

    def _run(self):
        try:
            if self.prefix_len:
                hash_file(self.prefix_path, self.hasher, limit=self.prefix_len, progress=self.on_hashed)
        except BaseException as e:  # keep draining so the receiver never blocks
            self.error = e
        while True:
            item = self.work.get()
            if item is None:
                return
            buf, n = item
            if self.error is None:
                try:
                    self.hasher.update(memoryview(buf)[:n])
                    if self.on_hashed is not None:
                        self.on_hashed(n)
                except BaseException as e:
                    self.error = e
            self.free.put(buf)

    def buffer(self):
        return self.free.get()

    def feed(self, buf, n):
        self.work.put((buf, n))

    def give_back(self, buf):
        self.free.put(buf)

    def finish(self):
        self.work.put(None)
        self.thread.join()
        if self.error is not None:
            raise self.error
        return self.hasher.hexdigest()

    def abort(self):
        self.work.put(None)
        self.thread.join()


# --------------------------------------------------------------------------- progress


class FileState:
    __slots__ = ("path", "bytes_total", "bytes_done", "bytes_checked", "state", "fetched", "digest")

    def __init__(self, path, size):
        self.path = path
        self.bytes_total = size
        self.bytes_done = 0
        self.bytes_checked = 0
        self.state = "queued"
        self.fetched = 0  # bytes received by this run
        self.digest = None

    def to_json(self):
        return {"path": self.path, "bytes_total": self.bytes_total, "bytes_done": self.bytes_done,
                "bytes_checked": self.bytes_checked, "state": self.state}


class Progress:
    """progress.json, rewritten (tmp + os.replace) at most every PROGRESS_INTERVAL seconds."""

    def __init__(self, job_dir, job, spec):
        self.path = os.path.join(job_dir, "progress.json") if job_dir else None
        self.lock = threading.Lock()
        self.job = job
        self.spec = spec
        self.state = "queued"
        self.files = []
        self.revision = None
        self.verdict = None
        self.error = None
        self.started_at = time.time()
        self.samples = collections.deque()
        self.final_rate = None
        self.dirty = True
        self.last_write = 0.0
        self.write_lock = threading.Lock()
        self.stop_event = threading.Event()
        self.thread = None
        if self.path:
            os.makedirs(job_dir, exist_ok=True)
            self.write(force=True)
            self.thread = threading.Thread(target=self._loop, name="progress", daemon=True)
            self.thread.start()

    def set(self, **kw):
        with self.lock:
            for k, v in kw.items():
                setattr(self, k, v)
            self.dirty = True
        if "state" in kw or "verdict" in kw or "error" in kw:
            self.write()

    def fetched(self):
        return sum(f.fetched for f in self.files)

    def _rate(self, now):
        fetched = self.fetched()
        self.samples.append((now, fetched))
        while len(self.samples) > 2 and now - self.samples[1][0] >= RATE_WINDOW:
            self.samples.popleft()
        if self.final_rate is not None:
            return self.final_rate
        t0, b0 = self.samples[0]
        if now - t0 < 0.2:
            return 0.0
        return max(0.0, (fetched - b0) / (now - t0))

    def snapshot(self):
        now = time.time()
        with self.lock:
            files = [f.to_json() for f in self.files]
            total = sum(f.bytes_total or 0 for f in self.files)
            done = sum(min(f.bytes_done, f.bytes_total or 0) for f in self.files)
            checked = sum(f.bytes_checked for f in self.files)
            rate = self._rate(now)
            eta = None
            if self.state == "downloading" and rate > 0:
                eta = round((total - done) / rate, 1)
            elif self.state in ("verifying", "verified", "mismatch", "corrupt"):
                eta = 0.0
            return {
                "job": self.job, "repo": self.spec.get("repo"), "repo_type": self.spec.get("repo_type"),
                "revision": self.revision, "local_dir": self.spec.get("local_dir"),
                "state": self.state, "files": files, "bytes_total": total, "bytes_done": done,
                "bytes_checked": checked, "rate_bytes_per_s": round(rate, 1), "eta_s": eta,
                "verdict": self.verdict, "error": self.error,
                "started_at": round(self.started_at, 3), "updated_at": round(now, 3),
            }

    def write(self, force=False):
        if not self.path:
            return
        now = time.monotonic()
        if not force and now - self.last_write < PROGRESS_INTERVAL:
            self.dirty = True
            return
        with self.write_lock:
            data = scrub(json.dumps(self.snapshot(), ensure_ascii=False))
            tmp = "%s.tmp%d" % (self.path, os.getpid())
            try:
                with open(tmp, "w", encoding="utf-8") as f:
                    f.write(data + "\n")
                os.replace(tmp, self.path)
            except OSError as e:
                log("cannot write %s: %s" % (self.path, e))
            self.last_write = time.monotonic()
            self.dirty = False

    def tick(self):
        """Called by the loop; also feeds the rate window."""
        if self.dirty or self.state in ("downloading", "verifying", "resolving"):
            self.write()

    def _loop(self):
        while not self.stop_event.wait(PROGRESS_INTERVAL):
            self.tick()

    def close(self):
        self.stop_event.set()
        if self.thread is not None:
            self.thread.join()
        self.write(force=True)


# --------------------------------------------------------------------------- disk space


def nearest_existing(path):
    p = os.path.abspath(path)
    while not os.path.exists(p):
        parent = os.path.dirname(p)
        if parent == p:
            break
        p = parent
    return p


def mount_point(path):
    p = os.path.realpath(path)
    try:
        dev = os.stat(p).st_dev
        while p != os.path.dirname(p):
            parent = os.path.dirname(p)
            if os.stat(parent).st_dev != dev:
                break
            p = parent
    except OSError:
        pass
    return p


def free_bytes(path):
    st = os.statvfs(nearest_existing(path))
    return st.f_bavail * st.f_frsize


def present_bytes(local_dir, rf):
    """Bytes of `rf` already on disk: a final file of the right size, or a partial one."""
    paths = LocalPaths(local_dir, rf.path)
    try:
        if os.path.getsize(paths.final) == rf.size:
            return rf.size
    except OSError:
        pass
    best = 0
    for p in [paths.incomplete(rf.etag)] + paths.stray_incompletes(rf.etag):
        try:
            n = os.path.getsize(p)
        except OSError:
            continue
        if n <= rf.size:
            best = max(best, n)
    return best


def space_check(spec, resolved):
    local_dir = spec["local_dir"]
    have = {rf.path: present_bytes(local_dir, rf) for rf in resolved.files}
    need = sum(rf.size - have[rf.path] for rf in resolved.files)
    base = nearest_existing(local_dir)
    free = free_bytes(local_dir)
    return have, need, free, base


# --------------------------------------------------------------------------- plan


def plan(spec):
    """The download-plan answer as a dict ({"ok": true, ...} or {"ok": false, "error": ...})."""
    try:
        spec = normalize_spec(spec)
        hf = _import_hf()
        resolved, have, need, free = _plan(spec, hf)
    except PlanError as e:
        return {"ok": False, "error": e.to_json()}
    except Exception as e:  # a bug: still one line
        return {"ok": False, "error": {"type": "InternalError",
                                       "message": scrub(one_line("%s: %s" % (type(e).__name__, e)))}}
    files = []
    for rf in resolved.files:
        d = rf.to_json()
        d["present_bytes"] = have[rf.path]
        files.append(d)
    return {"ok": True, "repo": spec["repo"], "repo_type": spec["repo_type"], "revision": resolved.revision,
            "files": files, "total_bytes": sum(rf.size for rf in resolved.files), "to_fetch_bytes": need,
            "free_bytes": free, "local_dir": spec["local_dir"]}


def _plan(spec, hf):
    token = _token(hf)
    try:
        resolved = resolve(spec, hf)
    except Exception as e:
        raise classify(e, spec, have_token=bool(token))
    _probe(spec, hf, resolved, token)
    have, need, free, base = space_check(spec, resolved)
    if need > free:
        mp = mount_point(base)
        raise PlanError("NoSpace", "needs %s on %s, %s free" % (fmt_size(need), mp, fmt_size(free)),
                        needed_bytes=need, free_bytes=free, path=mp)
    return resolved, have, need, free


def _probe(spec, hf, resolved, token):
    """HEAD the smallest selected file: a gated repo's metadata is public, its files are not."""
    rf = min(resolved.files, key=lambda f: f.size)
    url = resolve_url(_endpoint(hf, spec), spec, resolved.revision, rf.path)
    headers = _hf_headers(hf)
    headers["Accept-Encoding"] = "identity"
    try:
        resp = http_open(url, headers, method="HEAD", timeout=30, follow=False)
    except (_Transient, OSError, http.client.HTTPException) as e:
        raise classify(e, spec, have_token=bool(token))
    code = resp.getcode()
    resp.close()
    if code >= 400:
        raise _http_error(resp, spec, rf.path, bool(token))


# --------------------------------------------------------------------------- download


class Downloader:
    def __init__(self, spec, hf, resolved, progress, stop):
        self.spec = spec
        self.hf = hf
        self.resolved = resolved
        self.progress = progress
        self.stop = stop
        self.local_dir = spec["local_dir"]
        self.endpoint = _endpoint(hf, spec)
        self.headers = _hf_headers(hf)
        self.headers["Accept-Encoding"] = "identity"
        self.have_token = bool(_token(hf))
        self.trusted = hub_origins(hf)
        try:
            self.retries = int(os.environ.get("SPECDECK_DOWNLOAD_RETRIES", DEFAULT_RETRIES))
        except ValueError:
            self.retries = DEFAULT_RETRIES
        try:
            self.workers = max(1, int(os.environ.get("SPECDECK_DOWNLOAD_WORKERS", DEFAULT_WORKERS)))
        except ValueError:
            self.workers = DEFAULT_WORKERS
        self.states = {}

    def run(self):
        files = sorted(self.resolved.files, key=lambda f: -f.size)
        for rf in self.resolved.files:
            st = self.progress_state(rf)
            st.bytes_done = present_bytes(self.local_dir, rf)
        todo = queue.Queue()
        for rf in files:
            todo.put(rf)
        errors = []

        def worker():
            while not self.stop.is_set():
                try:
                    rf = todo.get_nowait()
                except queue.Empty:
                    return
                try:
                    self.one(rf)
                except _Stopped:
                    return
                except BaseException as e:  # the first failure stops the others
                    self.states[rf.path].state = "failed"
                    errors.append((rf, e))
                    self.stop.set()
                    return

        threads = [threading.Thread(target=worker, name="dl%d" % i, daemon=True)
                   for i in range(min(self.workers, len(files)))]
        for t in threads:
            t.start()
        stopped_at = None
        for t in threads:
            while t.is_alive():
                t.join(0.2)
                if self.stop.is_set():
                    stopped_at = stopped_at or time.monotonic()
                    if time.monotonic() - stopped_at > STOP_GRACE:
                        break  # a read blocked on a stalled link; the partial file is consistent
        if errors:
            rf, e = errors[0]
            raise _worker_error(rf, e)
        if self.stop.is_set():
            raise _Stopped()
        return {p: st.digest for p, st in self.states.items()}

    def progress_state(self, rf):
        st = self.states.get(rf.path)
        if st is None:
            st = FileState(rf.path, rf.size)
            self.states[rf.path] = st
        return st

    def one(self, rf):
        st = self.states[rf.path]
        paths = LocalPaths(self.local_dir, rf.path)
        os.makedirs(paths.meta_dir, exist_ok=True)
        with _FileLock(paths.lock, self.stop):
            if self._already_there(rf, st, paths):
                return
            self._fetch(rf, st, paths)

    def _already_there(self, rf, st, paths):
        try:
            size = os.path.getsize(paths.final)
        except OSError:
            return False
        if size != rf.size:
            log("%s: %s on disk, %s expected; fetching it again" % (rf.path, format(size, ","), format(rf.size, ",")))
            os.unlink(paths.final)
            st.bytes_done = 0
            return False
        st.state = "checking"
        st.bytes_checked = 0

        def on_hashed(n):
            st.bytes_checked += n

        digest = hash_file(paths.final, new_hasher(rf), progress=on_hashed, stop=self.stop).hexdigest()
        if digest == rf.etag:
            st.digest = digest
            st.state = "present"
            st.bytes_done = rf.size
            write_metadata(paths, self.resolved.revision, rf.etag)
            log("%s: already here and intact (%s)" % (rf.path, fmt_size(rf.size)))
            return True
        log("%s: on disk but its %s is %s, %s expected; fetching it again"
            % (rf.path, "sha256" if rf.sha256 else "git blob id", short(digest), short(rf.etag)))
        os.unlink(paths.final)
        st.bytes_done = 0
        st.bytes_checked = 0
        return False

    def _fetch(self, rf, st, paths):
        part = paths.incomplete(rf.etag)
        if not os.path.exists(part):
            strays = sorted(paths.stray_incompletes(rf.etag), key=lambda p: -os.path.getsize(p))
            if strays and os.path.getsize(strays[0]) <= rf.size:
                os.replace(strays[0], part)
                log("%s: continuing a partial file left by another downloader" % rf.path)
        f = open(part, "ab", buffering=0)
        try:
            have = f.tell()
            if have > rf.size:
                log("%s: partial file larger than the file (%d > %d); starting over" % (rf.path, have, rf.size))
                f.truncate(0)
                have = 0
            st.bytes_done = have
            st.bytes_checked = 0

            def on_hashed(n):
                st.bytes_checked += n

            hasher = StreamHasher(rf, part, have, on_hashed)
            if have:
                log("%s: resuming at byte %s of %s" % (rf.path, format(have, ","), format(rf.size, ",")))
            else:
                log("%s: downloading %s" % (rf.path, fmt_size(rf.size)))
            url = resolve_url(self.endpoint, self.spec, self.resolved.revision, rf.path)
            left = self.retries
            delay = 1.0
            try:
                while True:
                    if self.stop.is_set():
                        raise _Stopped()
                    if st.bytes_done >= rf.size:
                        break
                    st.state = "downloading"
                    before = st.bytes_done
                    try:
                        hasher = self._get(url, rf, st, f, hasher, part, on_hashed)
                    except _Transient as e:
                        progressed = st.bytes_done > before
                        if progressed:  # a link that drops now and then: go on at once
                            left = self.retries
                            delay = 1.0
                        if left <= 0:
                            raise PlanError("NetworkUnreachable", "%s: download failed at byte %s of %s: %s"
                                            % (rf.path, format(st.bytes_done, ","), format(rf.size, ","),
                                               one_line(scrub(str(e)))))
                        left -= 1
                        st.state = "retrying"
                        wait = 0.0 if progressed else delay
                        log("%s: %s; retrying from byte %s in %.0f s" % (rf.path, one_line(scrub(str(e))),
                                                                         format(st.bytes_done, ","), wait))
                        if self.stop.wait(wait):
                            raise _Stopped()
                        if not progressed:
                            delay = min(delay * 2, 30.0)
                digest = hasher.finish()
                hasher = None
            finally:
                if hasher is not None:
                    hasher.abort()
        finally:
            empty = f.tell() == 0 and rf.size > 0
            f.close()
            if empty:  # stopped before a byte arrived: leave no empty partial file behind
                try:
                    os.unlink(part)
                except OSError:
                    pass
        os.makedirs(os.path.dirname(paths.final), exist_ok=True)
        os.replace(part, paths.final)
        write_metadata(paths, self.resolved.revision, rf.etag)
        st.digest = digest
        st.state = "downloaded"
        log("%s: done" % rf.path)

    def _get(self, url, rf, st, f, hasher, part, on_hashed):
        offset = st.bytes_done
        headers = dict(self.headers)
        if offset:
            headers["Range"] = "bytes=%d-" % offset
        try:
            resp = http_open(url, headers, timeout=READ_TIMEOUT, trusted=self.trusted)
        except (OSError, http.client.HTTPException) as e:
            raise _Transient(str(e) or type(e).__name__)
        try:
            code = resp.getcode()
            if code in (408, 429) or code >= 500:
                raise _Transient("server answered HTTP %d" % code)
            if code == 416:
                log("%s: the server cannot continue at byte %s; starting over" % (rf.path, format(offset, ",")))
                hasher = self._restart(rf, st, f, hasher, part, on_hashed)
                raise _Transient("range not satisfiable")
            if code >= 400:
                raise _http_error(resp, self.spec, rf.path, self.have_token)
            if code == 206:
                m = re.match(r"bytes (\d+)-", resp.headers.get("Content-Range") or "")
                if m is None or int(m.group(1)) != offset:
                    raise _Transient("server answered range %r for bytes=%d-" % (resp.headers.get("Content-Range"),
                                                                                 offset))
            elif code == 200:
                if offset:
                    log("%s: the server ignored the range request; starting over" % rf.path)
                    hasher = self._restart(rf, st, f, hasher, part, on_hashed)
                    offset = 0
            else:
                raise PlanError("HubError", "%s: unexpected HTTP %d" % (rf.path, code))
            # Read in slices (progress and stop stay responsive on slow links), write each slice
            # at once (the partial file always holds exactly the bytes counted), and hand whole
            # buffers to the hashing thread.
            want = rf.size - offset
            buf, view, filled = None, None, 0
            try:
                while want > 0:
                    if self.stop.is_set():
                        raise _Stopped()
                    if buf is None:
                        buf = hasher.buffer()
                        view = memoryview(buf)
                        filled = 0
                    k = min(READ_SLICE, len(buf) - filled, want)
                    try:
                        n = resp.readinto(view[filled:filled + k])
                    except (OSError, http.client.HTTPException, ValueError) as e:
                        raise _Transient("connection lost: %s" % (str(e) or type(e).__name__))
                    if not n:
                        raise _Transient("connection closed early")
                    _write_all(f, view[filled:filled + n])
                    filled += n
                    want -= n
                    st.bytes_done += n
                    st.fetched += n
                    if filled == len(buf):
                        hasher.feed(buf, filled)
                        buf = None
            finally:
                if buf is not None:
                    if filled:
                        hasher.feed(buf, filled)
                    else:
                        hasher.give_back(buf)
            return hasher
        finally:
            resp.close()

    def _restart(self, rf, st, f, hasher, part, on_hashed):  # noqa: D401
        hasher.abort()
        f.truncate(0)
        st.bytes_done = 0
        st.bytes_checked = 0
        return StreamHasher(rf, part, 0, on_hashed)


def _write_all(f, view):
    while len(view):
        n = f.write(view)
        if n is None or n <= 0:
            raise OSError(28, "short write")
        view = view[n:]


def _worker_error(rf, e):
    """A PlanError for what stopped the download of `rf`."""
    if isinstance(e, PlanError):
        return e
    if isinstance(e, OSError) and e.errno in (28, 122):  # ENOSPC, EDQUOT
        return PlanError("NoSpace", "disk full while writing %s: %s" % (rf.path, e.strerror or e))
    if isinstance(e, _Transient):
        return PlanError("NetworkUnreachable", "%s: %s" % (rf.path, one_line(scrub(str(e)))))
    if isinstance(e, OSError):
        return PlanError("InternalError", "%s: %s" % (rf.path, one_line(scrub(str(e)))))
    return PlanError("InternalError", "%s: %s: %s" % (rf.path, type(e).__name__, one_line(scrub(str(e)))))


# --------------------------------------------------------------------------- verification


def compare(rf, size, digest):
    """None if `rf` matches, else the mismatch line."""
    if size is None:
        return "mismatch in %s: missing (%s expected)" % (rf.path, fmt_size(rf.size))
    if rf.size is not None and size != rf.size:
        return "mismatch in %s: %s bytes expected, %s found" % (rf.path, format(rf.size, ","), format(size, ","))
    if rf.sha256:
        if digest != rf.sha256:
            return "mismatch in %s: sha256 %s expected, %s found" % (rf.path, short(rf.sha256), short(digest))
    elif rf.blob_id:
        if digest != rf.blob_id:
            return "mismatch in %s: git blob id %s expected, %s found" % (rf.path, short(rf.blob_id), short(digest))
    return None


def _checkpoint_module():
    try:
        if __package__:
            import importlib
            return importlib.import_module(__package__ + ".checkpoint")
        import checkpoint  # type: ignore
        return checkpoint
    except ImportError as e:
        if e.name and e.name.endswith("checkpoint"):
            return None
        log("checkpoint inspection unavailable: %s" % e)
        return None


def inspect_checkpoint(spec, resolved):
    """(errors, warnings, note) from remote.checkpoint.inspect, when it exists and applies."""
    if spec["repo_type"] != "model":
        return [], [], None
    wanted = set(rf.path for rf in resolved.files)
    weights = [p for p in resolved.all_paths if p.endswith(".safetensors") or p.endswith(".safetensors.index.json")]
    if not any(p.endswith(".safetensors") for p in wanted):
        return [], [], None
    if any(p not in wanted for p in weights):
        return [], [], "checkpoint inspection skipped: only part of the repo's safetensors files were selected"
    mod = _checkpoint_module()
    if mod is None or not hasattr(mod, "inspect"):
        return [], [], None
    try:
        report = mod.inspect(spec["local_dir"], sha256=False)
    except Exception as e:
        return [], [], "checkpoint inspection failed: %s" % one_line("%s: %s" % (type(e).__name__, e))
    problems = (report or {}).get("problems") or []
    errors = [one_line(p.get("message", "")) for p in problems if p.get("level") == "error"]
    warnings = [one_line(p.get("message", "")) for p in problems if p.get("level") == "warning"]
    return errors, warnings, None


def verdict_for(spec, resolved, results, progress):
    """results: {path: (size or None, digest or None)}. Returns (state, verdict dict)."""
    mismatches = []
    for rf in resolved.files:
        size, digest = results[rf.path]
        line = compare(rf, size, digest)
        st = progress_file(progress, rf.path)
        if line is None:
            if st is not None:
                st.state = "verified"
        else:
            mismatches.append((rf, line))
            if st is not None:
                st.state = "missing" if size is None else "mismatch"
    if mismatches:
        rf, line = mismatches[0]
        msg = line + (" (+%d more)" % (len(mismatches) - 1) if len(mismatches) > 1 else "")
        for _rf, l in mismatches:
            log(l)
        return "mismatch", {"status": "mismatch", "message": msg, "file": rf.path,
                            "files": [m[0].path for m in mismatches]}
    total = sum(rf.size for rf in resolved.files)
    what = "sha256" if all(rf.sha256 for rf in resolved.files) else (
        "git blob id" if not any(rf.sha256 for rf in resolved.files) else "sha256 (LFS) and git blob id")
    msg = "verified %d file%s, %s, %s at %s" % (len(resolved.files), "" if len(resolved.files) == 1 else "s",
                                               fmt_size(total), what, (resolved.revision or "?")[:12])
    errors, warnings, note = inspect_checkpoint(spec, resolved)
    if errors:
        return "corrupt", {"status": "corrupt", "message": "corrupt: %s" % errors[0]
                           + (" (+%d more)" % (len(errors) - 1) if len(errors) > 1 else "")}
    if warnings:
        msg += "; checkpoint: %d warning%s (%s)" % (len(warnings), "" if len(warnings) == 1 else "s", warnings[0])
    if note:
        msg += "; " + note
    if resolved.source != "hub":
        msg += "; expected hashes from %s" % resolved.source
    return "verified", {"status": "verified", "message": msg}


def progress_file(progress, path):
    for f in progress.files:
        if f.path == path:
            return f
    return None


def hash_tree(spec, resolved, progress, stop, workers=None):
    """Hash every selected file from disk: {path: (size or None, digest or None)}."""
    results = {}
    todo = queue.Queue()
    for rf in sorted(resolved.files, key=lambda f: -(f.size or 0)):
        todo.put(rf)

    def work():
        buf = bytearray(HASH_BLOCK)
        while not stop.is_set():
            try:
                rf = todo.get_nowait()
            except queue.Empty:
                return
            st = progress_file(progress, rf.path)
            path = LocalPaths(spec["local_dir"], rf.path).final
            try:
                size = os.path.getsize(path)
            except OSError:
                results[rf.path] = (None, None)
                continue
            if st is not None:
                st.state = "verifying"
                st.bytes_done = size

            def on(n, st=st):
                if st is not None:
                    st.bytes_checked += n

            if rf.size is not None and size != rf.size:
                results[rf.path] = (size, None)
                continue
            try:
                h = hash_file(path, new_hasher(rf, size), progress=on, stop=stop, buf=buf)
            except OSError as e:
                log("%s: cannot read: %s" % (rf.path, e))
                results[rf.path] = (None, None)
                continue
            results[rf.path] = (size, h.hexdigest())

    n = workers or max(1, min(4, os.cpu_count() or 1, len(resolved.files)))
    threads = [threading.Thread(target=work, daemon=True) for _ in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        while t.is_alive():
            t.join(0.5)
    if stop.is_set():
        raise _Stopped()
    return results


def resolve_offline(spec):
    """Expected hashes from the .metadata records hf_hub_download and this job leave in local_dir."""
    meta = read_metadata(spec["local_dir"])
    if not meta:
        return None
    spec["_revision_label"] = "local metadata"
    all_paths = sorted(meta)
    chosen = select_paths(all_paths, spec)
    files, commits = [], set()
    for p in chosen:
        commit, etag = meta[p]
        commits.add(commit)
        if re.fullmatch(r"[0-9a-f]{64}", etag):
            files.append(RemoteFile(p, None, etag, None))
        else:
            files.append(RemoteFile(p, None, None, etag))
    if not files:
        return None
    return Resolved(commits.pop() if len(commits) == 1 else None, files, all_paths, source="local metadata")


# --------------------------------------------------------------------------- jobs


def _install_signals(stop):
    def handler(signum, _frame):
        stop.set()
        stop.signum = signum

    if threading.current_thread() is threading.main_thread():
        for s in (signal.SIGTERM, signal.SIGINT):  # not SIGHUP: a nohup'd job must outlive its shell
            try:
                signal.signal(s, handler)
            except (OSError, ValueError):
                pass


def _fail(progress, message, verdict=None):
    message = one_line(scrub(message))
    log("error: %s" % message)
    progress.set(state="failed", error=message, verdict=verdict)
    return 2


def run_download(spec):
    job_dir = os.environ.get("SPECDECK_JOB_DIR")
    progress = Progress(job_dir, "download", spec)
    stop = threading.Event()
    stop.signum = None
    _install_signals(stop)
    t_start = time.monotonic()
    try:
        log("download %s%s at %s into %s" % ("dataset " if spec["repo_type"] == "dataset" else "", spec["repo"],
                                             spec.get("revision") or "main", spec["local_dir"]))
        progress.set(state="resolving")
        try:
            hf = _import_hf()
            resolved, have, need, free = _plan(spec, hf)
        except PlanError as e:
            return _fail(progress, "%s: %s" % (e.type, e.message))
        total = sum(rf.size for rf in resolved.files)
        log("revision %s: %d file%s, %s; %s to fetch, %s free" % (
            resolved.revision, len(resolved.files), "" if len(resolved.files) == 1 else "s", fmt_size(total),
            fmt_size(need), fmt_gb(free)))
        dl = Downloader(spec, hf, resolved, progress, stop)
        progress.files = [dl.progress_state(rf) for rf in resolved.files]
        progress.set(revision=resolved.revision, state="downloading")
        os.makedirs(spec["local_dir"], exist_ok=True)
        t_dl = time.monotonic()
        try:
            digests = dl.run()
        except PlanError as e:
            return _fail(progress, "%s: %s" % (e.type, e.message))
        t_last_byte = time.monotonic()
        fetched = progress.fetched()
        rate = fetched / max(t_last_byte - t_dl, 1e-6)
        progress.final_rate = rate if fetched else 0.0
        log("downloaded %s in %.2f s (%.1f MB/s)" % (fmt_size(fetched), t_last_byte - t_dl, rate / 1e6))
        progress.set(state="verifying")
        results = {}
        for rf in resolved.files:
            path = LocalPaths(spec["local_dir"], rf.path).final
            try:
                size = os.path.getsize(path)
            except OSError:
                size = None
            results[rf.path] = (size, digests.get(rf.path))
        missing_digest = [rf for rf in resolved.files if results[rf.path][1] is None and results[rf.path][0]]
        if missing_digest:
            sub = Resolved(resolved.revision, missing_digest, resolved.all_paths)
            results.update(hash_tree(spec, sub, progress, stop))
        state, verdict = verdict_for(spec, resolved, results, progress)
        log("%s (%.2f s after the last byte; %.1f s in all)" % (verdict["message"], time.monotonic() - t_last_byte,
                                                                 time.monotonic() - t_start))
        progress.set(state=state, verdict=verdict)
        return 0 if state == "verified" else 1
    except _Stopped:
        sig = getattr(stop, "signum", None)
        name = signal.Signals(sig).name if sig else "a signal"
        kept = sum(f.bytes_done for f in progress.files)
        return _fail(progress, "stopped by %s; %s on disk are kept for the next run" % (name, fmt_size(kept)))
    except Exception as e:
        return _fail(progress, "internal error: %s: %s" % (type(e).__name__, e))
    finally:
        progress.close()


def run_verify(spec):
    job_dir = os.environ.get("SPECDECK_JOB_DIR")
    progress = Progress(job_dir, "verify", spec)
    stop = threading.Event()
    stop.signum = None
    _install_signals(stop)
    verdict = None
    code = 2
    try:
        progress.set(state="resolving")
        resolved = None
        if not os.path.isdir(spec["local_dir"]):
            raise PlanError("FileNotFound", "%s is not a directory" % spec["local_dir"])
        offline_reason = None
        try:
            hf = _import_hf()
            token = _token(hf)
            try:
                resolved = resolve(spec, hf)
            except Exception as e:
                err = classify(e, spec, have_token=bool(token))
                if err.type != "NetworkUnreachable":
                    raise err
                offline_reason = err.message
        except PlanError as e:
            if e.type != "MissingDependency":
                raise
            offline_reason = e.message
        if resolved is None:
            resolved = resolve_offline(spec)
            if resolved is None:
                raise PlanError("NetworkUnreachable", offline_reason + "; and no download metadata in %s"
                                % spec["local_dir"])
            log("hub unavailable (%s); using the hashes recorded when the files were downloaded" % offline_reason)
        progress.files = [FileState(rf.path, rf.size) for rf in resolved.files]
        progress.set(revision=resolved.revision, state="verifying")
        log("verifying %d file%s in %s" % (len(resolved.files), "" if len(resolved.files) == 1 else "s",
                                           spec["local_dir"]))
        t0 = time.monotonic()
        results = hash_tree(spec, resolved, progress, stop)
        for rf in resolved.files:  # offline: sizes come from the disk
            if rf.size is None and results[rf.path][0] is not None:
                rf.size = results[rf.path][0]
        state, verdict = verdict_for(spec, resolved, results, progress)
        log("%s (%.2f s)" % (verdict["message"], time.monotonic() - t0))
        progress.set(state=state, verdict=verdict)
        code = 0 if state == "verified" else 1
        verdict = dict(verdict, revision=resolved.revision, files=[
            {"path": rf.path, "size": rf.size, "state": progress_file(progress, rf.path).state}
            for rf in resolved.files])
    except _Stopped:
        verdict = {"status": "error", "message": "stopped"}
        _fail(progress, "stopped", verdict)
    except PlanError as e:
        verdict = {"status": "error", "message": scrub(one_line(e.message)), "type": e.type}
        _fail(progress, "%s: %s" % (e.type, e.message), verdict)
    except Exception as e:
        verdict = {"status": "error", "message": scrub(one_line("%s: %s" % (type(e).__name__, e))),
                   "type": "InternalError"}
        _fail(progress, verdict["message"], verdict)
    finally:
        progress.close()
    print(scrub(json.dumps(verdict, ensure_ascii=False)), flush=True)
    return code


USAGE = "usage: download|download-plan|verify SPEC.json"


def main(argv=None):
    argv = list(sys.argv[1:] if argv is None else argv)
    if len(argv) != 2 or argv[0] not in ("download", "download-plan", "verify"):
        print(USAGE, file=sys.stderr)
        return 2
    cmd, spec_path = argv
    if cmd == "download-plan":
        try:
            spec = load_spec(spec_path)
            answer = plan(spec)
        except PlanError as e:
            answer = {"ok": False, "error": e.to_json()}
        print(scrub(json.dumps(answer, ensure_ascii=False)), flush=True)
        return 0 if answer.get("ok") else 2
    try:
        spec = load_spec(spec_path)
    except PlanError as e:
        progress = Progress(os.environ.get("SPECDECK_JOB_DIR"), cmd, {})
        try:
            if cmd == "verify":
                verdict = {"status": "error", "message": e.message, "type": e.type}
                _fail(progress, "%s: %s" % (e.type, e.message), verdict)
                print(json.dumps(verdict), flush=True)
                return 2
            return _fail(progress, "%s: %s" % (e.type, e.message))
        finally:
            progress.close()
    if cmd == "download":
        return run_download(spec)
    return run_verify(spec)


if __name__ == "__main__":
    sys.exit(main())
