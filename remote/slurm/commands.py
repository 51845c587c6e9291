"""Slurm's client commands as the agent runs them: in the user's login environment (where a
site's `module load slurm` or SLURM_CONF lives), as argv lists, never through a shell, each
under a deadline and a cap on what it may print, failures turned into one line in Slurm's own
words. Also the readers of what they print: squeue's rows, `scontrol show -o`'s fields, host
lists (`n[1-3,7]`), exit codes (`3:0`, a wait status).

What Slurm prints holds text its users chose (a job's name, its output path, its comment), and
such text may hold anything, newlines and separators included; the readers here are built so that
such text can only make its own job's row unreadable, never another job's: squeue is read as JSON
(`squeue --json`, Slurm 21.08 and later), where a name is one string whatever it holds; where
Slurm has no JSON (or its answer is too large to read), squeue's rows end with a marker made
afresh for each call (a name cannot hold what it cannot know), the name comes last, every other
field is checked. Either way a job listed twice in one answer is ambiguous (its state is left as
it was). `scontrol show job -o` is read only for keys it prints once."""

import json

import os
import re
import selectors
import shutil
import subprocess
import time

from ..jobs.login_env import login_environment
from ..core.protocol import RemoteError

COMMAND_TIMEOUT_S = 30
OUTPUT_CAP_BYTES = 32 << 20  # what one Slurm command may print (a user's squeue: ~150 bytes a job)
# squeue's --Format fields, each with `|` appended (the suffix of `type:[size][suffix]`: no size,
# so no padding and no truncation; a separator); the fields Slurm alone writes first, Name last,
# since a name may hold anything. The last field's suffix ends with the call's marker.
QUEUE_FIELDS = ("JobID", "State", "exit_code", "SubmitTime", "StartTime", "EndTime", "Partition", "NodeList", "UserName", "Reason", "Name")
NO_TIME = ("N/A", "Unknown", "None", "")
JOB_ID = re.compile(r"[0-9]+(?:_[0-9]+|_\[[0-9,%-]*\])?(?:\+[0-9]+)?")
STATE = re.compile(r"[A-Z][A-Z_]*")
ISO_TIME = re.compile(r"[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}")
EXIT_VALUE = re.compile(r"[0-9]+(?::[0-9]+)?")
PLAIN = re.compile(r"[^|\s]*")  # partition, node list, user name: Slurm's names, no separator, no space


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


