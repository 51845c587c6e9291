"""A real HTTP server that answers the parts of the Hugging Face Hub API that downloads use.

It is a plain `http.server.ThreadingHTTPServer` on 127.0.0.1 (a free port), serving repos
that a test builds from bytes or files on disk. What it answers, as the hub does:

  GET  /api/{models|datasets}/{repo}[/revision/{rev}][?blobs=true]   repo info with siblings
  POST /api/{models|datasets}/{repo}/paths-info/{rev}                paths=..&paths=.. (form or JSON)
  GET  /api/{models|datasets}/{repo}/paths-info/{rev}?paths=..       same, as a GET
  GET  /api/{models|datasets}/{repo}/tree/{rev}[/{dir}][?recursive=true]
  HEAD/GET /{repo}/resolve/{rev}/{path}            (models)
  HEAD/GET /datasets/{repo}/resolve/{rev}/{path}   (datasets)
  GET  /cdn/{sha256}                               (LFS bytes behind a redirect, see lfs_redirect)

resolve answers carry X-Repo-Commit, ETag (the git blob id, or the LFS sha256), for LFS files
X-Linked-Etag and X-Linked-Size, Content-Length, Accept-Ranges; GET honours `Range: bytes=a-b`
with 206/Content-Range (416 when unsatisfiable). Errors carry the hub's X-Error-Code
(RepoNotFound, RevisionNotFound, EntryNotFound, GatedRepo) and X-Error-Message headers.

A gated repo's metadata is public (as on the hub); its files need `Authorization: Bearer <token>`
with a token the server knows (401 without one, 403 with a wrong one). A private repo answers
401 RepoNotFound everywhere without a known token; one added with private="credentials"
answers 401 "Invalid credentials in Authorization header" with no error code, as some mirrors
answer an anonymous request.

Knobs for tests (all thread-safe, all cleared by `reset_knobs`):
  drop_connection(repo, path, after_bytes, times=1)   cut GET bodies of that file after N bytes
  corrupt(repo, path, offset=0, length=1, times=None) serve different bytes than the sha256 says
  throttle(bytes_per_s, repo=None, path=None)          slow GET bodies (all files, or one);
                                                       0 halts them (the connection open, no
                                                       byte sent) until the rate changes
  first_byte_delay(seconds)                            a file's GET waits this long before its answer
  lfs_redirect = True                                  LFS resolve answers 302 to a "CDN" on
                                                       http://localhost:PORT (another host name)
  tree_page_size = N                                   tree listings come in pages of N entries
Records: `requests` (one dict per request: method, path, range, auth (a bearer token was sent),
token (which one, kept in memory only), status), `bytes_served(repo, path)`, `range_starts(repo, path)`.

Run it by hand:  python3 tests/hubserver.py serve org/name=DIR [org/other=DIR2 ...]
"""

import argparse
import hashlib
import json
import os
import re
import socket
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, quote, unquote, urlsplit

LFS_SUFFIXES = (
    ".safetensors", ".bin", ".pt", ".pth", ".ckpt", ".gguf", ".h5", ".msgpack", ".onnx",
    ".parquet", ".arrow", ".npy", ".npz", ".pkl", ".tar", ".gz", ".zip", ".model",
)
LFS_MIN_SIZE = 10 * 1024 * 1024
DEFAULT_TOKEN = "hf_fakehubSECRETtoken0123456789abcdefXYZ"


def git_blob_sha1(data=None, path=None, size=None):
    """The git object id of a blob: sha1(b"blob <size>\\0" + content)."""
    h = hashlib.sha1()
    if data is not None:
        h.update(b"blob %d\0" % len(data))
        h.update(data)
        return h.hexdigest()
    h.update(b"blob %d\0" % size)
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 22), b""):
            h.update(block)
    return h.hexdigest()


