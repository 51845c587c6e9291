"""A Slurm job's record, as engine.json holds it (engine.py writes it at submit, the watcher
rewrites it whenever Slurm says something new): Slurm's job states, a record made from an
squeue row or from sacct's lines, and what a job's description says from a record (its state
in our words, its nodes, Slurm's pending reason)."""

import os

from ..core.records import read_json, write_json
from . import commands

PENDING = ("PENDING", "CONFIGURING", "REQUEUED", "REQUEUE_HOLD", "REQUEUE_FED", "RESV_DEL_HOLD")
RUNNING = ("RUNNING", "COMPLETING", "SUSPENDED", "STOPPED", "SIGNALING", "STAGE_OUT", "RESIZING")
SUCCEEDED = ("COMPLETED",)
STOPPED = ("CANCELLED",)
LOST = "LOST"  # ours: Slurm forgot the job before anyone heard how it ended


def job_fields(record, stop=None):
    """What a job's description says about a Slurm job, from its record (ours or a foreign row)."""
    state = record.get("state") or "PENDING"
    nodes = commands.expand_hosts(record.get("nodelist")) if state not in PENDING else []
    if state in PENDING:
        process_state, word = "starting", "pending"
    elif state in RUNNING:
        process_state = word = "running"
    elif state == LOST:
        process_state = word = "lost"
    elif state in STOPPED or stop is not None:  # as for a local job: a stop asked for ends it as stopped, whatever it exits with
        process_state = word = "stopped"
    elif state in SUCCEEDED:
        process_state = word = "succeeded"
    else:
        process_state = word = "failed"
    reason = record.get("reason") if state in PENDING and record.get("reason") not in (None, "", "None") else None
    slurm = {
        "id": record.get("slurm_id"),
        "state": state,
        "reason": record.get("reason"),
        "nodes": nodes,
        "nodelist": record.get("nodelist") or "",
        "partition": record.get("partition"),
        "script": record.get("script"),
        "output": record.get("output"),
        "exit_code": record.get("exit_code"),
        "signal": record.get("signal"),
        "started_at": record.get("started_at"),
        "ended_at": record.get("ended_at"),
        "killed_after_grace": bool(record.get("kill_sent_at")),  # a stop's TERM was not enough
    }
    return {
        "state": word,
        "process_state": process_state,
        "exit_code": record.get("exit_code") if process_state not in ("starting", "running") else None,
        "signal": record.get("signal") if process_state not in ("starting", "running") else None,
        "started_at": record.get("started_at"),
        "ended_at": record.get("ended_at") if process_state not in ("starting", "running") else None,
        "containment": "slurm",
        "slurm_id": record.get("slurm_id"),
        "nodes": nodes,
        "pending_reason": reason,
        "slurm": slurm,
    }


def row_record(row):
    """A record (as engine.json holds it) from one squeue row."""
    state = row["state"].split()[0] if row.get("state") else "PENDING"
    ended = state not in PENDING and state not in RUNNING
    code, sig = commands.parse_exit(row.get("exit_code")) if ended else (None, None)
    return {
        "slurm_id": row["jobid"],
        "state": state,
        "reason": row.get("reason"),
        "nodelist": row.get("nodelist") or "",
        "partition": row.get("partition"),
        "exit_code": code,
        "signal": sig,
        "started_at": commands.slurm_time(row.get("starttime")) if state not in PENDING else None,
        "ended_at": commands.slurm_time(row.get("endtime")) if ended else None,
        "submitted_at": commands.slurm_time(row.get("submittime")),
        "name": row.get("name"),
        "user": row.get("username"),
    }


def final(record):
    state = (record or {}).get("state") or "PENDING"
    return state not in PENDING and state not in RUNNING


def sacct_row(text, slurm_id):
    """How job `slurm_id` ended, from sacct's `JobID|State|ExitCode|NodeList|End` lines: only its
    own lines count, each field checked. Lines of it that disagree (the job completion log is a
    text file a job's name can write lines into) say nothing: None, as for no line at all."""
    found = None
    for line in text.splitlines():
        values = line.split("|")
        if len(values) != 5 or values[0] != slurm_id:
            continue
        _, state, exit_value, nodelist, end = values
        state = state.split(" ")[0]
        if not (commands.STATE.fullmatch(state) and commands.EXIT_VALUE.fullmatch(exit_value) and commands.PLAIN.fullmatch(nodelist)
                and (end in commands.NO_TIME or commands.ISO_TIME.fullmatch(end))):
            return None
        exit_code, sig = commands.parse_exit(exit_value)
        row = {"state": state, "nodelist": nodelist, "exit_code": exit_code, "signal": sig, "ended_at": commands.slurm_time(end)}
        if found is not None and found != row:
            return None
        found = row
    return found


def read_record(job_dir):
    record = read_json(os.path.join(job_dir, "engine.json"))
    return record if isinstance(record, dict) else None


def write_record(job_dir, record):
    write_json(os.path.join(job_dir, "engine.json"), record)
