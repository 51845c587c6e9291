"""What every command shares: the one-line error, connecting, --json output, HOST:PATH.

Errors go through one place, `failure()`: one line on stderr (`specdeck: ...`), or with --json
one JSON object on stderr, `{"error": {"type": ..., "message": ...}}`, and the exit code the
README gives: 1 when the thing asked for failed (the host's NotFound, DrafterMismatch, a repo
or file not on the hub, a folder that is not a checkpoint, a job that failed), 2 for a usage,
connection or I/O problem (every other refusal). `type` is the agent's error type for a refusal
(e.g. NotFound), the exception's class for a connection failure (ConnectError, HostKeyChanged,
HostKeyRevoked, HostKeyUnknown, AuthenticationRefused), or UsageError.

A verdict, wherever a command prints one in JSON, has one shape: `{"status", "message"}`
(remote/checkpoints/verdicts.py).

Logging (where warnings go, -v and -vv) is tui/logs.py.
"""

import json
import os
import re
import sys
import time

from remote.core.windows import parse_duration as parse_seconds

from ..display import CONTROLS, safe_text

EXIT_FAILED = 1
EXIT_USAGE = 2

# The host's refusals that mean "what you asked for failed" (exit 1); any other type is a usage,
# connection or I/O problem (exit 2): BadRequest, IOError, NoSpace, AuthRequired, ...
FAILED_TYPES = frozenset((
    "NotFound", "DrafterMismatch", "NotACheckpoint", "RepoNotFound", "FileNotFound", "RevisionNotFound", "JobFailed",
))

# A next step the CLI adds to a refusal of this type (the agent's line is shared with the console,
# which has a form field where the CLI has a flag).
NEXT_STEPS = {
    "NetworkUnreachable": ("--endpoint", "a hub mirror the host can reach goes in --endpoint URL"),
}


class CommandError(Exception):
    """One line for the user, and the exit code; `type` for --json (default: UsageError for
    exit 2, Failed for exit 1)."""

    def __init__(self, message, code=EXIT_USAGE, type_=None):
        super().__init__(message)
        self.code = code
        self.type = type_ or ("UsageError" if code == EXIT_USAGE else "Failed")


def parse_duration(text):
    """Seconds in `90`, `30s`, `5m`, `8h`, `1d`, `1w` (the host's one parser, remote/core/windows.py);
    a CommandError (exit 2) with its sentence otherwise. Every command that takes a duration uses it."""
    try:
        return parse_seconds(text)
    except ValueError as exc:
        raise CommandError(str(exc))


def exit_code_for(error_type):
    """The exit code of a host's refusal of this type."""
    return EXIT_FAILED if error_type in FAILED_TYPES else EXIT_USAGE


def refusal_message(error_type, message, host=None):
    """The host's line as the CLI shows it: the host named as the user names it, plus the CLI's
    next step for the type, if it has one and the line does not say it already."""
    from .. import config

    message = config.name_host(message, host)
    flag, step = NEXT_STEPS.get(error_type, (None, None))
    if step and flag not in message:
        message = "%s; %s" % (message.rstrip("."), step)
    return message


def failure(exc, host=None):
    """(type, message, exit code) for an exception a command ended with, or None when it is not
    one of ours (a bug: let its traceback show)."""
    from remote.core.protocol import RemoteError

    from ..transport.client import ConnectError

    if isinstance(exc, CommandError):
        cause = exc.__context__
        if isinstance(cause, RemoteError):
            # A command that put a host's refusal in its own words: the type and code stay the host's.
            return cause.type, refusal_message(cause.type, str(exc), host), exit_code_for(cause.type)
        return exc.type, str(exc), exc.code
    if isinstance(exc, RemoteError):
        return exc.type, refusal_message(exc.type, exc.message, host), exit_code_for(exc.type)
    if isinstance(exc, ConnectError):
        return type(exc).__name__, str(exc), EXIT_USAGE
    if isinstance(exc, OSError) and not isinstance(exc, BrokenPipeError):
        where = " %s" % exc.filename if exc.filename else ""
        return "IOError", "cannot read or write%s: %s" % (where, exc.strerror or exc), EXIT_USAGE
    return None


def connection_options(parser):
    parser.add_argument("--python", metavar="PATH", help="interpreter that runs the agent on the host (default: what `specdeck config HOST --agent-python` remembers, else python3)")
    parser.add_argument("--accept-new", action="store_true", help="accept and remember an unknown host key (check its fingerprint first)")
    parser.add_argument("-v", "--verbose", action="count", default=0, help="log to stderr as well (-vv: also paramiko's debug)")


def split_host_path(text):
    """`host:path` like scp; a bare path is on this machine."""
    match = re.match(r"^([^/:]+):(.*)$", text)
    if match and not os.path.exists(text):
        host, path = match.groups()
        return (None if host == "local" else host), path or "."
    return None, text