class Entry:
    """One file of one commit."""

    def __init__(self, path, data=None, source=None, lfs=None):
        self.path = path
        self.data = data
        self.source = source
        if data is not None:
            self.size = len(data)
            self.sha256 = hashlib.sha256(data).hexdigest()
        else:
            self.size = os.path.getsize(source)
            h = hashlib.sha256()
            with open(source, "rb") as f:
                for block in iter(lambda: f.read(1 << 22), b""):
                    h.update(block)
            self.sha256 = h.hexdigest()
        if lfs is None:
            lfs = path.endswith(LFS_SUFFIXES) or self.size >= LFS_MIN_SIZE
        self.lfs = lfs
        if lfs:
            self.pointer = (
                "version https://git-lfs.github.com/spec/v1\noid sha256:%s\nsize %d\n" % (self.sha256, self.size)
            ).encode()
            self.oid = git_blob_sha1(self.pointer)
        else:
            self.pointer = None
            self.oid = git_blob_sha1(data) if data is not None else git_blob_sha1(path=source, size=self.size)

    @property
    def etag(self):
        return self.sha256 if self.lfs else self.oid

    def read(self, start, end):
        """Bytes [start, end)."""
        if self.data is not None:
            return self.data[start:end]
        with open(self.source, "rb") as f:
            f.seek(start)
            return f.read(end - start)

    def tree_entry(self):
        d = {"type": "file", "oid": self.oid, "size": self.size, "path": self.path}
        if self.lfs:
            d["lfs"] = {"oid": self.sha256, "size": self.size, "pointerSize": len(self.pointer)}
        return d

    def sibling(self, blobs):
        d = {"rfilename": self.path}
        if blobs:
            d["size"] = self.size
            d["blobId"] = self.oid
            if self.lfs:
                d["lfs"] = {"sha256": self.sha256, "size": self.size, "pointerSize": len(self.pointer)}
        return d


class Repo:
    def __init__(self, repo_id, repo_type, gated, private, tokens):
        self.repo_id = repo_id
        self.repo_type = repo_type
        self.gated = gated
        self.private = private
        self.tokens = set(tokens)
        self.commits = {}  # sha -> {path: Entry}
        self.refs = {}  # branch/tag -> sha

    def resolve(self, revision):
        if revision in self.refs:
            return self.refs[revision]
        if revision in self.commits:
            return revision
        return None


class _Knobs:
    def __init__(self):
        self.drops = {}  # (repo_type, repo_id, path) -> [after_bytes, times_left or None]
        self.corruptions = {}  # key -> [offset, length, times_left or None]
        self.throttle_all = None
        self.throttles = {}  # key -> bytes_per_s
        self.first_byte_delay_s = 0.0


