"""Where a server job answers. A server run on this host listens on 127.0.0.1 and its URL is
in its job's meta from the start. A server run through a job engine (Slurm) runs on a node
that is not known until the scheduler starts it: it listens on every interface of that node
(the login node, where the daemon runs, must reach it), and its URL is made from the address of
the node it was given (the first of its allocation, where the batch script and so the server
run), asked of the engine's area through the service registry, never by importing it. Until
then the server is `starting`, with the scheduler's pending reason.
"""

import os

from ..core import paths
from ..core.protocol import RemoteError
from ..core.records import read_json
from .engines import base_url

LOCAL_HOST = "127.0.0.1"
ALL_INTERFACES = "0.0.0.0"
SLURM_SERVICE = "slurm-jobs"  # the Slurm area's service: node_address(node)


def listen_host(job_engine):
    """The address a server started under `job_engine` (None or "local": this host) listens
    on: loopback on this host, where the daemon reaches it; every interface of a compute
    node, since the daemon reaches it from the login node."""
    return LOCAL_HOST if job_engine in (None, "local") else ALL_INTERFACES


def is_remote(job):
    """Whether a server job runs where its URL is known only once it runs (a Slurm job)."""
    return job.get("engine") not in (None, "local")


def node_of(job):
    """The node a running engine job's server answers on, or None."""
    nodes = job.get("nodes") or []
    return nodes[0] if job.get("process_state") == "running" and nodes else None


def waiting_reason(job):
    """Why a server job of an engine has no URL yet, in one line (None when it has one or ended)."""
    if job.get("process_state") == "starting":
        reason = job.get("pending_reason")
        return "waiting in Slurm's queue: %s" % reason if reason else "waiting in Slurm's queue"
    return None


def node_url(daemon, node, port):
    """The URL of port `port` on `node`, from the node's address as Slurm has it. RemoteError
    (one line) when no Slurm service can say."""
    service = daemon.services.get(SLURM_SERVICE)
    if service is None or not hasattr(service, "node_address"):
        raise RemoteError("NoSlurm", "this agent has no Slurm service to ask where node %s is" % node)
    try:
        return base_url(port, service.node_address(node))
    except RemoteError as exc:
        raise RemoteError(exc.type, "could not ask Slurm where node %s is: %s" % (node, exc.message))


def server_url(daemon, job):
    """(url or None, reason or None) of a server job: its meta's URL on this host; for a Slurm
    job, its node's once it runs, else None and why (pending, or Slurm could not say)."""
    meta = job.get("meta") or {}
    if not is_remote(job):
        return meta.get("url"), None
    node = node_of(job)
    if node is None:
        return None, waiting_reason(job)
    try:
        return node_url(daemon, node, meta["port"]), None
    except RemoteError as exc:
        return None, exc.message


def attached_path():
    """Where the servers attached by URL are kept (`serving.attach`), in the state directory."""
    return os.path.join(paths.state_dir(), "attached.json")


def attached_entries():
    """{uN: {url, ...}}: the servers attached by URL."""
    return read_json(attached_path()) or {}