def run(argv, env=None, timeout_s=COMMAND_TIMEOUT_S, check=True, cap_bytes=OUTPUT_CAP_BYTES):
    """Run a Slurm command; (stdout, stderr, returncode). NoSlurm when the command is not on the
    login PATH; SlurmError (Slurm's words) when it fails and `check`, when it does not end within
    `timeout_s`, or when it prints more than `cap_bytes` (it is killed: a part is never read as
    a whole)."""
    env = env or environment()
    found = shutil.which(argv[0], path=env.get("PATH"))
    if not found:
        raise NoSlurm("this host has no Slurm: %s is not on the login PATH" % argv[0])
    try:
        proc = subprocess.Popen([found] + list(argv[1:]), env=env, cwd=env.get("HOME") or os.path.expanduser("~"), stdin=subprocess.DEVNULL,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    except OSError as exc:
        raise NoSlurm("this host's %s cannot run: %s" % (argv[0], exc.strerror or exc))
    try:
        out, err = _collect(proc, time.monotonic() + timeout_s, cap_bytes)
    except _TooSlow:
        raise SlurmError("%s did not answer within %d s (is the Slurm controller up?)" % (argv[0], timeout_s))
    except _TooMuch:
        raise SlurmError("%s printed more than %d bytes: not read" % (argv[0], cap_bytes))
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait()
        proc.stdout.close()
        proc.stderr.close()
    stdout, stderr = out.decode("utf-8", "replace"), err.decode("utf-8", "replace")
    if check and proc.returncode != 0:
        raise SlurmError(slurm_words(stderr, stdout))
    return stdout, stderr, proc.returncode


class _TooSlow(Exception):
    pass


class _TooMuch(Exception):
    pass


def _collect(proc, deadline, cap_bytes):
    """Both pipes of `proc` read to their end, together at most `cap_bytes`, by `deadline`."""
    chunks = {proc.stdout.fileno(): [], proc.stderr.fileno(): []}
    total = 0
    with selectors.DefaultSelector() as selector:
        for fd in chunks:
            selector.register(fd, selectors.EVENT_READ)
        while selector.get_map():
            left = deadline - time.monotonic()
            if left <= 0:
                raise _TooSlow()
            for key, _ in selector.select(left):
                data = os.read(key.fd, 65536)
                if not data:
                    selector.unregister(key.fd)
                    continue
                total += len(data)
                if total > cap_bytes:
                    raise _TooMuch()
                chunks[key.fd].append(data)
    left = deadline - time.monotonic()
    try:
        proc.wait(max(left, 0.001))
    except subprocess.TimeoutExpired:
        raise _TooSlow()
    return b"".join(chunks[proc.stdout.fileno()]), b"".join(chunks[proc.stderr.fileno()])


def queue_marker():
    """A row terminator for one squeue call: random letters no job's name can know beforehand."""
    import secrets
    import string

    return "".join(secrets.choice(string.ascii_letters) for _ in range(24))


def queue_argv(user, marker):
    """One squeue for all of a user's jobs, ended ones Slurm still keeps included. Each row ends
    with `marker` (the last field's suffix), so a name holding newlines cannot make rows."""
    fields = [field + ":|" for field in QUEUE_FIELDS]
    fields[-1] += "@" + marker
    return ["squeue", "--noheader", "--states=all", "--user", user, "--Format", ",".join(fields)]


def parse_queue(text, marker):
    """(rows, ambiguous) from squeue's answer to queue_argv(user, marker): rows by Slurm id as
    dicts keyed by the lower-case field name; ambiguous, the ids whose rows cannot be trusted (a
    field that is not what Slurm writes there, or the id listed twice in one answer): those are
    left out of rows, and whoever reads them keeps what it knew. A row is what lies between two
    markers; one whose id does not parse is no job's. Linear in the answer's size."""
    rows, ambiguous = {}, set()
    keys = [field.lower() for field in QUEUE_FIELDS]
    for record in text.split("|@" + marker)[:-1]:
        values = record.lstrip("\r\n").split("|", len(keys) - 1)
        job_id = values[0].strip()
        if not JOB_ID.fullmatch(job_id):
            continue
        if job_id in rows or job_id in ambiguous or len(values) < len(keys):
            rows.pop(job_id, None)
            ambiguous.add(job_id)
            continue
        row = dict(zip(keys, (v.strip() for v in values[:-1])))
        row["name"] = values[-1]
        if not _row_checks(row):
            ambiguous.add(job_id)
            continue
        rows[job_id] = row
    return rows, ambiguous


def _row_checks(row):
    times = all(row[key] in NO_TIME or ISO_TIME.fullmatch(row[key]) for key in ("submittime", "starttime", "endtime"))
    plain = all(PLAIN.fullmatch(row[key]) for key in ("partition", "nodelist", "username"))
    exit_ok = row["exit_code"] in NO_TIME or EXIT_VALUE.fullmatch(row["exit_code"])
    return bool(STATE.fullmatch(row["state"]) and times and plain and exit_ok)


def queue_json_argv(user):
    """One squeue for all of a user's jobs, as JSON. Slurm 22.05 ignores the filters with --json
    (the whole cluster's jobs come back): parse_queue_json keeps the user's."""
    return ["squeue", "--json", "--states=all", "--user", user]


def parse_queue_json(text, user):
    """(rows, ambiguous) from `squeue --json`, as parse_queue gives them (the same keys, times in
    Slurm's local ISO form, the exit code as a wait status or `code:signal`); only `user`'s jobs.
    ValueError when the answer is not squeue's JSON. A job listed twice is ambiguous."""
    answer = json.loads(text)
    jobs = answer.get("jobs") if isinstance(answer, dict) else None
    if not isinstance(jobs, list):
        raise ValueError("squeue's JSON holds no list of jobs")
    rows, ambiguous = {}, set()
    for job in jobs:
        if not isinstance(job, dict) or job.get("user_name") != user:
            continue
        row = _json_row(job)
        if row is None:
            continue
        job_id = row["jobid"]
        if job_id in rows or job_id in ambiguous:
            rows.pop(job_id, None)
            ambiguous.add(job_id)
            continue
        if not _row_checks(row):
            ambiguous.add(job_id)
            continue
        rows[job_id] = row
    return rows, ambiguous


def _number(value):
    """A JSON number of Slurm's: a plain one (v0.0.38) or `{set, infinite, number}` (later)."""
    if isinstance(value, dict):
        return value.get("number") if value.get("set", True) and not value.get("infinite") else None
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _json_time(value):
    epoch = _number(value)
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(epoch)) if epoch else "None"


