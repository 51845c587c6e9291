"""`specdeck`: the console, and every console action as a headless command with --json.

  specdeck [HOST]                          open the console (no host: this machine)
  specdeck run HOST -- CMD ARGS...         start a detached job, print its id
  specdeck jobs HOST                       list jobs
  specdeck logs HOST JOB [--follow]        print a job's log
  specdeck stop HOST JOB                   stop a job (TERM, KILL after a grace period)
  specdeck inspect [HOST:]PATH             list and check a safetensors checkpoint
  specdeck compare [HOST:]A [HOST:]B       side by side, with a verdict
  specdeck download HOST REPO [FILE...] --local-dir DIR
  specdeck verify [HOST:]DIR --repo REPO
  specdeck serve HOST TARGET [--drafter PATH] [--wait] [-- ENGINE_ARGS]
  specdeck spec HOST (JOB | --url URL) [--window 5m]
  specdeck breakeven --cycle-ms MS --baseline-tps TPS [--k N] [--target-tps TPS]
  specdeck bench HOST TARGET --drafter PATH [-- ENGINE_ARGS]
  specdeck train HOST [--python PATH] [--save-dir DIR] [--name NAME] -- COMMAND...
  specdeck curves HOST JOB                 a training run's curves, predicted accept length, ETA
  specdeck checkpoints HOST JOB            the checkpoints a training run wrote, with verdicts
  specdeck gpus HOST [--since DURATION] [--alerts]   GPUs, CPU, memory, disks; a window of history

HOST is an ssh destination (user@host, user@host:port, a ~/.ssh/config alias) or `local`.
"""

import argparse
import sys

from remote.core.protocol import RemoteError

from ..client import ConnectError
from . import checkpoints, config, downloads, gpus, jobs, serving, training
from .common import EXIT_FAILED, EXIT_USAGE, CommandError, agent_python, connection_options, report_error, setup_logging

AREAS = (gpus, jobs, checkpoints, downloads, serving, config, training)  # each adds its commands to the parser


HELP = """The console, and every console action as a headless command with --json.

  specdeck [HOST]           open the console on HOST (no HOST: on this machine)
  specdeck COMMAND ARGS     one action without the console (specdeck COMMAND -h for its options)

HOST is an ssh destination (user@host, user@host:port, a ~/.ssh/config alias) or `local`."""


def version():
    """This console's version: the installed package's, else the agent's it ships."""
    from importlib import metadata

    try:
        return metadata.version("specdeck")
    except metadata.PackageNotFoundError:
        from remote import AGENT_VERSION

        return AGENT_VERSION


class Parser(argparse.ArgumentParser):
    """argparse, whose usage errors are JSON on stderr when the command line asks for --json."""

    json_errors = False

    def error(self, message):
        if Parser.json_errors:
            report_error("UsageError", "%s: %s" % (self.prog, message), True)
            sys.exit(EXIT_USAGE)
        super().error(message)


def build_parser():
    parser = Parser(
        prog="specdeck",
        usage="specdeck [-h] [--version] [HOST | COMMAND ...]",
        description=HELP,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version="specdeck %s" % version())
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", title="commands", prog="specdeck")
    for area in AREAS:
        area.add_commands(commands)
    for p in commands.choices.values():
        connection_options(p)
        p.add_argument("--json", action="store_true", help="machine-readable output (errors too, as JSON on stderr)")
    parser.command_names = frozenset(commands.choices)
    return parser


def open_console(argv):
    parser = argparse.ArgumentParser(prog="specdeck", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("host", nargs="?", default="local", help="ssh destination, or local (default)")
    connection_options(parser)
    args = parser.parse_args(argv)
    setup_logging(args.verbose, to_stderr=False)  # the screen is the terminal's: log to the file only
    from ..app import SpecdeckApp

    SpecdeckApp(host=args.host, python=agent_python(args, args.host), accept_new=args.accept_new).run()
    return 0


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    parser = build_parser()
    if not argv or argv[0] not in parser.command_names:
        if argv and argv[0] in ("-h", "--help", "--version"):
            parser.parse_args(argv[:1])  # prints and exits 0
        return open_console(argv)
    command_argv = []
    if argv[0] in ("run", "serve", "bench", "train") and "--" in argv:
        # Everything after -- is the job's own command line, options and all.
        split = argv.index("--")
        argv, command_argv = argv[:split], argv[split + 1 :]
    Parser.json_errors = "--json" in argv
    args = parser.parse_args(argv)
    setup_logging(args.verbose)
    if args.command == "run":
        args.argv = args.argv + command_argv
    args.after_dashes = command_argv  # serve, bench: the engine's own arguments
    try:
        return args.func(args)
    except CommandError as exc:
        report_error("CommandError", str(exc), args.json)
        return exc.code
    except ConnectError as exc:
        report_error(type(exc).__name__, str(exc), args.json)
        return EXIT_USAGE
    except RemoteError as exc:
        report_error(exc.type, exc.message, args.json)
        return EXIT_FAILED
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:  # `specdeck jobs HOST | head`: the reader left, nothing to say
        sys.stderr.close()
        return 0


if __name__ == "__main__":
    sys.exit(main())
