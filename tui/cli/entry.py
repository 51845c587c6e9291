"""`specdeck`'s entry point: every command runs in the caller's own process (its signals, nice,
limits and the code installed now); a headless one takes its link from the link keeper
(tui/transport/links.py) and ends without the interpreter's teardown.

Nothing is imported before that choice but the command table.
"""

import sys

from .commands import COMMAND_NAMES


def run():
    argv = sys.argv[1:]
    from .main import exit_now, main

    code = main(argv)
    if argv and argv[0] in COMMAND_NAMES:
        exit_now(code)
    sys.exit(code)
