"""One model per host on the laptop (tui/host/model.py): the console's one use of a host's
client, every subscription its views follow, and the host's state as typed, aged records."""

from .asking import Failure, HostError
from .model import HostModel, model_of
from .records import Connection

__all__ = ["Connection", "Failure", "HostError", "HostModel", "model_of"]
