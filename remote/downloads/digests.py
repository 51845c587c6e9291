"""The digest that names a hub file (sha256 for LFS files, git's blob id for the others) and
StreamHasher, which computes it in a thread of its own while the bytes arrive, so verifying a
download after its last byte compares digests instead of reading the files again."""

from __future__ import annotations

import hashlib
import queue
import threading

from ..core.hashing import hash_file

NET_CHUNK = 4 * 1024 * 1024  # one network read
NET_BUFFERS = 4  # buffers in flight between the receiving and the hashing thread, per file


def new_hasher(rf, size=None):
    """sha256 for LFS files; for the others git's blob id: sha1(b"blob <size>\\0" + data)."""
    if rf.sha256:
        return hashlib.sha256()
    h = hashlib.sha1()
    h.update(b"blob %d\0" % (rf.size if size is None else size))
    return h


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
