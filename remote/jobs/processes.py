"""How the agent tells processes apart and finds a job's processes in /proc: a process named
for good by its pid and start time, the whole process table, a process's children as the
kernel lists them, and whether its environment carries a job's token."""

import os


def boot_id():
    try:
        with open("/proc/sys/kernel/random/boot_id") as f:
            return f.read().strip()
    except OSError:
        return ""


def _stat_fields(pid):
    """Fields 3.. of /proc/PID/stat (state first), or None when no such process."""
    try:
        with open("/proc/%d/stat" % pid, "rb") as f:
            stat = f.read()
    except (OSError, ValueError):
        return None
    # The command name (field 2) may hold spaces and parentheses: split after the last ')'.
    return stat[stat.rfind(b")") + 2 :].split()


def process_start_ticks(pid):
    """The process's start time in clock ticks since boot, or None when no such process.

    A pid together with this number names one process for good: a recycled pid has a
    different start time.
    """
    fields = _stat_fields(pid)
    if not fields or fields[0] == b"Z":
        return None
    return int(fields[19])


def is_same_process(pid, start_ticks, recorded_boot_id):
    if not pid or recorded_boot_id != boot_id():
        return False
    return process_start_ticks(pid) == start_ticks


def process_table():
    """{pid: (ppid, pgid, start_ticks)} of every process that still runs (zombies left out)."""
    table = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        fields = _stat_fields(int(name))
        if fields and fields[0] not in (b"Z", b"X"):
            table[int(name)] = (int(fields[1]), int(fields[2]), int(fields[19]))
    return table


def children_of(pid):
    """The pids of `pid`'s children, zombies included, as the kernel lists them right now.

    One read per thread of `pid`, so unlike a walk of /proc (which takes long enough for a
    process to fork and exit meanwhile) a child cannot hide between two reads. Empty when
    the process is gone or the kernel has no children files."""
    found = set()
    try:
        threads = os.listdir("/proc/%d/task" % pid)
    except OSError:
        return found
    for thread in threads:
        try:
            with open("/proc/%d/task/%s/children" % (pid, thread), "rb") as f:
                found.update(int(child) for child in f.read().split())
        except (OSError, ValueError):
            continue
    return found


def descendants(roots, table):
    """`roots` and every live descendant of theirs: by the parents in `table` (a scan of
    /proc), and by each one's children as the kernel lists them after the scan (a process
    forked while /proc was read is in no table)."""
    children = {}
    for pid, (ppid, _, _) in table.items():
        children.setdefault(ppid, []).append(pid)
    found = set()
    pending = list(roots)
    while pending:
        pid = pending.pop()
        if pid in found:
            continue
        found.add(pid)
        pending.extend(children.get(pid, ()))
        pending.extend(children_of(pid))
    return {pid for pid in found if pid in table or not is_zombie(pid)}


def is_zombie(pid):
    fields = _stat_fields(pid)
    return fields is None or fields[0] in (b"Z", b"X")


def environ_has(pid, entry):
    """Whether /proc/PID/environ holds `entry` (bytes, NAME=VALUE); False when unreadable."""
    try:
        with open("/proc/%d/environ" % pid, "rb") as f:
            return entry in f.read().split(b"\0")
    except OSError:
        return False


PR_SET_CHILD_SUBREAPER = 36


def become_subreaper():
    """Orphans of this process's descendants are re-parented to it instead of init (Linux 3.4+;
    best effort)."""
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
    except (OSError, AttributeError, ImportError):
        pass
