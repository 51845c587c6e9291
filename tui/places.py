"""Where this laptop keeps specdeck's own files: the config file the user edits, and the state
directory (the log, the link keeper's pointer). Nothing imported: a warm command's first lines
ask for these."""

import os


def config_path():
    base = os.environ.get("XDG_CONFIG_HOME") or os.path.join(os.path.expanduser("~"), ".config")
    return os.path.join(base, "specdeck", "config.toml")


def state_dir():
    """This machine's specdeck state ($XDG_STATE_HOME/specdeck): the log, the links pointer."""
    base = os.environ.get("XDG_STATE_HOME") or os.path.join(os.path.expanduser("~"), ".local", "state")
    return os.path.join(base, "specdeck")
