"""Real parts for tests of Slurm: a two-node Slurm cluster on this machine.

tests/conftest.py loads it as a plugin (``pytest_plugins``); everything in ``__all__`` is then
visible to every test. All need root (Slurm's daemons run as root and start jobs as the user who
submitted them) and Debian's packages ``slurmctld slurmd slurm-client`` (a test that asks for
the cluster is skipped where they are missing).

``slurm_cluster`` (session)
    ``SlurmCluster``: one ``slurmctld`` and two ``slurmd`` (nodes ``n1`` and ``n2``, both at
    127.0.0.1, each on its own port with its own spool directory: the packaged slurmd runs
    several per machine with ``-N NODE``), authentication ``auth/none``, a partition ``debug``
    (default, ``MaxTime`` 60 minutes, enforced at submit: ``EnforcePartLimits=ALL``) over both nodes, 2 CPUs and 2 GPUs (gres ``gpu``, two plain
    files standing for devices: no CUDA_VISIBLE_DEVICES, no NVML) per node, ended jobs kept by ``scontrol`` for ``MinJobAge`` (300 s) and
    written to the job completion log (``JobCompType=jobcomp/filetxt``, so ``sacct -c`` answers;
    there is no slurmdbd, so plain ``sacct`` does not). ``KillWait`` is Slurm's default 30 s.
    Fields: ``conf`` (path str of slurm.conf: clients need ``SLURM_CONF`` set to it),
    ``directory`` (Path; logs under ``log/``), ``nodes`` (("n1", "n2")), ``partition``
    ("debug"), ``cpus_per_node`` (2), ``gpus_per_node`` (2), ``max_time_min`` (60),
    ``jobcomp_path``, ``kill_wait_s`` (30).
    Methods: ``env(**extra)`` -> a copy of os.environ with SLURM_CONF; ``run(argv, user=None,
    check=True)`` runs a Slurm client (``["squeue", ...]``) as root or as a ``HostUser`` (text
    CompletedProcess); ``job(slurm_id)`` -> dict of ``scontrol show job -o`` fields (JobState,
    Reason, NodeList, ExitCode, ...), {} once Slurm has forgotten it; ``user_jobs(user)`` ->
    the ids (str) squeue lists for that user; ``cancel_user_jobs(user)`` cancels them and waits
    until squeue lists none; ``profile_line()`` -> the ``export SLURM_CONF=...`` line a user's
    login profile needs; ``log_text(name)`` ("slurmctld", "slurmd-n1", ...).

``slurm_host`` (function)
    The cluster, made visible to the agent's daemon of ``host_user``: the daemon runs Slurm's
    commands in the user's login environment (remote/jobs/login_env.py), so the fixture appends
    ``profile_line()`` to the user's ``~/.profile`` (which the login shell reads; a change
    shows at the next command, no daemon restart needed). On teardown the user's Slurm jobs are
    cancelled (waited until gone) and the line removed. Yields the ``SlurmCluster``.

Several pytest sessions at once on one machine each get their own cluster (free ports, own
directories); node names repeat, clusters do not mix.
"""

import os
import shlex
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

import pytest

from tests.helpers.waits import wait_for
from tests.sshd_fixtures import _free_port, _kill_pids, _require_root, _run, _tail

__all__ = ["SlurmCluster", "slurm_cluster", "slurm_host"]

NODES = ("n1", "n2")
CPUS_PER_NODE = 2
GPUS_PER_NODE = 2
MAX_TIME_MIN = 60
PROFILE_MARK = "# specdeck tests: the Slurm cluster of this session"

