"""Checkpoints from the command line: inspect and compare, here or on a host."""

from remote.core.protocol import RemoteError

from .common import EXIT_FAILED, CommandError, connect, emit, split_host_path


def add_commands(commands):
    p = commands.add_parser("inspect", help="list and check a safetensors checkpoint")
    p.set_defaults(func=cmd_inspect)
    p.add_argument("path", metavar="[HOST:]PATH")
    p.add_argument("--sha256", action="store_true", help="also hash every file")

    p = commands.add_parser("compare", help="compare two checkpoints: drop-in initialisation or not")
    p.set_defaults(func=cmd_compare)
    p.add_argument("a", metavar="[HOST:]A")
    p.add_argument("b", metavar="[HOST:]B")


def _inspect_report(args, target, sha256=False):
    from remote.checkpoints import report as checkpoint

    host, path = split_host_path(target)
    if host is None:
        try:
            return checkpoint.inspect(path, sha256=sha256)
        except checkpoint.CheckpointIOError as exc:
            raise CommandError(str(exc))
    try:
        return connect(args, host).call("checkpoint.inspect", {"path": path, "sha256": sha256}, timeout=3600)
    except RemoteError as exc:
        raise CommandError(exc.message)


def cmd_inspect(args):
    from ..checkpoint_view import format_inspect

    report = _inspect_report(args, args.path, args.sha256)
    emit(args, report, lambda: format_inspect(report))
    return EXIT_FAILED if any(p["level"] == "error" for p in report["problems"]) else 0


def cmd_compare(args):
    from remote.checkpoints import report as checkpoint

    from ..checkpoint_view import format_compare

    result = checkpoint.compare(_inspect_report(args, args.a), _inspect_report(args, args.b))
    emit(args, result, lambda: format_compare(result))
    return 0 if result["verdict"] == "compatible" else EXIT_FAILED
