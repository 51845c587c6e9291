"""Checkpoints from the command line: inspect and compare, here or on a host.

A checkpoint is read where it lies: in this process for a local path, by the host's agent
otherwise; either way the report comes with the first page of tensors, and the rest come
page by page (`checkpoint.tensors`), so a 100,000-tensor target never needs one giant frame.
Two checkpoints of one host are compared there (`checkpoint.compare`: only the result crosses
the wire); two of different machines are compared here from their reports.
"""

import itertools
import json
import sys

from ..cli.common import EXIT_FAILED, CommandError, connect, emit, exit_code_for, split_host_path

PAGE_TENSORS = 5000


def add_commands(commands):
    p = commands.add_parser("inspect", help="list and check a safetensors checkpoint")
    p.set_defaults(func=cmd_inspect)
    p.add_argument("path", metavar="[HOST:]PATH")
    p.add_argument("--sha256", action="store_true", help="also hash every file")
    p.add_argument("--all", action="store_true",
                   help="list every tensor even of a huge checkpoint (else it is summarised by name pattern)")

    p = commands.add_parser("compare", help="compare two checkpoints: drop-in initialisation, or a drafter against a target model")
    p.set_defaults(func=cmd_compare)
    p.add_argument("a", metavar="[HOST:]A")
    p.add_argument("b", metavar="[HOST:]B")
    p.add_argument("--trained-for", metavar="TARGET", help="a drafter against a new target: the target it was trained for (same host), "
                   "whose tokenizer the new one's is checked against")


class _LocalCheckpoint(object):
    """A checkpoint on this machine, read in this process: summarised shard after shard when only
    the summary is wanted (summary_stream: no listing kept), else listed for its pages."""

    def __init__(self, path):
        self.path = path
        self.listing = None

    def inspect(self, sha256=False, pages=True):
        from remote.checkpoints import listing

        try:
            if not pages:
                from remote.checkpoints import summary_stream

                found = summary_stream.summary(self.path, sha256=sha256)
                if found is not None:
                    return found
            self.listing = listing.open_listing(self.path)
        except listing.report.CheckpointIOError as exc:
            raise _io_error(exc)
        return self.listing.summary(sha256=sha256)

    def page(self, offset, limit):
        return self.listing.page(offset, limit)


class _HostCheckpoint(object):
    """A checkpoint on a host, listed by its agent."""

    def __init__(self, client, path):
        self.client = client
        self.path = path
        self.handle = None

    def inspect(self, sha256=False, pages=True):
        reply = self._call("checkpoint.inspect", {"path": self.path, "sha256": sha256}, 3600)
        self.handle = reply.get("handle")
        return reply

    def page(self, offset, limit):
        # By handle and path: the host reads the checkpoint again if it dropped the listing.
        return self._call("checkpoint.tensors", {"handle": self.handle, "path": self.path, "offset": offset,
                                                 "limit": limit}, 600)

    def _call(self, method, params, timeout):
        return self.client.call(method, params, timeout=timeout)


def _checkpoint(args, target):
    host, path = split_host_path(target)
    if host is None:
        return _LocalCheckpoint(path)
    return _HostCheckpoint(connect(args, host), path)


def _pages(checkpoint, first):
    """Every tensor after the first page, a page at a time."""
    offset = len(first.get("tensors") or [])
    while offset < first.get("tensor_count", offset):
        tensors = checkpoint.page(offset, PAGE_TENSORS)["tensors"]
        if not tensors:
            return
        yield tensors
        offset += len(tensors)


def _full_report(checkpoint):
    """The report with every tensor in it (compare matches them all)."""
    report = checkpoint.inspect()
    if not report.get("complete", True):
        for tensors in _pages(checkpoint, report):
            report["tensors"] += tensors
        report["complete"] = True
    return report