class FakeHub:
    """The server and the repos it serves. Start with `start()`, stop with `stop()`."""

    def __init__(self, root=None, token=DEFAULT_TOKEN):
        self.root = root
        self.token = token
        self.repos = {}  # (repo_type, repo_id) -> Repo
        self.lock = threading.Lock()
        self.knobs = _Knobs()
        self.lfs_redirect = False
        self.tree_page_size = None  # paginate tree listings (Link: <...>; rel="next"), as the hub does
        self.requests = []
        self._served = {}  # key -> bytes sent in bodies
        self._server = None
        self._thread = None
        self._counter = 0

    # ----- lifecycle

    def start(self, host="127.0.0.1"):
        """Serve on `host` (loopback by default; a test host's peer address to be reached from it)."""
        hub = self

        class Handler(_Handler):
            pass

        Handler.hub = hub
        self._server = ThreadingHTTPServer((host, 0), Handler)
        self._server.daemon_threads = True
        self.port = self._server.server_address[1]
        self.url = "http://%s:%d" % (host, self.port)
        self.cdn_url = "http://localhost:%d" % self.port
        self._thread = threading.Thread(target=self._server.serve_forever, name="fakehub", daemon=True)
        self._thread.start()
        return self

    def stop(self):
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None

    # ----- repos

    def add_repo(self, repo_id, files, repo_type="model", gated=False, private=False, lfs=None,
                 branch="main", tokens=None):
        """Create the repo (or add a commit to it) with `files` ({path: bytes or a file path}).

        `lfs`: None (LFS by suffix or size >= 10 MiB, like a usual .gitattributes), or a set of
        paths stored in LFS. Returns the new commit's sha (40 hex digits).
        """
        key = (repo_type, repo_id)
        with self.lock:
            repo = self.repos.get(key)
            if repo is None:
                repo = Repo(repo_id, repo_type, gated, private, tokens or [self.token])
                self.repos[key] = repo
            entries = {}
            for path, content in files.items():
                is_lfs = None if lfs is None else (path in lfs)
                if isinstance(content, (bytes, bytearray)):
                    entries[path] = Entry(path, data=bytes(content), lfs=is_lfs)
                else:
                    entries[path] = Entry(path, source=os.fspath(content), lfs=is_lfs)
            self._counter += 1
            h = hashlib.sha1(("%s/%s#%d" % (repo_type, repo_id, self._counter)).encode())
            for path in sorted(entries):
                h.update(path.encode() + b"\0" + entries[path].oid.encode())
            sha = h.hexdigest()
            repo.commits[sha] = entries
            repo.refs[branch] = sha
            return sha

    def tag(self, repo_id, name, sha, repo_type="model"):
        with self.lock:
            self.repos[(repo_type, repo_id)].refs[name] = sha

    # ----- knobs

    def drop_connection(self, repo_id, path, after_bytes, times=1, repo_type="model"):
        """Cut the next `times` GET bodies of this file after `after_bytes` bytes (None: every time)."""
        with self.lock:
            self.knobs.drops[(repo_type, repo_id, path)] = [after_bytes, times]

    def corrupt(self, repo_id, path, offset=0, length=1, times=None, repo_type="model"):
        """Serve bytes [offset, offset+length) of this file inverted (sizes unchanged)."""
        with self.lock:
            self.knobs.corruptions[(repo_type, repo_id, path)] = [offset, length, times]

    def throttle(self, bytes_per_s, repo_id=None, path=None, repo_type="model"):
        """Limit GET bodies to `bytes_per_s` (None lifts it, 0 halts them), for one file or for all."""
        with self.lock:
            if repo_id is None:
                self.knobs.throttle_all = bytes_per_s
            else:
                self.knobs.throttles[(repo_type, repo_id, path)] = bytes_per_s

    def first_byte_delay(self, seconds):
        with self.lock:
            self.knobs.first_byte_delay_s = seconds

    def reset_knobs(self):
        with self.lock:
            self.knobs = _Knobs()
            self.lfs_redirect = False

    # ----- records

    def bytes_served(self, repo_id, path, repo_type="model"):
        with self.lock:
            return self._served.get((repo_type, repo_id, path), 0)

    def range_starts(self, repo_id, path, repo_type="model"):
        """Start offsets of the Range headers of GETs for this file (0 for a GET without one)."""
        with self.lock:
            return [r["range_start"] for r in self.requests
                    if r["method"] == "GET" and r.get("file") == (repo_type, repo_id, path)]

    def file_requests(self, repo_id, path, repo_type="model"):
        with self.lock:
            return [dict(r) for r in self.requests if r.get("file") == (repo_type, repo_id, path)]

    def _record(self, rec):
        with self.lock:
            self.requests.append(rec)

    def _add_served(self, key, n):
        with self.lock:
            self._served[key] = self._served.get(key, 0) + n

    def _take_drop(self, key):
        with self.lock:
            d = self.knobs.drops.get(key)
            if d is None:
                return None
            after, times = d
            if times is not None:
                if times <= 0:
                    return None
                d[1] = times - 1
            return after

    def _take_corruption(self, key):
        with self.lock:
            c = self.knobs.corruptions.get(key)
            if c is None:
                return None
            offset, length, times = c
            if times is not None:
                if times <= 0:
                    return None
                c[2] = times - 1
            return offset, length

    def _rate(self, key):
        with self.lock:
            return self.knobs.throttles.get(key, self.knobs.throttle_all)