def accept_new_policy(args):
    from ..transport.connection import accept_all, refuse_unknown

    return accept_all if args.accept_new else refuse_unknown


def agent_python(args, host):
    """--python, else the interpreter remembered for the host, else python3 (on `local`: this one)."""
    from .. import config

    return args.python or config.remembered(host, "agent_python") or "python3"


def connect(args, host, reconnect=False):
    """A started client; with `reconnect`, a notice on stderr each time the link drops and heals.

    The SSH link comes from the link keeper (tui/transport/keeper.py), which starts on the first command
    and keeps it warm for the next ones (`specdeck disconnect` ends it)."""
    from ..transport.connection import open_client

    on_state = ReconnectNotices(host or "local", getattr(args, "json", False)) if reconnect else None
    return open_client(host, python=agent_python(args, host), accept_new=accept_new_policy(args), reconnect=reconnect,
                       on_state=on_state, keeper="always")


class ReconnectNotices:
    """Says on stderr that a following command is reconnecting, and when it is back.

    One line when the link drops, another when the reason changes or the wait grows long
    (so a minutes-long outage is never silent), one when it is back.
    """

    LONG_WAIT_S = 2.0

    def __init__(self, host, as_json=False):
        self.host = host
        self.as_json = as_json
        self.last_reason = None

    def __call__(self, state, detail):
        if state == "reconnecting":
            reason = detail.get("error") or "the link dropped"
            wait_s = detail.get("next_try_in_s") or 0.0
            if reason == self.last_reason and wait_s < self.LONG_WAIT_S:
                return
            self.last_reason = reason
            when = "next try in %d s" % round(wait_s) if wait_s >= 0.5 else "trying now"
            self.say("reconnecting", "reconnecting to %s: %s (%s)" % (self.host, reason, when), next_try_in_s=round(wait_s, 2))
        elif state == "connected" and self.last_reason is not None:
            self.last_reason = None
            self.say("reconnected", "reconnected to %s" % self.host)

    def say(self, event, message, **fields):
        if self.as_json:
            line = json.dumps({"notice": dict({"type": event, "message": message, "at": time.time()}, **fields)})
        else:
            line = "specdeck: %s" % message
        sys.stderr.write(line + "\n")
        sys.stderr.flush()


def report_error(exc_type, message, as_json):
    """Write the one line (or JSON object) for a failure on stderr (a message may carry a
    host's text: one line still, its controls shown as escapes)."""
    if as_json:
        sys.stderr.write(json.dumps({"error": {"type": exc_type, "message": message}}) + "\n")
    else:
        sys.stderr.write("specdeck: %s\n" % safe_text(message))


_JSON_ESCAPES = {code: "\\u%04x" % code for code in CONTROLS if code != 0x0A}


class TerminalStream:
    """stdout or stderr of a command, where nothing but the CLI's own newlines reaches the
    terminal as a control: a host's text (a job name, a file name, a server's error line) that
    a formatter let through shows its ESC, BEL, C1 or bidirectional control as an escape. With
    --json each is written `\\u001b` instead, which in a JSON string is the same character (where
    json.dumps lets one through: DEL). `raw` is the stream itself, for what is written as it is
    on purpose (`logs --raw`)."""

    def __init__(self, raw, as_json=False):
        self.raw = raw
        self.as_json = as_json

    def write(self, text):
        # Most text holds no control but its newlines: two passes in C rather than a translation.
        if not text.isprintable() and not text.replace("\n", " ").isprintable():
            text = text.translate(_JSON_ESCAPES) if self.as_json else safe_text(text, keep="\n")
        return self.raw.write(text)

    def __getattr__(self, name):  # flush, isatty, fileno, buffer, close, encoding...
        return getattr(self.raw, name)


def guard_terminal(as_json):
    """Puts TerminalStream in front of stdout and stderr for the rest of this command."""
    for name in ("stdout", "stderr"):
        stream = getattr(sys, name)
        if stream is not None and not isinstance(stream, TerminalStream):
            setattr(sys, name, TerminalStream(stream, as_json))


def emit(args, value, human):
    if args.json:
        print(json.dumps(value, indent=None if isinstance(value, dict) and len(value) < 3 else 2))
    else:
        print(human() if callable(human) else human)


def env_entries(entries):
    """{name: value} from `KEY=VALUE` entries (the CLI's repeated --env, the new-job form's env
    field), or ValueError naming the first entry that is not one."""
    env = {}
    for entry in entries:
        name, sep, value = entry.partition("=")
        if not sep or not name:
            raise ValueError("env entry %r is not KEY=VALUE" % entry)
        env[name] = value
    return env


def env_option(entries):
    """env_entries for --env: a bad entry is the command's one-line usage error."""
    try:
        return env_entries(entries)
    except ValueError as exc:
        raise CommandError("--env wants KEY=VALUE: %s" % exc)