def cmd_inspect(args):
    checkpoint = _checkpoint(args, args.path)
    report = checkpoint.inspect(args.sha256, pages=args.all)
    failed = any(p["level"] == "error" for p in report["problems"])
    # The text views are imported only for text: --json never needs them.
    if args.json:
        _stream_json(checkpoint, report, every=args.all)
    elif report.get("complete", True):
        emit(args, report, lambda: _view().format_inspect(report))
    elif args.all:
        _stream_text(checkpoint, report)
    else:
        emit(args, report, lambda: _view().format_inspect_summary(report))
    return EXIT_FAILED if failed else 0


def _view():
    from . import view

    return view


def _stream_json(checkpoint, report, out=None, every=True):
    """The report as one JSON document, a tensor a line (each through the C encoder, which an
    indented dump does not use), with every tensor's page after the first when `every`."""
    out = out or sys.stdout
    head = dict(report)
    first = head.pop("tensors")
    pages = _pages(checkpoint, report) if every and not report.get("complete", True) else ()
    if every:
        head["complete"] = True
    text = json.dumps(head, indent=2)  # ends with "\n}": the tensors go in before the brace
    out.write(text[:-2] + ',\n  "tensors": [')
    separator = "\n    "
    for tensors in itertools.chain([first], pages):
        if tensors:
            out.write(separator + ",\n    ".join(map(json.dumps, tensors)))
            separator = ",\n    "
    out.write("\n  ]\n}\n" if separator != "\n    " else "]\n}\n")
    out.flush()


def _stream_text(checkpoint, report, out=None):
    from .view import inspect_head_lines, inspect_tail_lines, tensor_table_lines

    out = out or sys.stdout
    out.write("\n".join(inspect_head_lines(report) + ["Tensors: {:,}".format(report["tensor_count"])]) + "\n")
    header = True
    for tensors in itertools.chain([report["tensors"]], _pages(checkpoint, report)):
        lines = tensor_table_lines(tensors, header=header)
        if lines:
            out.write("\n".join(lines) + "\n")
        header = False
    out.write("\n".join(inspect_tail_lines(report, report.get("tensor_bytes") or 0)) + "\n")
    out.flush()


def cmd_compare(args):
    from .view import format_compare

    (host_a, path_a), (host_b, path_b) = split_host_path(args.a), split_host_path(args.b)
    if host_a == host_b:
        result = _compare_on(args, host_a, path_a, path_b)
    else:
        result = _compare_here(_checkpoint(args, args.a), _checkpoint(args, args.b))
    emit(args, result, lambda: format_compare(result))
    return 0 if result["verdict"]["status"] == "compatible" else EXIT_FAILED


def _compare_on(args, host, path_a, path_b):
    """Both on one machine: compared there (here, for this machine)."""
    from remote.checkpoints import comparison, listing

    trained = split_host_path(args.trained_for)[1] if args.trained_for else None  # HOST:PATH or PATH, on the same host
    if host is not None:
        return connect(args, host).call("checkpoint.compare", {"a": path_a, "b": path_b, "trained_target": trained}, timeout=3600)
    try:
        return comparison.compare_paths(path_a, path_b, trained_target=trained)
    except comparison.NotACheckpoint as exc:
        raise CommandError(str(exc), EXIT_FAILED, "NotACheckpoint")
    except listing.report.CheckpointIOError as exc:
        raise _io_error(exc)


def _io_error(exc):
    from remote.checkpoints.problems import io_error_type

    error_type = io_error_type(exc)
    return CommandError(str(exc), exit_code_for(error_type), error_type)


def _compare_here(checkpoint_a, checkpoint_b):
    """On two machines: each report fetched (every page only when compare matches every tensor)."""
    from remote.checkpoints import comparison

    reports = []
    for checkpoint in (checkpoint_a, checkpoint_b):
        report = checkpoint.inspect()
        if not report["files"]:
            errors = [p["message"] for p in report["problems"] if p.get("level") == "error"]
            raise CommandError(comparison.not_a_checkpoint(checkpoint.path, errors), EXIT_FAILED, "NotACheckpoint")
        reports.append(report)
    if comparison.needs_every_tensor(*reports):
        reports = [_full_report(checkpoint_a), _full_report(checkpoint_b)]
    return comparison.compare_reports(*reports)
