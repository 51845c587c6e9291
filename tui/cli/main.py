"""`specdeck`: the console, and every console action as a headless command with --json.

  specdeck [HOST ...]                      open the console (several hosts: the Fleet pane;
                                           none: [fleet] hosts of the config file, else this machine)
  specdeck run HOST -- CMD ARGS...         start a detached job, print its id
  specdeck jobs HOST                       list jobs
  specdeck logs HOST JOB [--follow]        print a job's log
  specdeck stop HOST JOB                   stop a job (TERM, KILL after a grace period)
  specdeck inspect [HOST:]PATH             list and check a safetensors checkpoint
  specdeck compare [HOST:]A [HOST:]B       side by side, with a verdict
  specdeck download HOST REPO [FILE...] [--local-dir DIR]   (default: the host's download_dir/NAME)
  specdeck verify [HOST:]DIR [--repo REPO]  (default: the repo a specdeck download put there)
  specdeck serve HOST TARGET [--drafter PATH] [--wait] [-- ENGINE_ARGS]
  specdeck spec HOST (JOB | --url URL) [--window 5m]
  specdeck breakeven --cycle-ms MS --baseline-tps TPS [--k N] [--target-tps TPS]
  specdeck bench HOST TARGET --drafter PATH [--k 1,2,3] [-- ENGINE_ARGS]   (a list of Ks: a K sweep)
  specdeck advise HOST JOB                 which K to serve with, and why
  specdeck baseline HOST [SERVER --save [--margin 10%] [--for 10m] | --remove]   accept length baselines, regression alerts
  specdeck doctor HOST TARGET --drafter D [--max-model-len N]   how the drafter would be served (serve refuses errors)
  specdeck coverage HOST DRAFTER --target T (--text FILE | --job SERVER)   what the draft vocabulary allows
  specdeck train HOST [--python PATH] [--save-dir DIR] [--name NAME] -- COMMAND...
  specdeck curves HOST JOB                 a training run's curves, predicted accept length, ETA
  specdeck checkpoints HOST JOB            the checkpoints a training run wrote, with verdicts
  specdeck gpus HOST [--since DURATION] [--alerts]   GPUs, CPU, memory, disks; a window of history
  specdeck notify HOST [--add URL | --list | --test]  where the host sends alerts (phone, chat)
  specdeck daemon stop HOST                stop the host's daemon (jobs keep running)
  specdeck fleet [HOST ...] [--timeout S]  every host in one line, asked at once
  specdeck disconnect [HOST]               end the warm link a headless command left open

HOST is an ssh destination (user@host, user@host:port, a ~/.ssh/config alias) or `local`.
"""

import argparse
import importlib
import re
import sys

from .commands import AREAS, COMMAND_NAMES
from .common import (EXIT_USAGE, agent_python, connection_options, failure, guard_terminal, report_error,
                     split_host_path)


