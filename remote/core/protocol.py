"""The wire: one JSON object per line, bounded in size, flushed per frame.

Frames:
  hello   {"type": "hello", "protocol", "agent_version", "build", "capabilities", ...}
  request {"id": N, "method": "jobs.list", "params": {...}}
  reply   {"id": N, "ok": true, "result": ...}
          {"id": N, "ok": false, "error": {"type": "NotFound", "message": "..."}}
  stream  {"stream": "s3", "seq": N, "data": {...}}      (seq only grows)
          {"stream": "s3", "end": true, "data": {...}}
Unknown fields are ignored. A line that is not a JSON object is skipped with a log line.
"""

import json

# Large enough for the tensor listing of a checkpoint with tens of thousands of tensors,
# small enough that a runaway line cannot exhaust memory on either side.
MAX_FRAME_BYTES = 16 * 1024 * 1024


class ProtocolError(Exception):
    """A frame that cannot be understood: not JSON, not an object, or too large."""


class RemoteError(Exception):
    """An `error` reply from the agent, raised on the caller's side.

    `type` is a short machine-readable kind (NotFound, BadRequest, ...); `message` is
    one human line, shown as is.
    """

    def __init__(self, type_, message):
        super().__init__(message)
        self.type = type_
        self.message = message

    def to_wire(self):
        return {"type": self.type, "message": self.message}


class BadRequest(RemoteError):
    def __init__(self, message):
        super().__init__("BadRequest", message)


class NotFound(RemoteError):
    def __init__(self, message):
        super().__init__("NotFound", message)


def encode(frame):
    """One frame as bytes, newline-terminated. Refuses frames above the limit."""
    data = json.dumps(frame, separators=(",", ":"), ensure_ascii=False).encode("utf-8") + b"\n"
    if len(data) > MAX_FRAME_BYTES:
        raise ProtocolError("frame of %d bytes exceeds the %d-byte limit" % (len(data), MAX_FRAME_BYTES))
    return data


def decode(line):
    """Parse one line (bytes, without or with its newline) into a dict."""
    if len(line) > MAX_FRAME_BYTES:
        raise ProtocolError("frame of %d bytes exceeds the %d-byte limit" % (len(line), MAX_FRAME_BYTES))
    try:
        frame = json.loads(line.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as exc:
        raise ProtocolError("frame is not JSON: %s" % exc) from None
    if not isinstance(frame, dict):
        raise ProtocolError("frame is not a JSON object")
    return frame


class FrameReader:
    """Reads newline-delimited frames from a binary stream without ever buffering more
    than the frame limit: an oversized line is discarded up to its newline and reported.

    `read` is a callable returning up to n bytes (b"" at end of stream).
    """

    def __init__(self, read, chunk_size=65536):
        self._read = read
        self._chunk_size = chunk_size
        self._buffer = bytearray()
        self._discarding = False
        self._eof = False

    def __iter__(self):
        return self

    def __next__(self):
        """The next frame (a dict) or a ProtocolError instance for a bad line; StopIteration at EOF."""
        while True:
            newline = self._buffer.find(b"\n")
            if newline >= 0:
                line = bytes(self._buffer[:newline])
                del self._buffer[: newline + 1]
                if self._discarding:
                    self._discarding = False
                    return ProtocolError("frame exceeds the %d-byte limit; skipped" % MAX_FRAME_BYTES)
                if not line.strip():
                    continue
                try:
                    return decode(line)
                except ProtocolError as exc:
                    return exc
            if len(self._buffer) > MAX_FRAME_BYTES:
                self._buffer.clear()
                self._discarding = True
            if self._eof:
                raise StopIteration
            chunk = self._read(self._chunk_size)
            if not chunk:
                self._eof = True
                if self._buffer and not self._discarding:
                    self._buffer.extend(b"\n")
                continue
            self._buffer.extend(chunk)
