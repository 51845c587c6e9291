"""The composition root of the host agent: the areas the daemon runs, in the order the wire
reference lists them, each with the modules whose import registers its wire methods and
services. The core (remote/core/) imports no area; the agent's entry point imports this
module, which hands the modules to the wire registry."""

from .core import wire

# area (a package of remote/) -> its modules that register methods and services, in order.
AREAS = (
    ("core", ("methods",)),  # the daemon's own: ping, services, files
    ("history", ("methods",)),  # first of the services: the samplers record into it
    ("jobs", ("methods",)),
    ("checkpoints", ("methods",)),
    ("scoring", ("methods",)),  # a drafter scored offline, as a job under the ML interpreter
    ("downloads", ("methods",)),
    ("serving", ("methods", "bench_methods", "baseline_methods", "doctor_methods")),
    ("telemetry", ("methods",)),
    ("slurm", ("nodes", "methods")),  # nodes: a Slurm job's nodes sampled on the nodes (into telemetry)
    ("training", ("methods",)),
    ("notify", ("methods",)),
    ("report", ("methods",)),
    ("fleet", ("methods",)),
)


def modules():
    """The module names the wire registry loads, in area order."""
    return ["remote.%s.%s" % (area, module) for area, names in AREAS for module in names]


def install():
    """Give the wire registry this agent's areas (idempotent)."""
    wire.install_areas(modules())
    return AREAS


install()
