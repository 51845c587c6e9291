"""One model per host on the laptop (tui/host/model.py): the console's one use of a host's
client, every subscription its views follow, and the host's state as typed, aged records (the
link's, its servers' in serving.py, its GPU samples' in telemetry.py)."""

from .asking import Failure, HostError
from .model import HostModel, model_of
from .records import Aged, Connection, ServerRecord

__all__ = ["Aged", "Connection", "Failure", "HostError", "HostModel", "ServerRecord", "model_of"]
