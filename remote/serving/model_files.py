"""The JSON files of a model directory that the host reads before serving (the target's
config.json and generation_config.json, for `doctor` and serve's gate), read as a checkpoint's
are (the checkpoints area's load_json_file): only a regular file, opened without waiting (a FIFO
never holds the daemon's thread), and no larger than a config file can be (a 120 MB one is
refused, not read into the daemon's memory). Standard library only."""

import os

from ..core.protocol import RemoteError

# A model's config.json is a few kB (a quantization config listing every module, a few hundred).
MAX_MODEL_JSON_BYTES = 4 * 1024 * 1024


class UnreadableModelFile(RemoteError):
    """A model file that is there but cannot be read as one: no regular file, too large, not JSON.
    On the wire a NotACheckpoint, as a checkpoint's FIFO or broken file is (the CLI's exit 1)."""

    def __init__(self, message):
        super().__init__("NotACheckpoint", message)


def read_model_json(directory, name, role="target"):
    """`name` (config.json, ...) of the model directory `directory` as a dict: None when the
    directory holds no such file (a hub id, or a model without one); UnreadableModelFile, one
    line naming the file and why, when it is there and cannot be read."""
    from ..checkpoints.report import load_json_file

    path = os.path.join(os.path.expanduser(directory), name)
    if not os.path.lexists(path):
        return None
    problems = []
    found = load_json_file(path, "model's config file", problems, MAX_MODEL_JSON_BYTES)
    if found is None:
        raise UnreadableModelFile("the %s %s: %s" % (role, directory, problems[0]["message"] if problems else "cannot read %s" % name))
    return found
