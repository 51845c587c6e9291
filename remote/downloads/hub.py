"""The hub as huggingface_hub (imported lazily) sees it from this host: its token, endpoint and
request headers, and what a spec selects at one commit, each file with its size, LFS sha256 and
git blob id, asked of the hub's metadata calls; plus the URL a file's bytes come from."""

from __future__ import annotations

import sys
import urllib.parse

from .failures import PlanError
from .output import remember_secret
from .spec import check_names, select_paths

USER_AGENT_LIBRARY = "specdeck"


def import_hf():
    """The huggingface_hub module, or MissingDependency naming this interpreter."""
    try:
        import huggingface_hub  # noqa: F401 (lazy on purpose)
    except ImportError:
        raise PlanError("MissingDependency", "huggingface_hub is not installed for %s; remember an interpreter "
                        "that has it with `specdeck config HOST --ml-python PATH` (--host-python PATH for once), "
                        "or pip install huggingface_hub there" % sys.executable)
    return huggingface_hub


def hub_token(hf):
    """The token huggingface_hub would send (None without one); scrubbed from all output from now on."""
    token = None
    try:
        getter = getattr(hf, "get_token", None)
        if getter is None:
            getter = hf.HfFolder.get_token
        token = getter()
    except Exception:
        token = None
    remember_secret(token)
    return token


def hub_endpoint(hf, spec):
    """The hub's base URL: the spec's endpoint, else huggingface_hub's (HF_ENDPOINT)."""
    if spec.get("endpoint"):
        return spec["endpoint"]
    return hf.constants.ENDPOINT.rstrip("/")


def hub_headers(hf):
    """huggingface_hub's headers (token included) for a request about a file's bytes, asking for
    them as stored: ranges, sizes and hashes all count stored bytes."""
    from huggingface_hub.utils import build_hf_headers

    headers = dict(build_hf_headers(library_name=USER_AGENT_LIBRARY, library_version=_agent_version()))
    for v in headers.values():
        if isinstance(v, str) and v.lower().startswith("bearer "):
            remember_secret(v[7:])
    headers["Accept-Encoding"] = "identity"
    return headers


def _agent_version():
    try:
        from .. import AGENT_VERSION
        return AGENT_VERSION
    except ImportError:
        return "0"


class RemoteFile:
    """One file of the repo: its size and the digest that names it (etag: the LFS sha256, else the git blob id)."""

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
    """The files a spec selects at one commit (`source`: where their expected hashes came from)."""

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
    spec["_endpoint_label"] = hub_endpoint(hf, spec)
    explicit_only = bool(spec["files"]) and not spec["include"]
    info = api.repo_info(repo, repo_type=repo_type, revision=rev)
    sha = getattr(info, "sha", None)
    if not sha:
        raise PlanError("HubError", "the hub gave no commit for %s at %s" % (repo, rev))
    spec["_revision_label"] = revision_label(spec, sha)
    all_paths = [s.rfilename for s in (getattr(info, "siblings", None) or [])]
    check_names(all_paths, repo)
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
        check_names([f.path for f in files], repo)
        if not all_paths:
            all_paths = list(spec["files"])
    else:
        # The tree listing is paginated, so it is complete even for repos with many files.
        by_path = {}
        for e in api.list_repo_tree(repo, repo_type=repo_type, revision=sha, recursive=True):
            if getattr(e, "size", None) is not None and hasattr(e, "blob_id"):
                by_path[e.path] = e
        all_paths = sorted(by_path)
        check_names(all_paths, repo)
        chosen = select_paths(all_paths, spec)
        files = [RemoteFile(p, by_path[p].size, _lfs_sha256(by_path[p].lfs), by_path[p].blob_id) for p in chosen]
    if not files:
        raise PlanError("FileNotFound", "no file of %s at %s matches include %s exclude %s (%d files in the repo)"
                        % (repo, spec["_revision_label"], spec["include"] or ["*"], spec["exclude"], len(all_paths)))
    return Resolved(sha, files, all_paths)


def revision_label(spec, commit):
    """The revision for messages: `main (1a2b3c4)` when the asked one resolved to `commit`."""
    asked = spec.get("revision") or "main"
    return asked if asked == commit else "%s (%s)" % (asked, commit[:7])


def resolve_url(endpoint, spec, revision, path):
    """The URL hf_hub_download fetches a file's bytes from, at a commit."""
    prefix = "datasets/" if spec["repo_type"] == "dataset" else ""
    return "%s/%s%s/resolve/%s/%s" % (endpoint, prefix, spec["repo"], urllib.parse.quote(revision, safe=""),
                                      urllib.parse.quote(path))
