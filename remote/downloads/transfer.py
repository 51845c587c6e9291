"""Moving the bytes of a download: the files fetched by a few worker threads, each through a
ranged GET that continues its partial file after a dropped link or a second run, retried with
backoff (reset whenever bytes arrive), written as it arrives and hashed while receiving."""

from __future__ import annotations

import http.client
import os
import queue
import re
import threading
import time

from ..core.hashing import Stopped, hash_file
from .digests import StreamHasher, new_hasher
from .disk_space import present_bytes
from .failures import PlanError, http_error
from .hub import hub_endpoint, hub_headers, hub_token, resolve_url
from .hub_http import READ_TIMEOUT, Transient, http_open, hub_origins
from .layout import FileLock, LocalPaths, write_metadata
from .output import fmt_size, log, one_line, scrub, short
from .progress import FileState

# One read, written to disk at once: it starts at SLICE_MIN and doubles while a read comes back
# within SLICE_FAST_S (a fast link: fewer, larger reads and writes, up to a whole hashing buffer),
# halving when one takes longer than SLICE_SLOW_S (a slow link: progress and stop stay responsive).
SLICE_MIN = 256 * 1024
SLICE_FAST_S = 0.02
SLICE_SLOW_S = 0.2
STOP_GRACE = 2.0  # seconds a stopped job waits for reads blocked on a stalled link
DEFAULT_WORKERS = 4
DEFAULT_RETRIES = 5  # per file, reset whenever bytes arrive (env SPECDECK_DOWNLOAD_RETRIES)


class Downloader:
    """The files of a resolved spec fetched into local_dir, biggest first, by a few threads;
    run() returns each file's digest, or raises the PlanError of the first file that failed (Stopped
    when the job is stopped)."""

    def __init__(self, spec, hf, resolved, progress, stop):
        self.spec = spec
        self.hf = hf
        self.resolved = resolved
        self.progress = progress
        self.stop = stop
        self.local_dir = spec["local_dir"]
        self.endpoint = hub_endpoint(hf, spec)
        self.headers = hub_headers(hf)
        self.have_token = bool(hub_token(hf))
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
                except Stopped:
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
            raise Stopped()
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
        with FileLock(paths.lock, self.stop):
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
            log("%s: already here and intact, %s" % (rf.path, fmt_size(rf.size)))
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
                        raise Stopped()
                    if st.bytes_done >= rf.size:
                        break
                    st.state = "downloading"
                    before = st.bytes_done
                    try:
                        hasher = self._get(url, rf, st, f, hasher, part, on_hashed)
                    except Transient as e:
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
                            raise Stopped()
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
            raise Transient(str(e) or type(e).__name__)
        try:
            code = resp.getcode()
            if code in (408, 429) or code >= 500:
                raise Transient("server answered HTTP %d" % code)
            if code == 416:
                log("%s: the server cannot continue at byte %s; starting over" % (rf.path, format(offset, ",")))
                hasher = self._restart(rf, st, f, hasher, part, on_hashed)
                raise Transient("range not satisfiable")
            if code >= 400:
                raise http_error(resp, self.spec, rf.path, self.have_token)
            if code == 206:
                m = re.match(r"bytes (\d+)-", resp.headers.get("Content-Range") or "")
                if m is None or int(m.group(1)) != offset:
                    raise Transient("server answered range %r for bytes=%d-" % (resp.headers.get("Content-Range"),
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
            slice_bytes = SLICE_MIN
            try:
                while want > 0:
                    if self.stop.is_set():
                        raise Stopped()
                    if buf is None:
                        buf = hasher.buffer()
                        view = memoryview(buf)
                        filled = 0
                    k = min(slice_bytes, len(buf) - filled, want)
                    t0 = time.monotonic()
                    try:
                        n = resp.readinto(view[filled:filled + k])
                    except (OSError, http.client.HTTPException, ValueError) as e:
                        raise Transient("connection lost: %s" % (str(e) or type(e).__name__))
                    if not n:
                        raise Transient("connection closed early")
                    took = time.monotonic() - t0
                    if took < SLICE_FAST_S:
                        slice_bytes = min(slice_bytes * 2, len(buf))
                    elif took > SLICE_SLOW_S:
                        slice_bytes = max(slice_bytes // 2, SLICE_MIN)
                    _write_all(f, view[filled:filled + n])
                    filled += n
                    want -= n
                    st.bytes_done += n
                    st.fetched += n
                    if st.fetched == n:  # this file's first bytes of the run
                        self.progress.first_byte()
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
    if isinstance(e, Transient):
        return PlanError("NetworkUnreachable", "%s: %s" % (rf.path, one_line(scrub(str(e)))))
    if isinstance(e, OSError):
        return PlanError("InternalError", "%s: %s" % (rf.path, one_line(scrub(str(e)))))
    return PlanError("InternalError", "%s: %s: %s" % (rf.path, type(e).__name__, one_line(scrub(str(e)))))
