"""A host's row in the fleet, the same in the console's Fleet pane and in `specdeck fleet`: the
host's `fleet.summary` and the state of the link to it made into one JSON row (`row`), and that
row into the cells a person reads (`cells`, under `COLUMNS`; `table` lays rows out as lines). A
host without GPUs has a word in their column (`no NVML`) and its reason below the rows.

No figure is shown as current when it is not: each keeps the age the host gave it, grown by the
time since the summary arrived, and one the host called stale, or that came longer ago than
tui/freshness.py's QUIET_STALE_S, is marked with its age.
"""

from .. import display
from ..freshness import QUIET_STALE_S

# The state of a host that answered; every other state says why it did not (see `failure_state`).
UP = "up"
CONNECTING = "connecting"

COLUMNS = ("HOST", "STATE", "RTT", "GPUS BUSY", "MEM GiB", "HOTTEST", "THROTTLING", "JOBS", "SERVERS AL/BREAK-EVEN",
           "TRAINING STEP ETA AL", "ALERTS")

# The JSON row's GPU figures (`specdeck fleet --json`): these keys always, in this order.
GPU_KEYS = ("count", "busy", "memory_used_bytes", "memory_total_bytes", "max_temperature_c", "throttling", "age_s", "stale")
SERVER_KEYS = ("id", "accept_length", "break_even_accept_length", "break_even_source", "age_s", "stale")
TRAINING_KEYS = ("id", "step", "eta_s", "predicted_accept_length", "age_s", "stale")

# A connect failure's class (tui/transport/ssh_transport.py) -> the state word of its row.
FAILURE_STATES = {"HostKeyUnknown": "unknown host key", "HostKeyChanged": "host key changed", "HostKeyRevoked": "host key revoked",
                  "AuthenticationRefused": "authentication refused"}


def failure_state(exc):
    """(state, reason) of a host that could not be asked, from what connecting or asking raised:
    `refused`, `timed out`, `unknown host key`, `authentication refused`, `unresolved`,
    `no agent`, ... and the one line that says it (the exception's message, as the CLI prints it)."""
    reason = " ".join(str(exc).split()) or type(exc).__name__
    name = type(exc).__name__
    if name in FAILURE_STATES:
        return FAILURE_STATES[name], reason
    lowered = reason.lower()
    for words, state in ((("connection refused",), "refused"), (("timed out", "no ssh greeting", "did not finish within"), "timed out"),
                         (("cannot resolve",), "unresolved"), (("no route", "unreachable"), "unreachable"),
                         (("could not start the agent",), "no agent")):
        if any(word in lowered for word in words):
            return state, reason
    return "failed", reason


def timed_out(timeout_s):
    """(state, reason) of a host that gave no answer within `timeout_s` (connect and ask)."""
    return "timed out", "no answer within %g s (its connect timeout; --timeout changes it)" % timeout_s


def _aged(figures, since_s):
    """`figures` with `age_s` grown by `since_s` and `stale` true once the host said so or the
    summary is older than QUIET_STALE_S."""
    age = figures.get("age_s")
    return dict(figures, age_s=None if age is None else round(age + since_s, 3),
                stale=bool(figures.get("stale")) or since_s > QUIET_STALE_S)


def row(host, state, reason=None, rtt_s=None, summary=None, since_s=0.0):
    """The JSON row of one host (`specdeck fleet --json`'s `hosts` entries):
    `{host, state, reason, rtt_ms, hostname, user, at, gpus: {count, busy, memory_used_bytes,
    memory_total_bytes, max_temperature_c, throttling, age_s, stale} or null, gpus_reason,
    jobs_running, servers: [{id, accept_length, break_even_accept_length, break_even_source, age_s, stale}],
    training: [{id, step, eta_s, predicted_accept_length, age_s, stale}], alerts: [...]}`.

    `host`: as the user named it; `state`: UP when `summary` is the host's answer, CONNECTING,
    or a failure's word (`failure_state`) with `reason` its line; `rtt_s`: one request's round
    trip; `summary`: the host's `fleet.summary` reply (None when it did not answer); `since_s`:
    seconds since that reply arrived (the pane's rows grow older between summaries)."""
    summary = summary or {}
    gpus = summary.get("gpus")
    return {
        "host": host,
        "state": state,
        "reason": reason,
        "rtt_ms": None if rtt_s is None else round(rtt_s * 1000.0, 1),
        "hostname": summary.get("hostname"),
        "user": summary.get("user"),
        "at": summary.get("at"),
        "gpus": None if gpus is None else _aged({key: gpus.get(key) for key in GPU_KEYS}, since_s),
        "gpus_reason": summary.get("gpus_reason"),
        "jobs_running": summary.get("jobs_running"),
        "servers": [_aged({key: s.get(key) for key in SERVER_KEYS}, since_s) for s in summary.get("servers") or ()],
        "training": [_aged({key: t.get(key) for key in TRAINING_KEYS}, since_s) for t in summary.get("training") or ()],
        "alerts": list(summary.get("alerts") or ()),
    }


def _number(value, digits=2):
    return "-" if value is None else "%.*f" % (digits, value)


def _gib(n_bytes):
    return "-" if n_bytes is None else "%.1f" % (n_bytes / 2.0 ** 30)


