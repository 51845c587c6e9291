"""How a download job fails: PlanError, a failure with a type from PLAN_ERROR_TYPES and one human
line, and the classification of what huggingface_hub (any version), the network or a failed
answer about one file raise into one of those types."""

from __future__ import annotations

import socket

from .output import one_line, scrub

PLAN_ERROR_TYPES = (
    "RepoNotFound", "FileNotFound", "RevisionNotFound", "AuthRequired", "NetworkUnreachable",
    "NoSpace", "BadRequest", "MissingDependency", "HubError", "InternalError",
)


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
    anonymous = have_token is False
    if status in (401, 403) and anonymous and "GatedRepoError" not in names and code not in ("GatedRepo", "RepoNotFound"):
        # No token was sent, so no token was refused: the hub wants one for this repository.
        return PlanError("AuthRequired", "%s refused an anonymous request for %s%s (HTTP %d): the repository is gated or "
                         "private, and this host sends no token; %s" % (where, kind, repo, status, login_hint))
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


def http_error(resp, spec, path, have_token):
    """A PlanError for a failed answer about one file."""
    code = resp.getcode()
    err = resp.headers.get("X-Error-Code")

    class _Resp:
        status_code = code
        headers = {"X-Error-Code": err, "X-Error-Message": resp.headers.get("X-Error-Message")}

    class _HttpErr(Exception):
        response = _Resp()

    return classify(_HttpErr("HTTP %d" % code), spec, what=path, have_token=have_token)
