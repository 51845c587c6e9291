"""Slurm's client commands as the agent runs them: in the user's login environment (where a
site's `module load slurm` or SLURM_CONF lives), as argv lists, never through a shell, each
under a deadline, failures turned into one line in Slurm's own words. Also the readers of
what they print: squeue's rows, host lists (`n[1-3,7]`), exit codes (`3:0`, a wait status)."""

import os
import re
import shutil
import subprocess

from ..core.login_env import login_environment
from ..core.protocol import RemoteError

COMMAND_TIMEOUT_S = 30
# squeue's --Format fields, each with `|` appended (the suffix of `type:[size][suffix]`: no
# padding, a separator); Name last, since a name may hold anything.
QUEUE_FIELDS = ("JobID", "State", "Reason", "NodeList", "exit_code", "Partition", "SubmitTime", "StartTime", "EndTime", "UserName", "Name")
NO_TIME = ("N/A", "Unknown", "None", "")


class NoSlurm(RemoteError):
    """This host has no working Slurm (no commands on the login PATH, or no controller answers)."""

    def __init__(self, message):
        super().__init__("NoSlurm", message)


class SlurmError(RemoteError):
    """A Slurm command refused or failed; the message is Slurm's own last word, in one line."""

    def __init__(self, message):
        super().__init__("SlurmError", message)


def one_line(text):
    return " ".join(str(text).split())


def slurm_words(stderr, stdout=""):
    """The line a person needs from a Slurm command's failure: its last `error:` line, without
    the command's prefix (`sbatch: error: Batch job submission failed: Invalid partition name
    specified` -> `Batch job submission failed: Invalid partition name specified`)."""
    lines = [line.strip() for line in (stderr or "").splitlines() + (stdout or "").splitlines() if line.strip()]
    errors = [line for line in lines if "error:" in line or "fatal:" in line]
    line = (errors or lines or ["no message"])[-1]
    line = re.sub(r"^[a-z]+: (error|fatal): ", "", line)
    return one_line(re.sub(r"^(error|fatal): ", "", line))


def environment():
    return login_environment()


def run(argv, env=None, timeout_s=COMMAND_TIMEOUT_S, check=True):
    """Run a Slurm command; (stdout, stderr, returncode). NoSlurm when the command is not on the
    login PATH; SlurmError (Slurm's words) when it fails and `check`."""
    env = env or environment()
    found = shutil.which(argv[0], path=env.get("PATH"))
    if not found:
        raise NoSlurm("this host has no Slurm: %s is not on the login PATH" % argv[0])
    try:
        done = subprocess.run([found] + list(argv[1:]), env=env, cwd=env.get("HOME") or os.path.expanduser("~"), stdin=subprocess.DEVNULL,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=timeout_s)
    except subprocess.TimeoutExpired:
        raise SlurmError("%s did not answer within %d s (is the Slurm controller up?)" % (argv[0], timeout_s))
    except OSError as exc:
        raise NoSlurm("this host's %s cannot run: %s" % (argv[0], exc.strerror or exc))
    stdout, stderr = done.stdout.decode("utf-8", "replace"), done.stderr.decode("utf-8", "replace")
    if check and done.returncode != 0:
        raise SlurmError(slurm_words(stderr, stdout))
    return stdout, stderr, done.returncode


def queue_argv(user):
    """One squeue for all of a user's jobs, ended ones Slurm still keeps included."""
    return ["squeue", "--noheader", "--states=all", "--user", user, "--Format", ",".join(field + ":|" for field in QUEUE_FIELDS)]


def parse_queue(text):
    """squeue rows (from queue_argv) as dicts keyed by the lower-case field name."""
    rows = {}
    keys = [field.lower() for field in QUEUE_FIELDS]
    for line in text.splitlines():
        if not line.strip():
            continue
        values = line.split("|", len(keys) - 1)
        if len(values) < len(keys):
            continue
        row = dict(zip(keys, (v.strip() for v in values)))
        row["name"] = values[-1].rstrip("|").strip()
        rows[row["jobid"]] = row
    return rows


def parse_show_job(text):
    """`scontrol show job -o ID` as a dict of its Key=Value fields (the first of each key)."""
    fields = {}
    for token in text.split():
        name, sep, value = token.partition("=")
        if sep and name not in fields:
            fields[name] = value
    return fields


def expand_hosts(text):
    """A Slurm host list as names: `n[1-3,7],gpu01` -> n1 n2 n3 n7 gpu01 (zero padding kept)."""
    names = []
    for part in re.findall(r"[^,\[]+(?:\[[^\]]*\])?[^,\[]*", text or ""):
        match = re.match(r"(.*?)\[([^\]]*)\](.*)", part)
        if not match:
            if part and part not in ("(null)", "None"):
                names.append(part)
            continue
        prefix, ranges, suffix = match.groups()
        for item in ranges.split(","):
            low, _, high = item.partition("-")
            if not high:
                names.append(prefix + low + suffix)
                continue
            width = len(low) if low.startswith("0") else 0
            for number in range(int(low), int(high) + 1):
                names.append("%s%0*d%s" % (prefix, width, number, suffix))
    return names


def parse_exit(value):
    """(exit code, signal) from `3:0` (scontrol, sacct) or a wait status (`768`, squeue's
    exit_code); (None, None) for what says neither."""
    value = (value or "").strip()
    if ":" in value:
        code, _, sig = value.partition(":")
        if code.isdigit() and sig.isdigit():
            return int(code), (int(sig) or None)
        return None, None
    if value.isdigit():
        status = int(value)
        if status & 0x7F:
            return None, status & 0x7F
        return (status >> 8) & 0xFF, None
    return None, None


def slurm_time(value):
    """Seconds since the epoch from Slurm's local ISO time, or None."""
    import time

    if not value or value in NO_TIME:
        return None
    try:
        return time.mktime(time.strptime(value, "%Y-%m-%dT%H:%M:%S"))
    except ValueError:
        return None
