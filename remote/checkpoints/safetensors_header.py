"""Safetensors headers read and checked without touching tensor data: the front door of the
header reader, which takes the fast path a header allows and the exact one otherwise.

- header_json: reading the header bytes, and the exact parser that refuses what safetensors refuses
- header_fast: whole-list checks for headers of many well-formed entries (canonical and plain)
- header_checks: entry-by-entry checks that word each problem, and the data-section tiling
- dtypes, problems: the dtype table; the error classes and message helpers
Their public names are importable from here. Standard library only, Python 3.9+.
"""

from .columns import TensorColumns
from .dtypes import DTYPE_BITS, INT_FORMATS, U64_MAX
from .header_checks import MAX_UNKNOWN_FIELD_DEPTH, check_header, check_header_rows
from .header_fast import parse_canonical, parse_plain, plain_columns
from .header_json import MAX_HEADER_BYTES, parse_header_json, read_header, read_raw_header
from .problems import CheckpointError, CheckpointIOError, HeaderError

__all__ = [
    "CheckpointError", "CheckpointIOError", "HeaderError", "DTYPE_BITS", "INT_FORMATS", "U64_MAX",
    "MAX_HEADER_BYTES", "MAX_UNKNOWN_FIELD_DEPTH", "read_header", "parse_header_json", "check_header",
    "check_header_rows", "read_header_columns", "read_header_rows",
]


def read_header_columns(path):
    """(TensorColumns, problems, data start, file size) of one file: check_header_rows(read_header(path))
    as columns, the same answer, fast for a header of many well-formed entries.

    A header in safetensors' own compact spelling is matched by one regular expression, any other
    one parsed by the C parser, and both checked as whole lists; a header with anything unusual
    in it is read again by the exact parser and checked entry by entry.
    """
    raw, data_start, file_size = read_raw_header(path)
    data_bytes = file_size - data_start
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        text = None  # the exact parser words it
    checked = parse_canonical(text, data_bytes) if text is not None else None
    if checked is None:
        header = parse_plain(raw)
        if header is not None:
            checked = plain_columns(header, data_bytes)
            del header
    if checked is None:
        rows, problems = check_header_rows(parse_header_json(raw), data_bytes)
        checked = TensorColumns.from_rows(rows), problems
    columns, problems = checked
    return columns, problems, data_start, file_size


def read_header_rows(path):
    """(rows, problems, data start, file size): read_header_columns with each tensor a tuple
    (name, dtype, shape, bytes, begin, end)."""
    columns, problems, data_start, file_size = read_header_columns(path)
    return columns.rows(), problems, data_start, file_size
