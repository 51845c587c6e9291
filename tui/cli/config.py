"""`specdeck config HOST`: show or set what is remembered for a host (tui/config.py), so that
--python, --host-python, --endpoint, --local-dir, --stall-after and --slowdown are typed once (the
console's download form remembers the endpoint it last used here too)."""

import json

from .. import config
from .common import CommandError

OPTIONS = (
    ("agent_python", "--agent-python", "interpreter that runs the agent on the host (what --python defaults to)"),
    ("ml_python", "--ml-python", "interpreter with huggingface_hub (and torch...) on the host (what --host-python defaults to)"),
    ("hub_endpoint", "--hub-endpoint", "the hub mirror downloads use (what --endpoint defaults to)"),
    ("download_dir", "--download-dir", "where downloads go on the host (--local-dir defaults to DIR/NAME)"),
    ("checkpoint_dir", "--checkpoint-dir", "where checkpoints are on the host"),
    ("stall_after", "--stall-after", "the stall limit train, run and serve send (30s, 10m, 2h, or off) unless given"),
    ("slowdown", "--slowdown", "when train's runs are told as slowed down (0.5/10m/1h: under half their hour's median "
                               "for 10 min; or off) unless given"),
)
METAVARS = {"hub_endpoint": "URL", "stall_after": "DURATION", "slowdown": "FRACTION/DURATION/SPAN"}


def add_commands(commands):
    p = commands.add_parser("config", help="show or set what is remembered for a host (interpreters, directories)")
    p.set_defaults(func=cmd_config)
    p.add_argument("host", help="as you name it in other commands (user@host, an ssh alias, local)")
    for key, flag, help_text in OPTIONS:
        p.add_argument(flag, dest=key, metavar=METAVARS.get(key, "PATH"), help=help_text + "; an empty value forgets it")


def cmd_config(args):
    changes = {key: (getattr(args, key) or None) for key, _flag, _help in OPTIONS if getattr(args, key) is not None}
    if changes.get("stall_after"):
        try:
            config.stall_after_s(changes["stall_after"])
        except ValueError as exc:
            raise CommandError("--stall-after: %s" % exc)
    if changes.get("slowdown"):
        try:
            config.slowdown_limits(changes["slowdown"])
        except ValueError as exc:
            raise CommandError("--slowdown: %s" % exc)
    try:
        table = config.remember(args.host, changes) if changes else dict(config.load().get("hosts", {}).get(config.host_key(args.host)) or {})
    except (config.ConfigError, OSError) as exc:
        raise CommandError(str(exc))
    if args.json:
        print(json.dumps({"host": config.host_key(args.host), "path": config.config_path(), "settings": table}))
        return 0
    print("%s  (%s)" % (config.host_key(args.host), config.config_path()))
    for key, flag, _help in OPTIONS:
        print("  %-15s %s" % (key, table.get(key) or "-  (set with %s %s)" % (flag, METAVARS.get(key, "PATH"))))
    return 0
