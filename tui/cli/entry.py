"""`specdeck`'s entry point: a headless command is handed to the warm runner when one serves this
user's link keeper (tui/cli/runner.py), else run in this process (tui/cli/main.py), which then
starts a runner beside a keeper that has none, for the next command.

Nothing is imported before that choice but the command table and the runner's client.
"""

import sys

from .commands import COMMAND_NAMES, OWN_PROCESS


def run():
    argv = sys.argv[1:]
    headless = bool(argv) and argv[0] in COMMAND_NAMES
    if headless and argv[0] not in OWN_PROCESS:
        from .runner_client import run as run_warm

        code = run_warm(argv)
        if code is not None:
            import os

            os._exit(code)  # this process wrote nothing and holds nothing: no teardown to wait for
    from .main import exit_now, main

    code = main(argv)
    if headless:
        _start_runner()
        exit_now(code)
    sys.exit(code)


def _start_runner():
    """A runner for the keeper this command used (or started), when none listens yet."""
    import os

    from .runner_client import runner_path

    if os.environ.get("SPECDECK_WARM_RUNNER") == "0":
        return
    path = runner_path()
    if path is None or not os.path.exists(path[:-len(".run")]):
        return  # no keeper: nothing for a runner to serve beside
    import fcntl

    try:
        with open(path + ".lock", "a") as lock:
            fcntl.flock(lock, fcntl.LOCK_SH | fcntl.LOCK_NB)  # free: no runner holds it
    except BlockingIOError:
        return
    except OSError:
        return
    from .runner import start

    start(path[:-len(".run")])
