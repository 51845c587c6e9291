"""Scanning a long line with a regex in pieces, so that one match attempt over a megabyte of a
hostile log does not hold the GIL (and every other thread of the daemon) for tens of ms. The
log readers (logparse.py, datagen.py) find their patterns through it."""

PIECE_CHARS = 32768  # a long line is scanned this much at a time, so other threads get the GIL between
MATCH_CHARS = 512  # no pattern of the log readers matches more than this (bounded quantifiers)


def finditer_pieces(pattern, text):
    """pattern.finditer over text, in pieces of PIECE_CHARS: the regex engine holds the GIL for
    the whole of one call, and a megabyte-long line without a match is one call of tens of ms
    (a ping waits that long). Pieces overlap by MATCH_CHARS and a match counts in the piece it
    starts in, so every match is whole and found once; lookbehinds see before a piece's start."""
    if len(text) <= PIECE_CHARS:
        return pattern.finditer(text)  # the common case: one call, no generator
    return _pieces(pattern, text)


def _pieces(pattern, text):
    pos, last_end, length = 0, 0, len(text)
    while pos < length:
        piece_end = pos + PIECE_CHARS
        for match in pattern.finditer(text, pos, min(length, piece_end + MATCH_CHARS)):
            if match.start() >= piece_end:
                break
            if match.start() >= last_end:  # not inside the previous piece's last match
                last_end = max(match.end(), match.start() + 1)
                yield match
        pos = piece_end