_API_RE = re.compile(r"^/api/(models|datasets|spaces)/(.+)$")
_RESOLVE_RE = re.compile(r"^/(?:(datasets|spaces)/)?(.+?)/resolve/([^/]+)/(.+)$")
_TYPES = {"models": "model", "datasets": "dataset", "spaces": "space"}


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    hub = None  # set on the subclass
    server_version = "fakehub/1"

    def log_message(self, fmt, *args):  # quiet
        pass

    # ----- plumbing

    def _bearer(self):
        auth = self.headers.get("Authorization") or ""
        if auth.lower().startswith("bearer "):
            return auth[7:].strip()
        return None

    def _send(self, status, body=b"", headers=None, ctype="application/json"):
        if isinstance(body, (dict, list)):
            body = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def _error(self, status, code, message, extra=None):
        headers = {"X-Error-Message": message}
        if code:
            headers["X-Error-Code"] = code
        headers.update(extra or {})
        self._rec["status"] = status
        self._send(status, {"error": message}, headers)

    def _repo_access(self, repo):
        """None if the caller may read the repo's metadata, else an error already sent."""
        if repo.private and self._bearer() not in repo.tokens:
            if repo.private == "credentials":
                self._error(401, None, "Invalid credentials in Authorization header")
            else:
                self._error(401, "RepoNotFound", "Repository not found")
            return False
        return True

    def _find_repo(self, repo_type, rest, markers):
        """Split `rest` into (repo, remainder after one of the markers or None)."""
        hub = self.hub
        for marker in markers:
            idx = rest.find(marker)
            if idx > 0:
                repo_id = rest[:idx]
                repo = hub.repos.get((repo_type, repo_id))
                if repo is not None:
                    return repo, marker, rest[idx + len(marker):]
        repo = hub.repos.get((repo_type, rest))
        return repo, None, None

    # ----- verbs

    def do_HEAD(self):
        self._dispatch()

    def do_GET(self):
        self._dispatch()

    def do_POST(self):
        self._dispatch()

    def _dispatch(self):
        split = urlsplit(self.path)
        raw_path = split.path
        self._rec = {"method": self.command, "path": raw_path, "range": self.headers.get("Range"),
                     "range_start": 0, "auth": self._bearer() is not None, "token": self._bearer(), "status": None,
                     "time": time.time()}
        self.hub._record(self._rec)
        self._body = b""
        if self.command == "POST":
            length = int(self.headers.get("Content-Length") or 0)
            self._body = self.rfile.read(length) if length else b""
        try:
            if raw_path.startswith("/api/"):
                self._api(raw_path, parse_qs(split.query))
            elif raw_path.startswith("/cdn/"):
                self._cdn(raw_path[len("/cdn/"):])
            else:
                m = _RESOLVE_RE.match(raw_path)
                if m is None:
                    self._error(404, None, "Not found")
                else:
                    repo_type = _TYPES[m.group(1)] if m.group(1) else "model"
                    self._resolve(repo_type, unquote(m.group(2)), unquote(m.group(3)), unquote(m.group(4)))
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True

    # ----- /api

    def _api(self, raw_path, query):
        m = _API_RE.match(raw_path)
        if m is None:
            return self._error(404, None, "Not found")
        repo_type = _TYPES[m.group(1)]
        rest = m.group(2)
        repo, marker, tail = self._find_repo(repo_type, rest, ("/revision/", "/paths-info/", "/tree/"))
        if repo is None:
            return self._error(404, "RepoNotFound", "Repository not found")
        if not self._repo_access(repo):
            return
        if marker is None:
            return self._info(repo, "main", query)
        if marker == "/revision/":
            return self._info(repo, unquote(tail), query)
        if marker == "/paths-info/":
            return self._paths_info(repo, unquote(tail), query)
        # tree: {rev}[/{path}]
        rev, _, sub = tail.partition("/")
        return self._tree(repo, unquote(rev), unquote(sub), query)

    def _commit(self, repo, revision):
        sha = repo.resolve(revision)
        if sha is None:
            self._error(404, "RevisionNotFound", "Invalid rev id: %s" % revision)
            return None, None
        return sha, repo.commits[sha]

    def _info(self, repo, revision, query):
        sha, files = self._commit(repo, revision)
        if sha is None:
            return
        blobs = (query.get("blobs") or ["false"])[0].lower() in ("1", "true")
        body = {
            "_id": hashlib.md5(repo.repo_id.encode()).hexdigest()[:24],
            "id": repo.repo_id,
            "author": repo.repo_id.split("/")[0],
            "sha": sha,
            "lastModified": "2025-01-01T00:00:00.000Z",
            "private": repo.private,
            "gated": "manual" if repo.gated else False,
            "disabled": False,
            "downloads": 0,
            "likes": 0,
            "tags": [],
            "siblings": [files[p].sibling(blobs) for p in sorted(files)],
        }
        if repo.repo_type == "model":
            body["modelId"] = repo.repo_id
        if blobs:
            body["usedStorage"] = sum(e.size for e in files.values())
        self._rec["status"] = 200
        self._send(200, body)

    def _paths_info(self, repo, revision, query):
        sha, files = self._commit(repo, revision)
        if sha is None:
            return
        paths = list(query.get("paths", []))
        if self.command == "POST":
            raw = self._body
            ctype = self.headers.get("Content-Type") or ""
            if "json" in ctype:
                paths += list(json.loads(raw or b"{}").get("paths") or [])
            else:
                paths += parse_qs(raw.decode()).get("paths", [])
        out = []
        dirs = _dirs_of(files)
        for p in paths:
            p = p.strip("/")
            if p in files:
                out.append(files[p].tree_entry())
            elif p in dirs:
                out.append({"type": "directory", "oid": hashlib.sha1(p.encode()).hexdigest(), "size": 0, "path": p})
        self._rec["status"] = 200
        self._send(200, out)

    def _tree(self, repo, revision, sub, query):
        sha, files = self._commit(repo, revision)
        if sha is None:
            return
        recursive = (query.get("recursive") or ["false"])[0].lower() in ("1", "true")
        sub = sub.strip("/")
        dirs = _dirs_of(files)
        if sub and sub not in dirs:
            return self._error(404, "EntryNotFound", "%s does not exist on %s" % (sub, revision))
        prefix = sub + "/" if sub else ""
        out = []
        for d in sorted(dirs):
            if d and d.startswith(prefix) and (recursive or "/" not in d[len(prefix):]):
                out.append({"type": "directory", "oid": hashlib.sha1(d.encode()).hexdigest(), "size": 0, "path": d})
        for p in sorted(files):
            if p.startswith(prefix) and (recursive or "/" not in p[len(prefix):]):
                out.append(files[p].tree_entry())
        headers = {}
        size = self.hub.tree_page_size
        if size:
            start = int((query.get("cursor") or ["0"])[0])
            if start + size < len(out):
                q = {k: v[0] for k, v in query.items()}
                q["cursor"] = str(start + size)
                nxt = "%s%s?%s" % (self.hub.url, urlsplit(self.path).path,
                                   "&".join("%s=%s" % (k, quote(v, safe="")) for k, v in q.items()))
                headers["Link"] = '<%s>; rel="next"' % nxt
            out = out[start:start + size]
        self._rec["status"] = 200
        self._send(200, out, headers)

    # ----- resolve and bytes

    def _resolve(self, repo_type, repo_id, revision, path):
        hub = self.hub
        repo = hub.repos.get((repo_type, repo_id))
        if repo is None:
            return self._error(404, "RepoNotFound", "Repository not found")
        if not self._repo_access(repo):
            return
        if repo.gated:
            token = self._bearer()
            if token is None:
                return self._error(401, "GatedRepo", "Access to model %s is restricted. You must have access to it "
                                   "and be authenticated to access it. Please log in." % repo_id)
            if token not in repo.tokens:
                return self._error(403, "GatedRepo", "Access to model %s is restricted and you are not in the "
                                   "authorized list." % repo_id)
        sha, files = self._commit(repo, revision)
        if sha is None:
            return
        entry = files.get(path)
        if entry is None:
            return self._error(404, "EntryNotFound", "Entry not found", {"X-Repo-Commit": sha})
        key = (repo_type, repo_id, path)
        self._rec["file"] = key
        headers = {"X-Repo-Commit": sha, "ETag": '"%s"' % entry.etag, "Accept-Ranges": "bytes"}
        if entry.lfs:
            headers["X-Linked-Etag"] = '"%s"' % entry.sha256
            headers["X-Linked-Size"] = str(entry.size)
            if hub.lfs_redirect:
                location = "%s/cdn/%s?repo=%s&type=%s&path=%s" % (
                    hub.cdn_url, entry.sha256, quote(repo_id, safe=""), repo_type, quote(path, safe=""))
                headers["Location"] = location
                self._rec["status"] = 302
                return self._send(302, b"", headers, ctype="text/plain")
        self._bytes(entry, key, headers)

    def _cdn(self, rest):
        split = urlsplit(self.path)
        q = parse_qs(split.query)
        try:
            key = (q["type"][0], q["repo"][0], q["path"][0])
            repo = self.hub.repos[key[:2]]
        except (KeyError, IndexError):
            return self._error(404, None, "Not found")
        entry = None
        for files in repo.commits.values():
            e = files.get(key[2])
            if e is not None and e.sha256 == rest.split("?")[0]:
                entry = e
        if entry is None:
            return self._error(404, None, "Not found")
        self._rec["file"] = key
        self._rec["cdn"] = True
        self._bytes(entry, key, {"ETag": '"%s"' % entry.sha256, "Accept-Ranges": "bytes"})

    def _bytes(self, entry, key, headers):
        size = entry.size
        start, end = 0, size  # [start, end)
        status = 200
        rng = self.headers.get("Range")
        if rng:
            m = re.match(r"^\s*bytes=(\d*)-(\d*)\s*$", rng)
            if m is None or (m.group(1) == "" and m.group(2) == ""):
                return self._error(416, None, "Bad range", {"Content-Range": "bytes */%d" % size})
            if m.group(1) == "":
                start, end = max(0, size - int(m.group(2))), size
            else:
                start = int(m.group(1))
                end = min(size, int(m.group(2)) + 1) if m.group(2) else size
            if start >= size or start >= end:
                self._rec["range_start"] = start
                return self._error(416, None, "Requested range not satisfiable",
                                   {"Content-Range": "bytes */%d" % size})
            status = 206
            headers["Content-Range"] = "bytes %d-%d/%d" % (start, end - 1, size)
        self._rec["range_start"] = start
        self._rec["status"] = status
        if self.command == "GET":
            with self.hub.lock:
                delay = self.hub.knobs.first_byte_delay_s
            if delay:
                time.sleep(delay)
        self.send_response(status)
        self.send_header("Content-Type", "application/octet-stream")
        for k, v in headers.items():
            self.send_header(k, v)
        self.send_header("Content-Length", str(end - start))
        self.end_headers()
        if self.command == "HEAD":
            return
        hub = self.hub
        drop = hub._take_drop(key)
        corruption = hub._take_corruption(key)
        rate = hub._rate(key)
        limit = end if drop is None else min(end, start + drop)
        if drop is None and corruption is None and rate is None and entry.source is not None:
            # The fast path: the kernel copies the file to the socket.
            self.wfile.flush()
            with open(entry.source, "rb") as f:
                sent = self.connection.sendfile(f, start, end - start)
            hub._add_served(key, sent)
            self._rec["bytes"] = sent
            return
        pos = start
        t0 = time.monotonic()
        sent = 0
        paced = 0  # bytes sent since t0 under the current rate
        src = open(entry.source, "rb") if entry.source is not None else None
        try:
            while pos < limit:
                rate = hub._rate(key)  # read each time: a test may lift or change it mid-body
                if rate == 0:  # halted: the connection stays open and nothing moves
                    while rate == 0 and hub._server is not None:
                        time.sleep(0.05)
                        rate = hub._rate(key)
                    if hub._server is None:
                        break
                    t0, paced = time.monotonic(), 0
                chunk = 1 << 20 if not rate else max(1024, min(1 << 20, int(rate) // 20))
                n = min(chunk, limit - pos)
                if src is not None:
                    src.seek(pos)
                    data = src.read(n)
                else:
                    data = entry.data[pos:pos + n]
                if corruption is not None:
                    c_off, c_len = corruption
                    lo, hi = max(pos, c_off), min(pos + n, c_off + c_len)
                    if lo < hi:
                        data = bytearray(data)
                        for i in range(lo - pos, hi - pos):
                            data[i] ^= 0xFF
                        data = bytes(data)
                self.wfile.write(data)
                pos += n
                sent += n
                hub._add_served(key, n)
                if rate:
                    paced += n
                    ahead = paced / float(rate) - (time.monotonic() - t0)
                    if ahead > 0:
                        time.sleep(ahead)
                else:
                    t0, paced = time.monotonic(), 0
        finally:
            if src is not None:
                src.close()
        self._rec["bytes"] = sent
        if pos < end:
            # Cut the connection mid-body, as a failing link would.
            self._rec["dropped_at"] = pos
            self.wfile.flush()
            try:
                self.connection.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            self.close_connection = True


def _dirs_of(files):
    dirs = set()
    for p in files:
        parts = p.split("/")[:-1]
        for i in range(1, len(parts) + 1):
            dirs.add("/".join(parts[:i]))
    return dirs


def main(argv=None):
    ap = argparse.ArgumentParser(description="Serve directories as hub repos on 127.0.0.1.")
    sub = ap.add_subparsers(dest="cmd", required=True)
    s = sub.add_parser("serve")
    s.add_argument("repos", nargs="+", help="org/name=DIR (every file under DIR), or dataset:org/name=DIR")
    s.add_argument("--throttle", type=int, default=None, help="bytes per second for every GET body")
    args = ap.parse_args(argv)
    hub = FakeHub()
    for spec in args.repos:
        name, _, directory = spec.partition("=")
        repo_type = "model"
        if name.startswith("dataset:"):
            repo_type, name = "dataset", name[len("dataset:"):]
        files = {}
        for dirpath, dirnames, filenames in os.walk(directory):
            dirnames[:] = [d for d in dirnames if not d.startswith(".")]
            for fn in filenames:
                full = os.path.join(dirpath, fn)
                files[os.path.relpath(full, directory).replace(os.sep, "/")] = full
        sha = hub.add_repo(name, files, repo_type=repo_type)
        print("repo %s %s (%d files) at %s" % (repo_type, name, len(files), sha), file=sys.stderr)
    if args.throttle:
        hub.throttle(args.throttle)
    hub.start()
    print(hub.url, flush=True)
    try:
        while True:
            time.sleep(3600)
    except KeyboardInterrupt:
        pass
    finally:
        hub.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
