"""Talking to the hub for the download job: the spec and the files it selects, the file list with
sizes and hashes from huggingface_hub (imported lazily), failures classified into PlanError types,
and the HTTP opener that follows redirects by hand so the token stays with the hub. Also the
job's shared basics: PlanError, token scrubbing, the scrubbed log and size formatting."""

from __future__ import annotations

import fnmatch
import json
import os
import re
import socket
import sys
import threading
import time
import urllib.error
import urllib.parse
import urllib.request

from ..core.hashing import Stopped

GB = 1000 ** 3
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


_Stopped = Stopped  # the job is being cancelled (raised by hashing too)


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
        raise PlanError("MissingDependency", "huggingface_hub is not installed for %s; remember an interpreter "
                        "that has it with `specdeck config HOST --ml-python PATH` (--host-python PATH for once), "
                        "or pip install huggingface_hub there" % sys.executable)
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
        from .. import AGENT_VERSION
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
