"""The composition root of the host agent: the areas whose wire methods and services the
daemon runs, in the order the wire reference lists them. The core (remote/core/) imports no
area; the agent's entry point imports this module, which hands the list to the wire registry."""

from .core import wire

AREAS = (
    "remote.core.methods",
    "remote.core.job_methods",
    "remote.core.history_methods",
    "remote.checkpoints.methods",
    "remote.downloads.methods",
    "remote.serving.methods",
    "remote.serving.baseline_methods",
    "remote.telemetry.methods",
    "remote.slurm.nodes",  # a Slurm job's nodes, sampled on the nodes (into telemetry)
    "remote.training.methods",
    "remote.notify.methods",
    "remote.fleet.methods",
    "remote.slurm.methods",
)


def install():
    """Give the wire registry this agent's areas (idempotent)."""
    wire.install_areas(AREAS)
    return AREAS


install()
