"""An alert as the daemon raises it, and the words every rule names a job and a time with."""

import time

from .formats import cut

NAME_MAX = 80  # characters of a job's name in an alert
KIND_CATEGORY = {"training": "training", "datagen": "training", "download": "downloads", "server": "speculation",
                 "benchmark": "speculation"}


def clock_text(epoch):
    return time.strftime("%H:%M", time.localtime(epoch))


def make_alert(key, kind, categories, host, title, message, when, job=None, urgent=False, watched=False, log_tail=None):
    return {"id": key, "kind": kind, "categories": list(categories), "urgent": urgent, "watched": watched, "host": host,
            "job_id": (job or {}).get("id"), "job_name": (job or {}).get("name"), "title": title, "message": message,
            "time": when, "time_text": clock_text(when), "log_tail": log_tail or []}


def label(job):
    """`j9 (finetune aq-k2)`: the id and, when it has one, the job's name (a long one cut with
    "…", so what follows it is not read as its end)."""
    name = (job.get("name") or "").strip()
    return "%s (%s)" % (job["id"], cut(name, NAME_MAX)) if name else job["id"]