def _json_exit(value):
    if isinstance(value, dict):  # later Slurm: {status, return_code, signal: {id}}
        code = _number(value.get("return_code"))
        signal = value.get("signal")
        signal = _number(signal.get("id") if isinstance(signal, dict) else signal) or 0
        return "" if code is None else "%d:%d" % (code, signal)
    number = _number(value)
    return "" if number is None else str(number)


def _json_job_id(job):
    job_id = _number(job.get("job_id"))
    if job_id is None:
        return None
    array_id, task = _number(job.get("array_job_id")), _number(job.get("array_task_id"))
    tasks = job.get("array_task_string")
    het_id, offset = _number(job.get("het_job_id")), _number(job.get("het_job_offset"))
    if array_id and task is not None:
        return "%d_%d" % (array_id, task)
    if array_id and isinstance(tasks, str) and tasks:
        return "%d_[%s]" % (array_id, tasks)
    if het_id and offset is not None:
        return "%d+%d" % (het_id, offset)
    return str(job_id)


def _json_row(job):
    job_id = _json_job_id(job)
    state = job.get("job_state")
    state = state[0] if isinstance(state, list) and state else state
    if job_id is None or not isinstance(state, str):
        return None
    text = {key: job.get(key) if isinstance(job.get(key), str) else "" for key in ("partition", "nodes", "user_name", "state_reason", "name")}
    return {"jobid": job_id, "state": state, "exit_code": _json_exit(job.get("exit_code")), "submittime": _json_time(job.get("submit_time")),
            "starttime": _json_time(job.get("start_time")), "endtime": _json_time(job.get("end_time")), "partition": text["partition"],
            "nodelist": text["nodes"], "username": text["user_name"], "reason": text["state_reason"], "name": text["name"]}


def parse_show_job(text):
    """`scontrol show job -o ID` (or `show node -o`) as a dict of its Key=Value fields, only of
    the keys printed once: a key a job's own text (its name, its comment, its paths) repeats is
    left out, so such text cannot stand in for what Slurm says. A value ends at whitespace."""
    fields, seen = {}, set()
    for token in text.split():
        name, sep, value = token.partition("=")
        if not sep or not name:
            continue
        if name in seen:
            fields.pop(name, None)
            continue
        seen.add(name)
        fields[name] = value
    return fields


KEY_TOKEN = re.compile(r"\s[A-Za-z][A-Za-z0-9_/:]*=")


def show_job_path(text, key):
    """The path `key` (StdOut, StdErr) names in `scontrol show job -o ID`'s one line, spaces kept:
    from `key=` to the next key; None when the key is not printed exactly once, or the answer is
    not one line."""
    text = text.rstrip("\n")
    if "\n" in text or key not in parse_show_job(text):
        return None
    start = re.search(r"(?:^|\s)%s=" % re.escape(key), text)
    if start is None:
        return None
    rest = text[start.end():]
    end = KEY_TOKEN.search(rest)
    return (rest[:end.start()] if end else rest).strip() or None


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
    if not value or value in NO_TIME:
        return None
    try:
        return time.mktime(time.strptime(value, "%Y-%m-%dT%H:%M:%S"))
    except ValueError:
        return None