def stale_mark(figures):
    """` (stale 42 s)` after a figure that is not current, else ``."""
    if not figures.get("stale"):
        return ""
    age = figures.get("age_s")
    return " (stale %s)" % ("?" if age is None else "%d s" % age)


def eta_text(seconds):
    """`ETA 2h10m`, `ETA 4m`, `ETA 30s`; `ETA -` when the run has none (no total steps known)."""
    if seconds is None:
        return "ETA -"
    seconds = int(max(0, seconds))
    if seconds >= 3600:
        return "ETA %dh%02dm" % (seconds // 3600, seconds % 3600 // 60)
    return "ETA %dm" % (seconds // 60) if seconds >= 60 else "ETA %ds" % seconds


def server_text(server):
    """`j8 2.61/2.46`: a server's accept length against the break-even it must beat (`-` when
    unknown), with where that line came from when it is not the one set by hand (`(benchmark
    j5)`), marked when stale."""
    source = server.get("break_even_source")
    said = " (%s)" % display.safe_text(source) if source and source != "set" and server.get("break_even_accept_length") is not None else ""
    return "%s %s/%s%s%s" % (server["id"], _number(server.get("accept_length")), _number(server.get("break_even_accept_length")),
                             said, stale_mark(server))


def training_text(run):
    """`j9 step 1840 ETA 2h10m AL 2.61`: a run's step, time left and predicted accept length."""
    return "%s step %s %s AL %s%s" % (run["id"], "-" if run.get("step") is None else run["step"], eta_text(run.get("eta_s")),
                                      _number(run.get("predicted_accept_length")), stale_mark(run))


def alerts_text(alerts):
    """`3 (1 urgent)`, `0`."""
    urgent = sum(1 for alert in alerts if alert.get("urgent"))
    return "%d (%d urgent)" % (len(alerts), urgent) if urgent else str(len(alerts))


def cells(row):
    """The strings a person reads for one row, one per COLUMNS entry (a stale figure carries its
    age), each a host's text with its controls as escapes. A host that did not answer has its
    host, state and rtt, then its reason in place of the figures: a list of four (`table` writes
    the reason across the figures' columns)."""
    return [display.safe_text(cell) for cell in _cells(row)]


def _cells(row):
    rtt = "-" if row.get("rtt_ms") is None else "%d ms" % round(row["rtt_ms"])
    if row["state"] != UP:
        return [row["host"], row["state"], rtt, row.get("reason") or ("waiting for its first answer" if row["state"] == CONNECTING else "-")]
    gpus = row.get("gpus")
    if gpus is None:
        gpu_cells = [no_gpus_word(row), "-", "-", "-"]  # its reason is long: below the rows (table, the pane's detail)
    else:
        mark = stale_mark(gpus)
        gpu_cells = ["%s/%s%s" % (_count(gpus.get("busy")), _count(gpus.get("count")), mark),
                     "%s/%s%s" % (_gib(gpus.get("memory_used_bytes")), _gib(gpus.get("memory_total_bytes")), mark),
                     "-" if gpus.get("max_temperature_c") is None else "%d°C%s" % (round(gpus["max_temperature_c"]), mark),
                     "%s%s" % (_count(gpus.get("throttling")), mark)]
    return ([row["host"], row["state"], rtt] + gpu_cells
            + [_count(row.get("jobs_running")), " ".join(server_text(s) for s in row.get("servers") or ()) or "-",
               " ".join(training_text(t) for t in row.get("training") or ()) or "-", alerts_text(row.get("alerts") or ())])


def no_gpus_word(row):
    """The short word a GPU column shows for a host that answered without GPU figures
    (`no NVML`, `no sample yet`, `no telemetry`, else `no GPUs`); its whole reason is `gpus_reason`."""
    reason = (row.get("gpus_reason") or "").lower()
    for words, word in ((("nvml",), "no NVML"), (("no gpu sample",), "no sample yet"), (("no telemetry",), "no telemetry")):
        if any(part in reason for part in words):
            return word
    return "no GPUs"


def _count(value):
    return "-" if value is None else str(value)


def no_gpus_reason(row):
    """`no GPUs shown: NVML did not start: ...` for a host that answered without GPU figures
    (its cell has only `no_gpus_word`), else None. The host's text, as it sent it."""
    if row["state"] != UP or row.get("gpus") is not None:
        return None
    return "no GPUs shown: %s" % (row.get("gpus_reason") or "no GPU telemetry")


def table(rows):
    """The rows as lines for a terminal: a header of COLUMNS, one line per host, columns aligned;
    a host that did not answer has its reason after its rtt, across the figures' columns; after
    a blank line, why each host that answered shows no GPU (`no_gpus_reason`)."""
    lines = [list(COLUMNS)] + [cells(r) for r in rows]
    widths = [max(len(line[i]) for line in lines if len(line) == len(COLUMNS) or i < 3) for i in range(len(COLUMNS))]
    notes = [display.safe_text("%s: %s" % (r["host"], no_gpus_reason(r))) for r in rows if no_gpus_reason(r)]
    return (["  ".join(cell.ljust(width) for cell, width in zip(line, widths)).rstrip() for line in lines]
            + ([""] + notes if notes else []))