HELP = """The console, and every console action as a headless command with --json.

  specdeck [HOST ...]       open the console on HOST (several: the Fleet pane; none: the config's
                            [fleet] hosts, else this machine)
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

    def _get_formatter(self):
        # argparse asks shutil for the width, and shutil loads zlib, bz2 and lzma (~3 ms of
        # every command's start): the same answer, from os.
        return self.formatter_class(prog=self.prog, width=terminal_columns() - 2)

    def error(self, message):
        if Parser.json_errors:
            report_error("UsageError", "%s: %s" % (self.prog, message), True)
            sys.exit(EXIT_USAGE)
        super().error(message)


def terminal_columns():
    """The terminal's width as shutil.get_terminal_size gives it: $COLUMNS, else stdout's
    terminal, else 80."""
    import os

    try:
        columns = int(os.environ.get("COLUMNS", 0))
    except ValueError:
        columns = 0
    if columns <= 0:
        try:
            columns = os.get_terminal_size(sys.__stdout__.fileno()).columns
        except (AttributeError, ValueError, OSError):
            columns = 80
    return columns or 80


class VersionAction(argparse.Action):
    """--version, whose answer (the installed package's metadata) is read only when asked."""

    def __init__(self, option_strings, dest=argparse.SUPPRESS, default=argparse.SUPPRESS, help="show the version and exit"):
        super().__init__(option_strings, dest=dest, default=default, nargs=0, help=help)

    def __call__(self, parser, namespace, values, option_string=None):
        print("specdeck %s" % version())
        parser.exit()


def build_parser(command=None):
    """The parser of every command, or with `command` of that command's area only."""
    parser = Parser(
        prog="specdeck",
        usage="specdeck [-h] [--version] [HOST | COMMAND ...]",
        description=HELP,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action=VersionAction)
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", title="commands", prog="specdeck")
    for module, names in AREAS:
        if command is None or command in names:
            importlib.import_module(module).add_commands(commands)
    for p in commands.choices.values():
        if p.get_default("host_options") is False:  # reaches no host: options for one would mean nothing
            p.add_argument("-v", "--verbose", action="count", default=0, help="log to stderr as well")
        else:
            connection_options(p)
        p.add_argument("--json", action="store_true", help="machine-readable output (errors too, as JSON on stderr)")
    return parser


_BUILT = {}  # an area's module -> its parser


def area_parser(command):
    """build_parser(command), made once per area in a process."""
    module = next(module for module, names in AREAS if command in names)
    parser = _BUILT.get(module)
    if parser is None:
        parser = _BUILT[module] = build_parser(command)
    return parser


def command_parser(parser, name):
    """The sub-parser of command `name` in `parser` (build_parser's)."""
    subparsers = next(action for action in parser._actions if isinstance(action, argparse._SubParsersAction))
    return subparsers.choices[name]


def console_parser(add_help=True):
    parser = argparse.ArgumentParser(prog="specdeck", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter,
                                     add_help=add_help)
    parser.add_argument("hosts", nargs="*", metavar="HOST",
                        help="ssh destinations, or local; several open the Fleet pane (default: [fleet] hosts of the config file, else local)")
    connection_options(parser)
    return parser


# What a host word can be: user@host, host, host:port, [v6]:port, an alias; never a path or a repo.
HOST_WORD = re.compile(r"^(?:[^@/\s]+@)?(?:\[[^\]/\s]+\]|[^:@/\s]+)(?::\d+)?$")


def unknown_command(argv, command_names):
    """The line for a first word that is neither a command nor a host the console can open
    (`specdeck downlaod local REPO`: a repo is no host, and the console takes hosts only), or None."""
    if not argv or argv[0].startswith("-"):
        return None
    try:
        args, extra = console_parser(add_help=False).parse_known_args(argv)
    except SystemExit:  # e.g. --python with no value: the console's own parser says so next
        return None
    import difflib

    word = argv[0]
    close = difflib.get_close_matches(word, sorted(command_names), n=1, cutoff=0.6)
    # Hosts unless the first is a near-miss of a command that could not be a destination, or a
    # word is no host at all (an option of a command, a path).
    typo = close and difflib.SequenceMatcher(None, word, close[0]).ratio() >= 0.8 \
        and not any(c in word for c in "@.:") and not _ssh_alias(word)
    if not extra and not typo and all(HOST_WORD.match(host) for host in args.hosts):
        return None
    line = "unknown command %r" % word
    if close:
        line += ", did you mean %r?" % close[0]
    else:
        line += " (specdeck -h lists the commands; to open the console on a host: specdeck HOST)"
    return line


def _ssh_alias(name):
    """Whether ~/.ssh/config names a Host block for this word (then it is a host, not a typo)."""
    import os

    try:
        with open(os.path.join(os.path.expanduser("~"), ".ssh", "config")) as f:
            return any(name in re.split(r"\s+", line.strip())[1:] for line in f if re.match(r"\s*host\s", line, re.I))
    except OSError:
        return False


def open_console(argv):
    args = console_parser().parse_args(argv)
    from .. import logs

    logs.setup(args.verbose, to_stderr=False)  # the screen is the terminal's: log to the file only
    logs.installed()  # Textual and the panes log through logging itself: its records go to the file too
    from .. import config
    from ..app import SpecdeckApp

    SpecdeckApp(hosts=console_hosts(args.hosts, config.fleet_hosts), python=lambda host: agent_python(args, host),
                accept_new=args.accept_new).run()
    return 0


def console_hosts(named, fleet_hosts):
    """The hosts the console opens: those named (each once, in order), else the config's
    `[fleet] hosts` (`fleet_hosts()`), else this machine."""
    return list(dict.fromkeys(named)) or fleet_hosts() or ["local"]


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    from .. import config as settings

    broken = settings.problem() if argv[:1] not in (["-h"], ["--help"], ["--version"]) else None
    if broken:  # every command and the console: the config file's one line, never a traceback
        report_error("ConfigError", broken, "--json" in argv)
        return EXIT_USAGE
    if not argv or argv[0] not in COMMAND_NAMES:
        if argv and argv[0] in ("-h", "--help", "--version"):
            build_parser().parse_args(argv[:1])  # prints and exits 0
        typo = unknown_command(argv, COMMAND_NAMES)
        if typo:
            report_error("UsageError", typo, "--json" in argv)
            return EXIT_USAGE
        return open_console(argv)
    command_argv = []
    if argv[0] in ("run", "serve", "bench", "doctor", "train", "notify") and "--" in argv:
        # Everything after -- is the job's own command line, options and all.
        split = argv.index("--")
        argv, command_argv = argv[:split], argv[split + 1 :]
    Parser.json_errors = "--json" in argv
    parser = area_parser(argv[0])
    args, unknown = parser.parse_known_args(argv)
    if unknown:  # the command's own usage says what it takes, not the top level's
        command_parser(parser, argv[0]).error("unrecognized arguments: %s" % " ".join(unknown))
    guard_terminal(args.json)  # from here on, no host's text drives the terminal
    from .. import logs

    logs.setup(args.verbose)
    if args.command == "run":
        args.argv = args.argv + command_argv
    args.after_dashes = command_argv  # serve, bench: the engine's own arguments
    try:
        return args.func(args)
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:  # `specdeck jobs HOST | head`: the reader left, nothing to say
        sys.stderr.close()
        return 0
    except Exception as exc:
        # Every command's errors, the host's refusals included, end here: one message, one code.
        known = failure(exc, command_host(args))
        if known is None:
            raise
        error_type, message, code = known
        report_error(error_type, message, args.json)
        return code


def exit_now(code):
    """End a headless command without the interpreter's teardown (every module and object
    freed one by one: ~15 ms of a warm command's 0.2 s), once what must outlive it is out:
    stdout, stderr, the log file. A thread still working (none of ours is) gets the usual exit."""
    import os
    import threading

    from .. import logs

    if any(t.is_alive() and not t.daemon for t in threading.enumerate() if t is not threading.main_thread()):
        sys.exit(code)
    try:
        sys.stdout.flush()
        sys.stderr.flush()
    except (BrokenPipeError, ValueError):  # the reader left (`| head`), or main closed the stream
        pass
    if logs.loaded():
        logs.installed().shutdown()
    os._exit(code if isinstance(code, int) else 0 if code is None else 1)


def command_host(args):
    """The host a command talks to, as the user named it (HOST, or the HOST: of a path)."""
    if getattr(args, "host", None):
        return args.host
    for name in ("dir", "path", "a"):
        if getattr(args, name, None):
            return split_host_path(getattr(args, name))[0]
    return None


if __name__ == "__main__":
    sys.exit(main())