SLURM_CONF = """\
ClusterName=specdeck
SlurmctldHost=localhost(127.0.0.1)
SlurmctldPort={ctld_port}
AuthType=auth/none
CredType=cred/none
SlurmUser=root
SlurmdUser=root
StateSaveLocation={dir}/state
SlurmdSpoolDir={dir}/spool/%n
SlurmctldPidFile={dir}/slurmctld.pid
SlurmdPidFile={dir}/slurmd-%n.pid
SlurmctldLogFile={dir}/log/slurmctld.log
SlurmdLogFile={dir}/log/slurmd-%n.log
SelectType=select/cons_tres
SelectTypeParameters=CR_Core_Memory
DefMemPerCPU=100
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
MpiDefault=none
CommunicationParameters=NoInAddrAny,NoCtldInAddrAny
MailProg=/bin/true
ReturnToService=2
MinJobAge=300
EnforcePartLimits=ALL
JobCompType=jobcomp/filetxt
JobCompLoc={dir}/jobcomp.txt
GresTypes=gpu
{node_lines}
PartitionName=debug Nodes={nodes} Default=YES MaxTime={max_time} State=UP
"""

NODE_LINE = ("NodeName={name} NodeHostname=localhost NodeAddr=127.0.0.1 Port={port} CPUs={cpus} "
             "RealMemory=1000 Gres=gpu:{gpus}")
# Slurm counts a GPU by a file; plain files stand for devices (slurmd logs that they are not
# devices and counts them all the same).
GRES_CONF = "NodeName={nodes} Name=gpu File={dir}/gpu[0-{last}]\n"


class SlurmCluster:
    """A running two-node cluster; see the module docstring."""

    def __init__(self, directory, conf):
        self.directory = Path(directory)
        self.conf = str(conf)
        self.nodes = NODES
        self.partition = "debug"
        self.cpus_per_node = CPUS_PER_NODE
        self.gpus_per_node = GPUS_PER_NODE
        self.max_time_min = MAX_TIME_MIN
        self.kill_wait_s = 30
        self.jobcomp_path = self.directory / "jobcomp.txt"
        self._procs = []

    def env(self, **extra):
        env = dict(os.environ, SLURM_CONF=self.conf)
        env.update(extra)
        return env

    def run(self, argv, user=None, check=True, **kw):
        if user is None:
            return _run(list(argv), check=check, env=self.env(), **kw)
        return user.run(list(argv), check=check, env={"SLURM_CONF": self.conf}, **kw)

    def job(self, slurm_id):
        res = self.run(["scontrol", "show", "job", "-o", str(slurm_id)], check=False)
        if res.returncode != 0:
            return {}
        fields = {}
        for token in res.stdout.split():
            name, sep, value = token.partition("=")
            if sep:
                fields.setdefault(name, value)
        return fields

    def user_jobs(self, user):
        res = self.run(["squeue", "-h", "-u", user.name, "-o", "%i"])
        return res.stdout.split()

    def cancel_user_jobs(self, user, timeout_s=90):
        if self.user_jobs(user):
            self.run(["scancel", "-u", user.name], check=False)
            # A job that ignores TERM goes only after KillWait: this waits out a hang, not a speed.
            wait_for(lambda: not self.user_jobs(user), timeout_s, message="the user's Slurm jobs gone")

    def profile_line(self):
        return "export SLURM_CONF=%s" % shlex.quote(self.conf)

    def log_text(self, name="slurmctld"):
        return _tail(self.directory / "log" / (name + ".log"), 200)

    def _start(self, argv, name):
        log = open(self.directory / "log" / (name + ".out"), "ab")
        with log:
            proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                                    start_new_session=True, env=self.env())
        self._procs.append(proc)
        return proc

    def _controller_up(self):
        return self.run(["scontrol", "ping"], check=False).stdout.count("is UP") > 0

    def _nodes_idle(self):
        res = self.run(["sinfo", "-h", "-N", "-o", "%N %t"], check=False)
        states = dict(line.split() for line in res.stdout.splitlines() if line.strip())
        return all(states.get(node) == "idle" for node in self.nodes)

    def start(self):
        ctld = self._start(["slurmctld", "-D", "-i", "-f", self.conf], "slurmctld")
        wait_for(lambda: ctld.poll() is not None or self._controller_up(), 30, interval_s=0.1, message="slurmctld answering")
        if ctld.poll() is not None:
            raise AssertionError("slurmctld exited at start\n" + self.log_text("slurmctld"))
        # slurmd after the controller: a slurmd that never reached one ignores SIGTERM.
        for node in self.nodes:
            self._start(["slurmd", "-D", "-N", node, "-f", self.conf], "slurmd-" + node)
        try:
            wait_for(self._nodes_idle, 30, interval_s=0.1, message="both Slurm nodes idle")
        except AssertionError as exc:
            raise AssertionError("%s\n%s\n%s" % (exc, self.log_text("slurmctld"), self.log_text("slurmd-n1")))

    def stop(self):
        res = self.run(["squeue", "-h", "-o", "%i"], check=False)
        if res.stdout.split():
            self.run(["scancel", *res.stdout.split()], check=False)
            deadline = time.monotonic() + 60
            while self.run(["squeue", "-h", "-o", "%i"], check=False).stdout.split() and time.monotonic() < deadline:
                time.sleep(0.2)
        for proc in reversed(self._procs):  # slurmd first, the controller last
            _kill_pids([proc.pid], grace_s=5.0)
            proc.wait()


