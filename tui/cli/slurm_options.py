"""The `--slurm` options, the same on every command that starts a job (run, train, serve,
bench): the flags, the host's defaults from `[hosts."x".slurm]` in the config file (a flag wins;
sbatch arguments add up, the config's first), and the wire parameters that ask the host to run
the job through Slurm (`job_engine`, `job_engine_options`: see remote/jobs/engines.py)."""

from .. import config
from .common import CommandError

# flag attribute -> the option's name on the wire and in the config file
OPTIONS = (("nodes", "nodes"), ("gpus_per_node", "gpus_per_node"), ("partition", "partition"), ("time", "time"), ("account", "account"))


def add_slurm_options(parser):
    group = parser.add_argument_group("Slurm", "run the job through Slurm (sbatch) instead of on the host itself; "
                                               "defaults from [hosts.\"HOST\".slurm] in the config file")
    group.add_argument("--slurm", action="store_true", help="submit the job with sbatch; Slurm runs it and says how it goes")
    group.add_argument("--nodes", type=int, metavar="N", help="nodes to allocate (sbatch --nodes)")
    group.add_argument("--gpus-per-node", type=int, metavar="G", help="GPUs on each node (sbatch --gpus-per-node)")
    group.add_argument("--partition", metavar="P", help="the partition (sbatch --partition)")
    group.add_argument("--time", metavar="T", help="the time limit, as sbatch takes it: 30, 4:00:00, 1-12")
    group.add_argument("--account", metavar="A", help="the account charged (sbatch --account)")
    group.add_argument("--sbatch-arg", action="append", default=[], metavar="ARG",
                       help="one more sbatch argument, as one word (repeatable; --sbatch-arg=--qos=high)")


def slurm_params(args):
    """{} for a job run on the host itself; else the wire parameters of a Slurm job. A Slurm
    option without --slurm is a usage error rather than silently ignored."""
    given = [flag for flag, _ in OPTIONS if getattr(args, flag, None) is not None] + (["sbatch_arg"] if getattr(args, "sbatch_arg", None) else [])
    if not getattr(args, "slurm", False):
        if given:
            raise CommandError("--%s is a Slurm option: add --slurm" % given[0].replace("_", "-"))
        return {}
    try:
        # Not host_settings, which reads a broken file as empty: a wrong default must say so.
        defaults = ((config.load().get("hosts") or {}).get(config.host_key(args.host)) or {}).get("slurm") or {}
    except config.ConfigError as exc:
        raise CommandError(str(exc))
    options = {}
    for flag, name in OPTIONS:
        value = getattr(args, flag, None)
        if value is None:
            value = defaults.get(name)
        if value is not None:
            if isinstance(value, int) and value < 1:
                raise CommandError("--%s must be at least 1" % flag.replace("_", "-"))
            options[name] = value
    sbatch_args = list(defaults.get("sbatch_args") or []) + list(args.sbatch_arg or [])
    if sbatch_args:
        options["sbatch_args"] = sbatch_args
    return {"job_engine": "slurm", "job_engine_options": options}
