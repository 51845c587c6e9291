"""The Slurm area's place in the daemon: the job engine `slurm` (engine.py), registered with the
jobs core so that `jobs.submit` with `engine: slurm` goes through Slurm and the user's other
Slurm jobs are listed beside ours, and the service that watches them (watcher.py)."""

from ..jobs import engines as job_engines
from ..core.wire import method
from . import commands
from .engine import SlurmEngine
from .watcher import SlurmWatcher

ENGINE = job_engines.register(SlurmEngine())


class SlurmService(SlurmWatcher):
    """The watcher (service `slurm-jobs`), and what other areas may ask of Slurm through the
    service registry (they import nothing of this area): `node_address(node)`, where a node
    that runs a job of ours is reached from the login node (serving finds its servers there)."""

    def node_address(self, node):
        return ENGINE.node_address(node)


# The daemon starts these with itself (see remote/core/wire.py, area_services).
SERVICES = (SlurmService,)


@method("slurm.status")
def slurm_status(call):
    """Whether Slurm works on this host, and how the daemon watches it. Reply: `{available,
    error, polls (squeue calls since the daemon started), interval_s (the watcher's current
    poll interval)}`; `available` is false with `error` in one line (Slurm's own words, or
    "this host has no Slurm: ...") where its commands do not answer."""
    error = None
    try:
        commands.run(["scontrol", "ping"])
    except (commands.NoSlurm, commands.SlurmError) as exc:
        error = exc.message
    watcher = call.daemon.services.get(SlurmWatcher.name)
    return {"available": error is None, "error": error, "polls": ENGINE.polls, "interval_s": watcher.interval_s if watcher else None}