def _write_config(directory):
    directory = Path(directory)
    for sub in ("state", "log", "spool"):
        (directory / sub).mkdir(mode=0o755)
    for node in NODES:
        (directory / "spool" / node).mkdir(mode=0o755)
    node_lines = "\n".join(NODE_LINE.format(name=node, port=_free_port(), cpus=CPUS_PER_NODE, gpus=GPUS_PER_NODE) for node in NODES)
    conf = directory / "slurm.conf"
    conf.write_text(SLURM_CONF.format(ctld_port=_free_port(), dir=directory, node_lines=node_lines, nodes=",".join(NODES), max_time=MAX_TIME_MIN))
    for index in range(GPUS_PER_NODE):
        (directory / ("gpu%d" % index)).touch()
    (directory / "gres.conf").write_text(GRES_CONF.format(nodes=",".join(NODES), dir=directory, last=GPUS_PER_NODE - 1))
    return conf


@pytest.fixture(scope="session")
def slurm_cluster(request):
    _require_root()
    if not (shutil.which("slurmctld") and shutil.which("slurmd") and shutil.which("sbatch")):
        pytest.skip("Slurm's packages (slurmctld slurmd slurm-client) are not installed")
    directory = tempfile.mkdtemp(prefix="specdeck-slurm-")
    os.chmod(directory, 0o755)  # the test user reads slurm.conf and writes nothing here
    cluster = SlurmCluster(directory, _write_config(directory))
    try:
        cluster.start()
        yield cluster
    finally:
        cluster.stop()
        if request.session.testsfailed:
            import sys

            sys.__stderr__.write("\n[slurm_fixtures] tests failed; Slurm's logs kept: %s/log\n" % directory)
        else:
            shutil.rmtree(directory, ignore_errors=True)


def _profile_without_mark(text):
    lines = text.splitlines(keepends=True)
    kept, skip = [], False
    for line in lines:
        if line.rstrip("\n") == PROFILE_MARK:
            skip = True
            continue
        if skip:
            skip = False
            continue
        kept.append(line)
    return "".join(kept)


@pytest.fixture
def slurm_host(slurm_cluster, host_user):
    profile = host_user.home / ".profile"
    before = profile.read_text() if profile.exists() else ""
    profile.write_text(_profile_without_mark(before) + "\n%s\n%s\n" % (PROFILE_MARK, slurm_cluster.profile_line()))
    os.chown(profile, host_user.uid, host_user.gid)
    try:
        yield slurm_cluster
    finally:
        slurm_cluster.cancel_user_jobs(host_user)
        if profile.exists():
            profile.write_text(_profile_without_mark(profile.read_text()))
