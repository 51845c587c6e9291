"""The wire: one JSON object per line, bounded in size, flushed per frame.

Frames:
  hello   {"type": "hello", "protocol", "agent_version", "build", "capabilities", ...}
  request {"id": N, "method": "jobs.list", "params": {...}}
  reply   {"id": N, "ok": true, "result": ...}
          {"id": N, "ok": false, "error": {"type": "NotFound", "message": "..."}}
  stream  {"stream": "s3", "seq": N, "data": {...}}      (seq only grows)
          {"stream": "s3", "end": true, "data": {...}}
Unknown fields are ignored. A line that is not a JSON object is skipped with a log line; one
nested deeper than MAX_DEPTH is refused (with the id it carries, when one can be read).
"""

import json
import re

# Large enough for the tensor listing of a checkpoint with tens of thousands of tensors,
# small enough that a runaway line cannot exhaust memory on either side.
MAX_FRAME_BYTES = 16 * 1024 * 1024

# No frame of ours nests more than a few levels; json's parser recurses, so a frame thousands
# deep would raise RecursionError, and one just under the limit could not be echoed back.
MAX_DEPTH = 100

# Where a frame too deep to parse is searched for its id (ours come first in the frame).
ID_SCAN_BYTES = 65536
TOO_DEEP = "frame nested more than %d levels deep" % MAX_DEPTH
_TOKEN = re.compile(r'"(?:[^"\\]|\\.)*"|[\[\]{}:]')
_DECODER = json.JSONDecoder()


class ProtocolError(Exception):
    """A frame that cannot be understood: not JSON, not an object, too large or too deep.
    `request_id`: the id the frame carried, when one could be read (then it gets a reply)."""

    def __init__(self, message, request_id=None):
        super().__init__(message)
        self.request_id = request_id


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


class Busy(RemoteError):
    def __init__(self, message):
        super().__init__("Busy", message)


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
    except RecursionError:
        raise ProtocolError(TOO_DEEP, find_request_id(line)) from None
    if not isinstance(frame, dict):
        raise ProtocolError("frame is not a JSON object")
    # Counting brackets is cheap and rules out almost every frame before the walk.
    if line.count(b"[") + line.count(b"{") > MAX_DEPTH and _deeper_than(frame, MAX_DEPTH):
        request_id = frame.get("id")
        raise ProtocolError(TOO_DEEP, request_id if _is_scalar(request_id) else None)
    return frame


def _deeper_than(value, limit):
    """Whether lists and objects nest more than `limit` deep, without recursion."""
    pending = [(value, 1)]
    while pending:
        item, depth = pending.pop()
        if depth > limit:
            return True
        for child in item.values() if isinstance(item, dict) else item:
            if isinstance(child, (dict, list)):
                pending.append((child, depth + 1))
    return False


def _is_scalar(value):
    return isinstance(value, (int, float, str)) and not isinstance(value, bool)


def find_request_id(line):
    """The top-level `id` of a frame that json cannot parse (too deep), or None. Reads only the
    first ID_SCAN_BYTES, token by token, so it neither recurses nor takes long."""
    text = line[:ID_SCAN_BYTES].decode("utf-8", "replace")
    if not text.lstrip().startswith("{"):
        return None
    depth, previous = 0, None
    for match in _TOKEN.finditer(text):
        token = match.group()
        if token in ("{", "["):
            depth += 1
        elif token in ("}", "]"):
            depth -= 1
        elif token == ":" and depth == 1 and previous == '"id"':
            start = match.end()
            while start < len(text) and text[start] in " \t\r\n":
                start += 1
            if text[start:start + 1] in ("[", "{", ""):
                return None  # ids are scalars; a nested value is not parsed (it may be the deep part)
            try:
                value, _ = _DECODER.raw_decode(text, start)
            except ValueError:
                return None
            return value if _is_scalar(value) else None
        previous = token
    return None


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
